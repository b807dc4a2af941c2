"""`torchroute --help` and `<command> --help` against the files in configs/; --cfg; hints."""

from __future__ import annotations

import re

import pytest
import yaml

from torchroute.cli import compose_config, config_dir, main

COMMANDS = ["simulate", "sweep", "gap", "pretrain", "report", "data", "serve", "gateway"]


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # whitespace-normalised


def _first_comment(path) -> str:
    """The first comment line of a YAML file that is not a ``# @package`` directive."""
    for line in path.read_text().splitlines():
        if line.startswith("#") and not line.startswith("# @package"):
            return " ".join(line.lstrip("#").split())
    return ""


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))


def test_top_level_help_lists_every_subcommand(capsys) -> None:
    text = _help(capsys)
    for command in COMMANDS:
        assert re.search(rf"\b{command}\b \w", text), command


@pytest.mark.parametrize("command", ["simulate", "sweep", "gap"])
def test_simulate_help_lists_groups_presets_learners_and_keys(capsys, command) -> None:
    text = _help(capsys, command)
    for group in ["data", "encoder", "env", "logger", "sweep", "learner"]:
        assert f"{group}=" in text, group
        for option in _options(group):
            if (group, option) != ("sweep", "wandb_sweep"):  # not a Hydra option
                assert re.search(rf"\b{option}\b", text), (group, option)
    for group in ["experiment", "learner"]:
        for path in sorted((config_dir() / group).glob("*.yaml")):
            comment = _first_comment(path)
            assert comment, f"{path} has no first-line description"
            assert f"{path.stem} {comment[:30]}" in text or f"{path.stem}* {comment[:30]}" in text
    raw = yaml.safe_load((config_dir() / "simulate.yaml").read_text())
    for key, value in raw.items():
        if key == "defaults":
            continue
        if isinstance(value, dict) and value:
            for sub, sub_value in value.items():
                assert f"{key}.{sub} = {yaml.safe_dump(sub_value).split()[0]}" in text
        else:
            assert re.search(rf"\b{key} = ", text), key
    assert "+learner@learners.<name>=<option>" in text and "~logger" in text
    assert "data=synthetic_text*" not in text  # the default is marked on the option list
    assert "synthetic_text*" in text and "single_choice*" in text


def test_pretrain_help_lists_its_keys_and_no_learners(capsys) -> None:
    text = _help(capsys, "pretrain")
    raw = yaml.safe_load((config_dir() / "pretrain.yaml").read_text())
    for key in raw:
        if key != "defaults":
            assert re.search(rf"\b{key}[ .:=]", text), key
    assert "module.lr = 1.0e-4" in text and "routerbench_oracles" in text
    assert "learner=" not in text and "env=" not in text


def test_cfg_prints_the_composed_config_and_runs_nothing(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    overrides = ["experiment=default", "rounds=7", "~logger"]
    assert main(["simulate", *overrides, "--cfg"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["rounds"] == 7 and "logger" not in printed
    assert set(printed["learners"]) == {
        "random",
        "best_single",
        "knn_val",
        "mlp_router",
        "linucb",
        "linucb_full",
        "lints",
        "epsilon_greedy",
        "squarecb",
        "cabs_d",
        "hpg",
        "residual_linucb",
    }
    composed = compose_config("simulate", overrides)
    assert printed["rhos"] == list(composed.rhos) == [0.0, 500.0, 1000.0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("overrides", "hint"),
    [
        (["data=synth"], "did you mean 'synthetic_text'?"),
        (["experiment=cabs_tabel2"], "did you mean 'cabs_table2'?"),
        (["roundz=3"], "did you mean 'rounds'?"),
        (["features.pca_dimm=3"], "did you mean 'pca_dim'?"),
        (["experiment=default", "learners.linucbb.alpha=2"], "did you mean 'linucb'?"),
    ],
)
def test_unknown_names_get_the_closest_one(capsys, tmp_path, monkeypatch, overrides, hint) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", *overrides]) == 2
    err = capsys.readouterr().err
    assert err.startswith("torchroute simulate: error: unknown ") and hint in err
    assert len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_help_lists_the_configs_of_config_dir_folders(capsys, tmp_path) -> None:
    """``--config-dir DIR --help``: DIR's learners, presets and group options are listed."""
    (tmp_path / "learner").mkdir()
    (tmp_path / "learner" / "my_learner.yaml").write_text(
        "# A plug-in learner of this test.\n_target_: my_pkg.Learner.from_problem\n"
    )
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "my_preset.yaml").write_text("# A plug-in preset.\nrounds: 10\n")
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "my_env.yaml").write_text("# A plug-in env.\n_target_: my_pkg.env\n")
    plain = _help(capsys, "simulate")
    assert "my_learner" not in plain and "my_preset" not in plain
    text = _help(capsys, "simulate", "--config-dir", str(tmp_path))
    assert "my_learner A plug-in learner of this test" in text
    assert "my_preset A plug-in preset" in text
    assert re.search(r"env=.*\bmy_env\b", text) and str(tmp_path) in text
    for option in _options("learner"):  # the packaged ones are still there
        assert re.search(rf"\b{option}\b", text), option
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--config-dir", str(tmp_path / "missing"), "--help"])
    assert exit_.value.code == 2
    assert "no such folder" in capsys.readouterr().err


def test_multirun_is_answered_with_the_sweep_that_runs_the_grid(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["simulate", "-m", "experiment=default", "learners.linucb.alpha=0.5,1.0"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no -m/--multirun" in err
    assert "torchroute sweep experiment=default '+sweep.grid.linucb.alpha=[0.5,1.0]'" in err
    assert main(["simulate", "--multirun", "rhos=0,500"]) == 2
    assert "a grid over ['rhos'] is not a learner hyper-parameter" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_cfg_hydra_and_all_and_info_say_what_torchroute_has(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--cfg", "hydra"]) == 0
    assert "no hydra runtime config" in capsys.readouterr().out
    assert main(["simulate", "rounds=7", "--cfg", "all"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# torchroute composes") and yaml.safe_load(out)["rounds"] == 7
    assert main(["pretrain", "--info"]) == 0
    out = capsys.readouterr().out
    assert "primary config pretrain.yaml" in out and str(config_dir()) in out
    assert list(tmp_path.iterdir()) == []


def test_long_descriptions_end_at_a_phrase_never_inside_parentheses():
    from torchroute.cli.help import shorten

    text = "Alpha beta gamma delta epsilon zeta eta: " + "word " * 5 + "(one, two, three)" * 5
    short = shorten(text, limit=80)
    # the last phrase end before the limit outside a parenthesis: before the first "("
    assert short == "Alpha beta gamma delta epsilon zeta eta: word word word word word ..."
    text = "A sentence with many words, " + "more words " * 10 + "and the end"
    assert shorten(text, limit=60) == "A sentence with many words ..."
    assert shorten("short", limit=60) == "short"
