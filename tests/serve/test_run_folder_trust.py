"""A run folder is data: nothing named in it runs, whatever the name starts with.

Each route is planted in a real run folder made by a tiny ``simulate``: a ``_target_`` that
walks from a torchroute module to an object it imports (``torch.hub.load`` with the
folder's ``hubconf.py``, ``numpy.load`` of a planted pickle, ``os.system``), pickles planted
as ``problem.pt`` / ``features.pt`` / the checkpoint, and a report section given as a
dotted path. ``serve``, ``evaluate checkpoint=`` and ``report`` refuse each with one line;
the marker file the payloads would write never appears and the folder is byte-identical.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pickle
import pkgutil

import numpy as np
import pytest
import torch
import yaml

import torchroute
from torchroute.cli import main
from torchroute.data import linear_contextual_table
from torchroute.data.decision_io import save_decisions
from torchroute.envs.single_choice import SingleChoiceEnv
from torchroute.learners import SquareCB
from torchroute.run import ConfigError, run_config
from torchroute.run.decision_logger import log_decisions
from torchroute.run.trust import check_target, check_trusted, is_allowed, targets
from torchroute.serve import load_router

from ..conftest import LINUCB_NODE, tiny_run_config

HUBCONF = """\
from pathlib import Path
Path(__file__).with_name("MARKER").write_text("hubconf.py ran")
def evil(**kwargs):
    Path(__file__).with_name("MARKER").write_text("evil ran")
"""


class Payload:
    """Unpickling it writes the marker file (were it ever unpickled)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    run_config(tiny_run_config(out, {"linucb": LINUCB_NODE}, "rhos=[0]", "log_every=10"))
    return out


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """A decision log for ``evaluate`` (its arms do not matter: the run is refused first)."""
    table, _ = linear_contextual_table(60, 3, 4, seed=2)
    env = SingleChoiceEnv(
        table, rho=[0.0], seeds=[0], split="test", features=table.embeddings.double()
    )
    logged, _ = log_decisions(SquareCB.from_problem(env.problem(), gamma=5.0), env, seed=1)
    return save_decisions(logged[0], tmp_path_factory.mktemp("log") / "log.csv")


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
    # the attacker edits the config saved in the checkpoint too, so both copies agree
    ckpt = folder / "checkpoints" / "linucb.pt"
    payload = torch.load(ckpt, weights_only=True)
    payload["config"]["learners"] = config["learners"]
    torch.save(payload, ckpt)
    return folder


def _files(folder):
    return sorted((p.relative_to(folder), p.read_bytes()) for p in folder.rglob("*") if p.is_file())


def _hub(config, folder):
    config["learners"]["linucb"] = {
        "_target_": "torchroute.learners.base.torch.hub.load",
        "repo_or_dir": str(folder),
        "model": "evil",
        "source": "local",
    }


def _numpy_pickle(config, folder):
    np.save(folder / "payload.npy", np.array([Payload(folder / "MARKER")], dtype=object))
    config["learners"]["linucb"] = {
        "_target_": "torchroute.features.np.load",
        "file": str(folder / "payload.npy"),
    }


def _numpy_allow_pickle(config, folder):
    _numpy_pickle(config, folder)
    config["learners"]["linucb"]["allow_pickle"] = True


def _system(config, folder):
    config["learners"]["linucb"] = {
        "_target_": "torchroute.models.encoders.os.system",
        "command": f"touch {folder / 'MARKER'}",
    }


def _nested(config, folder):
    config["learners"]["linucb"]["extra"] = {
        "_target_": "torchroute.models.encoders.os.system",
        "command": f"touch {folder / 'MARKER'}",
    }


def _pickled_table(config, folder):
    """A loader nested in the learner's node (Hydra builds nested nodes first) reading a
    planted pickle it is told to trust."""
    with open(folder / "table.pkl", "wb") as f:
        pickle.dump(Payload(folder / "MARKER"), f)
    config["learners"]["linucb"]["table"] = {
        "_target_": "torchroute.data.load_table",
        "path": str(folder / "table.pkl"),
        "trust_pickle": True,
    }


def _listed(config, folder):
    """A candidate of a list-valued option (what a run chooses among on validation, read
    back for the trial that chose it) that walks to ``os.system``."""
    config["learners"]["linucb"] = {
        "_target_": "torchroute.learners.residual.ResidualLinUCB.from_problem",
        "_partial_": True,
        "base": [
            {"_target_": "torchroute.learners.anchors.KNNScoreRouter.from_problem", "k": 3},
            {
                "_target_": "torchroute.models.encoders.os.system",
                "command": f"touch {folder / 'MARKER'}",
            },
        ],
    }


def _trust_repo(config, folder):
    config["learners"]["linucb"]["trust_repo"] = True


