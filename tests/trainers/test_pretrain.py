"""Oracle pre-training with Lightning: artifact, DDP on CPU, clear errors, encoder fine-tuning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from torchroute.data.table import RoutingTable, TableError
from torchroute.models.oracles import OracleArtifactError
from torchroute.trainers.pretrain import run_pretrain

FAST = {"max_epochs": 3, "enable_progress_bar": False, "enable_model_summary": False}


def tiny_table(
    n: int = 160,
    k: int = 3,
    d: int = 8,
    seed: int = 0,
    text: bool = False,
    embeddings: bool = True,
    arms: tuple[str, ...] | None = None,
) -> RoutingTable:
    gen = torch.Generator().manual_seed(seed)
    emb = torch.randn(n, d, generator=gen)
    scores = (
        torch.sigmoid(2 * emb @ torch.randn(d, k, generator=gen)) > torch.rand(n, k, generator=gen)
    ).double()
    costs = (emb[:, :k].abs() + 0.5).double() * 1e-3
    split = ["train"] * (n // 2) + ["val"] * (n // 4) + ["test"] * (n - n // 2 - n // 4)
    words = ["alpha", "beta", "gamma", "delta", "omega"]
    return RoutingTable(
        scores=scores,
        costs=costs,
        arm_names=arms or tuple(f"arm{i}" for i in range(k)),
        query_ids=[f"q{i}" for i in range(n)],
        split=split,
        text=[f"{words[i % 5]} {words[(i // 5) % 5]} question {i}" for i in range(n)]
        if text
        else None,
        embeddings=emb if embeddings else None,
    )


def _cfg(table, out_dir, **extra):
    cfg = {
        "data": table,
        "out_dir": str(out_dir),
        "logger": None,
        "trainer": dict(FAST),
        "train": {"batch_size": 32, "lr": 1e-3},
    }
    cfg.update(extra)
    return cfg


def test_pretrain_artifact_loads_without_lightning(tmp_path):
    table = tiny_table()
    metrics = run_pretrain(_cfg(table, tmp_path, logger={"project": "torchroute-tests"}))
    for key in ("accuracy_mae", "baseline_mae", "cost_mre", "propagation_corr", "anchor_corr"):
        assert isinstance(metrics[key], float), key
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    assert (tmp_path / "checkpoints" / "best.ckpt").is_file()
    assert list((tmp_path / "wandb").glob("offline-run-*"))  # real wandb, offline
    raw = torch.load(tmp_path / "oracle.pt", weights_only=True)
    assert raw["format"] == 1 and raw["arm_names"] == list(table.arm_names)
    assert raw["embed_dim"] == 8
    script = textwrap.dedent(f"""
        import sys
        sys.modules["lightning"] = sys.modules["pytorch_lightning"] = None  # must not be needed
        import torch
        from torchroute.models.oracles import load_oracle
        oracle = load_oracle({str(tmp_path / "oracle.pt")!r}, embed_dim=8)
        out = oracle(torch.randn(5, 8))
        assert out["accuracy"].shape == (5, 3) and (out["cost"] >= 0).all()
        assert "lightning" not in [m.split(".")[0] for m in sys.modules if sys.modules[m]]
        print("ok")
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-2000:]


def test_pretrain_ddp_on_two_cpu_processes(tmp_path):
    torch.save(tiny_table(n=120), tmp_path / "table.pt")
    script = tmp_path / "ddp_run.py"
    script.write_text(
        textwrap.dedent(f"""
        import torch
        from torchroute.trainers.pretrain import run_pretrain
        table = torch.load({str(tmp_path / "table.pt")!r}, weights_only=False)
        run_pretrain({{"data": table, "out_dir": {str(tmp_path / "out")!r}, "logger": None,
                      "train": {{"batch_size": 16, "lr": 1e-3}},
                      "trainer": {{"strategy": "ddp", "accelerator": "cpu", "devices": 2,
                                  "max_epochs": 2, "enable_progress_bar": False,
                                  "enable_model_summary": False}}}})
    """)
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["epochs"] == 2 and (tmp_path / "out" / "oracle.pt").is_file()


def test_clear_errors_for_mismatched_checkpoint_and_data(tmp_path):
    run_pretrain(_cfg(tiny_table(), tmp_path / "first", trainer={**FAST, "max_epochs": 1}))
    artifact = str(tmp_path / "first" / "oracle.pt")
    other_arms = tiny_table(arms=("arm0", "arm1", "gpt-x"))
    with pytest.raises(OracleArtifactError, match=r"trained for arms .*gpt-x"):
        run_pretrain(_cfg(other_arms, tmp_path / "a", oracle={"init_from": artifact}))
    wider = tiny_table(d=16)
    with pytest.raises(OracleArtifactError, match=r"reads 8-d embeddings.*16-d"):
        run_pretrain(_cfg(wider, tmp_path / "b", oracle={"init_from": artifact}))
    bare = tiny_table(embeddings=False)
    with pytest.raises(TableError, match="no query text and no embeddings"):
        run_pretrain(_cfg(bare, tmp_path / "c"))
    with pytest.raises(TableError, match="give an encoder"):
        run_pretrain(_cfg(tiny_table(text=True, embeddings=False), tmp_path / "d"))
    with pytest.raises(ValueError, match="unknown train options"):
        run_pretrain(_cfg(tiny_table(), tmp_path / "e", train={"learning_rate": 1.0}))


def _tiny_deberta(path):
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
    for w in ["alpha", "beta", "gamma", "delta", "omega", "question", *map(str, range(200))]:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        model_max_length=32,
    )
    config = transformers.DebertaV2Config(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    transformers.DebertaV2Model(config).save_pretrained(path)
    fast.save_pretrained(path)


def test_finetune_top_layer_of_tiny_deberta(tmp_path):
    _tiny_deberta(tmp_path / "deberta")
    table = tiny_table(n=80, text=True, embeddings=False)
    cfg = _cfg(
        table,
        tmp_path / "out",
        encoder=str(tmp_path / "deberta"),
        train={"batch_size": 16, "lr": 1e-3, "unfreeze_layers": 1, "encoder_lr": 1e-3},
        trainer={**FAST, "max_epochs": 2},
    )
    metrics = run_pretrain(cfg)
    assert metrics["num_test"] == 20
    from torchroute.models.encoders import load_encoder
    from torchroute.models.oracles import load_oracle

    oracle = load_oracle(tmp_path / "out" / "oracle.pt", embed_dim=16)
    assert oracle.encoder_name == str((tmp_path / "out" / "encoder").resolve())
    tuned = load_encoder(oracle.encoder_name)
    original = load_encoder(tmp_path / "deberta")
    top = next(n for n, _ in tuned.model.named_parameters() if "encoder.layer.1." in n)
    bottom = next(n for n, _ in tuned.model.named_parameters() if "encoder.layer.0." in n)
    tuned_p, orig_p = dict(tuned.model.named_parameters()), dict(original.model.named_parameters())
    assert not torch.equal(tuned_p[top], orig_p[top])  # the top layer was trained
    assert torch.equal(tuned_p[bottom], orig_p[bottom])  # the rest stayed frozen
    assert oracle(tuned.encode(list(table.text[:3]), progress=False))["accuracy"].shape == (3, 3)
