"""Oracle pre-training with Lightning: artifact, DDP on CPU, clear errors, encoder fine-tuning."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from torchroute.data.table import RoutingTable, TableError
from torchroute.models import MultiHeadOracle
from torchroute.models.oracles import OracleArtifactError, save_oracle
from torchroute.trainers import OracleModule, RoutingDataModule
from torchroute.trainers.pretrain import (
    PretrainConfigError,
    load_or_pretrain,
    packaged_config,
    resolve_config,
    run_pretrain,
)

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
        "data_module": {"batch_size": 32},
        "module": {"lr": 1e-3},
    }
    cfg.update(extra)
    return cfg


def test_pretrain_artifact_loads_without_lightning(tmp_path):
    table = tiny_table()
    metrics = run_pretrain(_cfg(table, tmp_path, logger={"project": "torchroute-tests"}))
    for key in ("accuracy_mae", "baseline_mae", "cost_mre", "propagation_corr", "anchor_corr"):
        assert isinstance(metrics[key], float), key
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    best = torch.load(tmp_path / "checkpoints" / "best.ckpt", weights_only=True)
    assert best["hyper_parameters"]["loss"] == "huber"  # the OracleModule default
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


@pytest.mark.slow  # three processes import torch and Lightning (~40 s); make test-all runs it
def test_pretrain_ddp_on_two_cpu_processes(tmp_path):
    torch.save(tiny_table(n=120), tmp_path / "table.pt")
    script = tmp_path / "ddp_run.py"
    script.write_text(
        textwrap.dedent(f"""
        import torch
        from torchroute.trainers.pretrain import run_pretrain
        table = torch.load({str(tmp_path / "table.pt")!r}, weights_only=False)
        run_pretrain({{"data": table, "out_dir": {str(tmp_path / "out")!r}, "logger": None,
                      "data_module": {{"batch_size": 16}}, "module": {{"lr": 1e-3}},
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
        run_pretrain(_cfg(other_arms, tmp_path / "a", train={"init_from": artifact}))
    wider = tiny_table(d=16)
    with pytest.raises(OracleArtifactError, match=r"reads 8-d embeddings.*16-d"):
        run_pretrain(_cfg(wider, tmp_path / "b", train={"init_from": artifact}))
    bare = tiny_table(embeddings=False)
    with pytest.raises(TableError, match="no query text and no embeddings"):
        run_pretrain(_cfg(bare, tmp_path / "c"))
    with pytest.raises(TableError, match="give an encoder"):
        run_pretrain(_cfg(tiny_table(text=True, embeddings=False), tmp_path / "d"))


@pytest.mark.parametrize(
    ("section", "value", "message"),
    [
        ("module", {"lrr": 1.0}, r"^unknown option module\.lrr \(torchroute\.trainers\.Oracle"),
        ("train", {"lr": 1e-3}, r"^unknown option train\.lr .*did you mean module\.lr\?$"),
        ("trainer", {"max_epoch": 3}, r"^unknown option trainer\.max_epoch "),
        ("data_module", {"batchsize": 8}, r"^unknown option data_module\.batchsize "),
        ("oracle", {"embed_dim": 4}, r"^cfg\.oracle\.embed_dim is set by run_pretrain"),
        ("oracle", {"_target_": "torchroute.models.Nope"}, r"cfg\.oracle\._target_: cannot"),
    ],
)
def test_unknown_options_are_named_before_training(tmp_path, section, value, message):
    out = tmp_path / "out"
    with pytest.raises(PretrainConfigError, match=message) as info:
        run_pretrain(_cfg(tiny_table(), out, **{section: value}))
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)
    assert not out.exists()  # refused before anything was written


def test_packaged_sections_are_the_constructor_defaults():
    """configs/pretrain.yaml sets no value that disagrees with its target's default."""
    cfg = packaged_config()
    for section, target in [
        ("oracle", MultiHeadOracle),
        ("module", OracleModule),
        ("data_module", RoutingDataModule),
    ]:
        params = inspect.signature(target).parameters
        for key, value in cfg[section].items():
            if not key.startswith("_"):
                assert params[key].default == value, f"{section}.{key}"
    params = inspect.signature(OracleModule).parameters
    assert params["loss"].default == "huber" and params["huber_delta"].default == 1.0


def test_given_sections_merge_over_the_packaged_config(tmp_path):
    table = tiny_table()
    cfg = resolve_config(
        {
            "data": table,
            "out_dir": str(tmp_path),
            "logger": None,
            "module": {"lr": 1e-3},
            "trainer": {"_target_": "lightning.Trainer", "max_epochs": 2},
        }
    )
    assert cfg["data"] is table and cfg["logger"] is None
    assert cfg["module"]["lr"] == 1e-3 and cfg["module"]["loss"] == "huber"
    assert cfg["module"]["_target_"] == "torchroute.trainers.OracleModule"
    assert cfg["trainer"]["max_epochs"] == 2 and cfg["trainer"]["accelerator"] == "cpu"
    csv = {"_target_": "lightning.pytorch.loggers.CSVLogger", "save_dir": str(tmp_path)}
    other = resolve_config({"data": table, "out_dir": str(tmp_path), "logger": csv})
    assert other["logger"] == csv  # another _target_ replaces the wandb options


def test_load_or_pretrain_checks_arms_and_embedding_size(tmp_path):
    table = tiny_table()
    cfg = _cfg(table, tmp_path / "run", trainer={**FAST, "max_epochs": 1})
    oracle = load_or_pretrain(None, cfg, arm_names=table.arm_names, embed_dim=8)
    assert oracle.arm_names == table.arm_names and (tmp_path / "run" / "oracle.pt").is_file()
    other = MultiHeadOracle(6, 3, feature_dim=4, hidden=8, arm_names=["a", "b", "c"])
    save_oracle(other, tmp_path / "other" / "oracle.pt")
    assert load_or_pretrain(tmp_path / "other", arm_names=["a", "b", "c"], embed_dim=6)
    with pytest.raises(OracleArtifactError, match=r"trained for arms .*arm0"):
        load_or_pretrain(tmp_path / "other", arm_names=table.arm_names)
    with pytest.raises(OracleArtifactError, match=r"reads 6-d embeddings.*8-d"):
        load_or_pretrain(tmp_path / "other" / "oracle.pt", embed_dim=8)


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
        data_module={"batch_size": 16},
        module={"lr": 1e-3, "encoder_lr": 1e-3},
        train={"unfreeze_layers": 1},
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


def test_load_or_pretrain_trains_a_config_once_per_process(tmp_path):
    """A config naming the same oracle twice (features and a learner) trains it once: the
    second call loads the artifact the first wrote (same weights, file not rewritten)."""
    table = tiny_table()
    cfg = _cfg(table, tmp_path / "once", trainer={**FAST, "max_epochs": 1})
    first = load_or_pretrain(None, cfg, arm_names=table.arm_names, embed_dim=8)
    written = (tmp_path / "once" / "oracle.pt").stat().st_mtime_ns
    second = load_or_pretrain(None, cfg, arm_names=table.arm_names, embed_dim=8)
    assert (tmp_path / "once" / "oracle.pt").stat().st_mtime_ns == written
    for key, value in first.state_dict().items():
        assert torch.equal(second.state_dict()[key], value), key
    with pytest.raises(OracleArtifactError, match="trained for arms"):
        load_or_pretrain(None, cfg, arm_names=["x", "y", "z"])  # still checked when cached