ROUTES = [
    (
        _hub,
        "learners.linucb._target_='torchroute.learners.base.torch.hub.load' resolves to "
        "function torch.hub.load",
    ),
    (_numpy_pickle, "'torchroute.features.np.load' resolves to function numpy.load"),
    (_numpy_allow_pickle, "learners.linucb.allow_pickle is set to True"),
    (_system, "resolves to builtin_function_or_method posix.system"),
    (_nested, "learners.linucb.extra._target_='torchroute.models.encoders.os.system'"),
    (_listed, "learners.linucb.base[1]._target_='torchroute.models.encoders.os.system'"),
    (_trust_repo, "learners.linucb.trust_repo is set to True"),
    (_pickled_table, "learners.linucb.table.trust_pickle is set to True"),
]


@pytest.mark.parametrize(("edit", "message"), ROUTES)
def test_planted_targets_run_nothing_in_serve_gateway_evaluate_and_report(
    run_dir, logs, tmp_path, capsys, edit, message
):
    folder = _planted(run_dir, tmp_path, edit)
    before = _files(folder)
    with pytest.raises(ConfigError, match="a run folder is data"):
        load_router(folder, state_path=tmp_path / "state.pt")
    capsys.readouterr()
    assert main(["serve", str(folder), "--port", "0", "--insecure-no-auth"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("torchroute serve: error: ") and "\n" not in err
    assert message in err
    backends = tmp_path / "backends.yaml"  # outside the folder: the folder stays as planted
    backends.write_text(
        "models:\n  a: {base_url: 'http://127.0.0.1:9/v1', model: a, input_per_mtok: 1.0, "
        "output_per_mtok: 1.0}\n"
    )
    gateway = ["gateway", str(folder), "--backends", str(backends), "--port", "0"]
    assert main([*gateway, "--insecure-no-auth"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("torchroute gateway: error: ") and "\n" not in err
    assert message in err
    evaluate = ["evaluate", f"logs={logs}", f"checkpoint={folder}", "targets=[linucb]"]
    assert main([*evaluate, "bootstrap=5", f"out_dir={tmp_path / 'ope'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err
    for section in ("os.system", "builtins.exec", "torchroute.models.encoders.os.system"):
        assert main(["report", str(folder), "--section", section]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "never imported from the command line" in err
    assert not (folder / "MARKER").exists()
    assert _files(folder) == before  # nothing imported, called or written


def test_planted_report_sections_run_nothing_when_the_report_takes_the_runs_own(
    run_dir, tmp_path, caplog, monkeypatch
):
    """Without ``--section`` the report resolves the sections the run folder declares: an
    attribute chain through a torchroute module to ``torch.hub.load`` or ``os.system`` is
    resolved (nothing called), found not to be torchroute's and left out with a warning;
    the declared built-in section still runs."""
    import functools
    import logging

    called: list[str] = []

    def spy(real, name):  # keeps the real function's name and module
        return functools.wraps(real)(lambda *a, **k: called.append(name))

    monkeypatch.setattr(torch.hub, "load", spy(torch.hub.load, "hub"))
    monkeypatch.setattr(os, "system", spy(os.system, "system"))
    chains = [
        "torchroute.learners.base.torch.hub.load",
        "torchroute.models.encoders.os.system",
    ]

    def edit(config, folder):
        config["report_sections"] = ["routing", *chains]

    folder = _planted(run_dir, tmp_path, edit)
    before = _files(folder)
    with caplog.at_level(logging.WARNING, logger="torchroute"):
        assert main(["report", str(folder), "--out", str(tmp_path / "out")]) == 0
    assert called == [] and not (folder / "MARKER").exists()
    warned = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(warned) == 2
    assert "function torch.hub.load" in warned[0] and "posix.system" in warned[1]
    assert all("--trust" in w for w in warned)
    assert "Routing metrics" in (tmp_path / "out" / "report.md").read_text()
    assert _files(folder) == before  # nothing imported from it, called or written


def test_a_planted_learner_config_in_config_dir_is_refused(logs, tmp_path, capsys):
    configs = tmp_path / "configs"
    (configs / "learner").mkdir(parents=True)
    marker = tmp_path / "MARKER"
    (configs / "learner" / "evil.yaml").write_text(
        f"_target_: torchroute.models.encoders.os.system\ncommand: touch {marker}\n"
    )
    args = ["evaluate", "--config-dir", str(configs), f"logs={logs}", "targets=[evil]"]
    assert main([*args, f"out_dir={tmp_path / 'ope'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "evil.yaml: targets.evil._target_=" in err
    assert "posix.system" in err
    assert not marker.exists() and not (tmp_path / "ope").exists()


@pytest.mark.parametrize("name", ["problem.pt", "features.pt", "checkpoints/linucb.pt"])
def test_planted_pickles_are_refused_before_they_run(run_dir, logs, tmp_path, capsys, name):
    folder = _planted(run_dir, tmp_path, lambda config, folder: None)
    torch.save({"format": 1, "problem": Payload(folder / "MARKER")}, folder / name)
    before = _files(folder)
    with pytest.raises(ValueError, match="not a torchroute file; refusing to unpickle it"):
        load_router(folder, state_path=tmp_path / "state.pt")
    capsys.readouterr()
    assert main(["serve", str(folder), "--port", "0", "--insecure-no-auth"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{name} is not a torchroute file; refusing to unpickle it" in err
    assert "weights_only" not in err
    if name != "features.pt":  # evaluate reads the learner, not the feature map
        evaluate = ["evaluate", f"logs={logs}", f"checkpoint={folder}", "targets=[linucb]"]
        assert main([*evaluate, "bootstrap=5", f"out_dir={tmp_path / 'ope'}"]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "refusing to unpickle it" in err
    assert not (folder / "MARKER").exists()
    assert _files(folder) == before


# ------------------------------------------------------------ the rule, for any object


def _torchroute_modules():
    """Every module of the installed package (models and trainers included)."""
    names = {"torchroute"}
    for info in pkgutil.walk_packages(torchroute.__path__, "torchroute."):
        names.add(info.name)
    skip = ("torchroute.__main__", "torchroute.configs")
    modules = []
    for name in sorted(names):
        if name.startswith(skip):
            continue
        modules.append(importlib.import_module(name))
    return modules


def test_any_object_a_torchroute_module_imports_is_refused():
    """Not a list of names: every public attribute of every torchroute module that is not
    defined in torchroute (a module, a class, a function, a constant) is refused, and so is
    any public callable one step inside a foreign module it imports."""
    checked = 0
    for module in _torchroute_modules():
        for name, obj in sorted(vars(module).items()):
            if name.startswith("_"):
                continue
            own = obj.__name__ if inspect.ismodule(obj) else getattr(obj, "__module__", None)
            if isinstance(own, str) and own.startswith("torchroute"):
                continue
            target = f"{module.__name__}.{name}"
            assert not is_allowed(target), target
            checked += 1
            if inspect.ismodule(obj):
                inner = sorted(k for k in vars(obj) if not k.startswith("_"))[:25]
                for attr in inner:
                    assert not is_allowed(f"{target}.{attr}"), f"{target}.{attr}"
                    checked += 1
    assert checked > 500  # torch, numpy, os, Path, ... as imported by torchroute modules


def test_torchroute_objects_that_are_not_buildable_are_refused():
    """Functions of torchroute that write, train or run are refused; so are methods other
    than the class's constructors, and private names."""
    for target in (
        "torchroute.io.write_text_atomic",
        "torchroute.io.atomic_write",
        "torchroute.trainers.run_pretrain",
        "torchroute.checkpoint.save_checkpoint",
        "torchroute.learners.LinUCB.act",
        "torchroute.learners.LinUCB.__init__",
        "torchroute.learners.LinUCB.__class__.__subclasses__",
        "torchroute.cli.main",
        "torchroute.learnersX.Evil",
        "torch.hub.load",
        "hubconf.evil",
        "",
        None,
    ):
        assert not is_allowed(target), target


def test_every_shipped_target_is_buildable():
    """What the packaged configs name (learners, envs, encoders, loaders, the oracle
    loader) passes the check: the rule refuses by object, not by accident."""
    from torchroute.configs_path import config_dir

    shipped = set()
    for group in ("learner", "env", "encoder", "data"):
        for path in (config_dir() / group).glob("*.yaml"):
            node = yaml.safe_load(path.read_text())
            check_trusted(node, group, str(path))
            shipped.update(target for _, target in targets(node, group))
    assert len(shipped) > 30, shipped
    assert check_target("torchroute.trainers.load_or_pretrain").__name__ == "load_or_pretrain"
    # a module that moved still builds from its old path
    assert is_allowed("torchroute.envs.subset_table.table_subset_env")


def test_a_plugin_is_trusted_only_when_named(tmp_path, monkeypatch):
    package = tmp_path / "pkg" / "my_plugin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import os\nfrom torchroute.learners import LinUCB\n\n\nclass Mine(LinUCB):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    assert not is_allowed("my_plugin.Mine.from_problem")
    assert is_allowed("my_plugin.Mine.from_problem", extra=("my_plugin",))
    assert not is_allowed("my_plugin.os.system", extra=("my_plugin",))
    with pytest.raises(ConfigError, match=r"x\.yaml: env\.a\[0\]\._target_='os\.system'"):
        check_trusted({"a": [{"_target_": "os.system"}]}, "env", "x.yaml")


def test_pickle_payload_is_real():
    """The payload the tests plant does run when unpickled without weights_only."""
    assert pickle.loads(pickle.dumps(Payload("/dev/null"))) == 0
