"""A run folder is data: serving builds no ``_target_`` that is not torchroute's own.

A ``config.yaml`` that names ``torch.hub.load`` (with a ``hubconf.py`` planted beside it)
or ``torchroute.io.write_text_atomic`` is refused with one line naming the key; nothing is
imported from the folder, nothing runs and nothing is written.
"""

from __future__ import annotations

import pytest
import yaml
from omegaconf import OmegaConf

from torchroute.cli import main
from torchroute.configs_path import compose_config
from torchroute.run import ConfigError, run_config
from torchroute.run.trust import check_trusted, is_allowed
from torchroute.serve import load_router

HUBCONF = """\
from pathlib import Path
Path(__file__).with_name("imported").write_text("hubconf.py ran")
def evil(**kwargs):
    Path(__file__).with_name("called").write_text("evil ran")
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    cfg = compose_config(
        "simulate",
        [
            f"out_dir={out}",
            "rhos=[0]",
            "seeds=[0]",
            "features.pca_dim=3",
            "log_every=10",
            "progress=false",
            "report=false",
            "~logger",
        ],
    )
    OmegaConf.set_struct(cfg, False)
    cfg.learners = OmegaConf.create({"linucb": cfg.learners.linucb})
    cfg.data = OmegaConf.create({"_target_": "tests.conftest.make_table"})
    cfg.encoder = None
    run_config(cfg)
    return out


def _planted(run_dir, tmp_path, edit):
    folder = tmp_path / "planted"
    folder.mkdir()
    for path in run_dir.rglob("*"):
        if path.is_file():
            target = folder / path.relative_to(run_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    (folder / "hubconf.py").write_text(HUBCONF)
    config = yaml.safe_load((folder / "config.yaml").read_text())
    edit(config, folder)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    return folder


def _files(folder):
    return sorted((p.relative_to(folder), p.read_bytes()) for p in folder.rglob("*") if p.is_file())


def _hub(config, folder):
    config["learners"]["linucb"] = {
        "_target_": "torch.hub.load",
        "repo_or_dir": str(folder),
        "model": "evil",
        "source": "local",
        "trust_repo": True,
    }


def _writer(config, folder):
    config["learners"]["linucb"]["_target_"] = "torchroute.io.write_text_atomic"
    config["learners"]["linucb"]["_partial_"] = False
    config["learners"]["linucb"]["path"] = str(folder / "written.txt")
    config["learners"]["linucb"]["text"] = "written"


def _nested(config, folder):
    config["encoder"] = {"encoder": {"_target_": "torch.hub.load", "repo_or_dir": str(folder)}}


@pytest.mark.parametrize(
    ("edit", "key", "target"),
    [
        (_hub, r"learners\.linucb\._target_", "torch.hub.load"),
        (_writer, r"learners\.linucb\._target_", "torchroute.io.write_text_atomic"),
        (_nested, r"encoder\.encoder\._target_", "torch.hub.load"),
    ],
)
def test_foreign_targets_are_refused_and_nothing_runs(run_dir, tmp_path, edit, key, target):
    folder = _planted(run_dir, tmp_path, edit)
    before = _files(folder)
    with pytest.raises(ConfigError, match=rf"config\.yaml: {key}='{target}' is not one of"):
        load_router(folder, state_path=folder / "serve" / "state.pt")
    assert _files(folder) == before  # no hubconf import, no call, no file written
    assert main(["serve", str(folder), "--port", "0"]) == 2


def test_the_cli_refusal_is_one_line(run_dir, tmp_path, capsys):
    folder = _planted(run_dir, tmp_path, _hub)
    assert main(["serve", str(folder), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("torchroute serve: error: ") and "\n" not in err
    assert "learners.linucb._target_='torch.hub.load'" in err


def test_the_allow_list_is_torchroutes_own_packages():
    assert is_allowed("torchroute.learners.LinUCB.from_problem")
    assert is_allowed("torchroute.models.minilm_encoder")
    assert is_allowed("torchroute.trainers.load_or_pretrain")
    for target in (
        "torch.hub.load",
        "os.system",
        "torchroute.io.write_text_atomic",
        "torchroute.trainers.run_pretrain",
        "torchroute.learnersX.Evil",
        "hubconf.evil",
        "",
        None,
    ):
        assert not is_allowed(target), target
    assert is_allowed("myplugin.Learner", extra=("myplugin.",))
    check_trusted({"a": [{"_target_": "torchroute.envs.SingleChoiceEnv"}]}, "env", "x.yaml")
    with pytest.raises(ConfigError, match=r"x\.yaml: env\.a\[0\]\._target_='os\.system'"):
        check_trusted({"a": [{"_target_": "os.system"}]}, "env", "x.yaml")
