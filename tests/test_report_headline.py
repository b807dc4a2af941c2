"""The report's opening sentences: one per learner family, numbers from the results."""

from __future__ import annotations

import pandas as pd
import torch

from torchroute.learners import CABSD, HPG, KNNRouter
from torchroute.learners.base import FixedPolicy
from torchroute.report import write_report
from torchroute.report.headline import OPENING, headline, learner_classes
from torchroute.report.leaderboard import learner_families
from torchroute.run.companions import companion_overrides
from torchroute.types import Decision

CONFIG = """learners:
  random: {_target_: torchroute.learners.RandomRouter.from_problem}
  best_single: {_target_: torchroute.learners.BestSingle.from_problem}
  linucb: {_target_: torchroute.learners.LinUCB.from_problem}
  cabs_d: {_target_: torchroute.learners.CABSD.from_problem}
  hpg: {_target_: torchroute.learners.HPG.from_problem}
  linucb_full: {_target_: torchroute.learners.FullFeedbackLinUCB.from_problem}
"""
UTILITY = {"random": [0.50, 0.52], "best_single": [0.60, 0.62], "linucb": [0.70, 0.74]}
UTILITY |= {"cabs_d": [0.80, 0.70], "hpg": [0.55, 0.57], "linucb_full": [0.9, 0.9]}


def _run_dir(path, utility=UTILITY):
    path.mkdir()
    (path / "config.yaml").write_text(CONFIG)
    rows = [
        {"learner": name, "rho": rho, "seed": 0, "rounds": 10, "avg_utility": u}
        | {"avg_regret": 1 - u, "accuracy": u, "avg_cost": 0.1}
        for name, values in utility.items()
        for rho, u in zip([0.0, 900.0], values)
    ]
    pd.DataFrame(rows).to_csv(path / "results.csv", index=False)
    return path


class PlugInStatic(FixedPolicy):
    """A static router of a plug-in (this test module): always the last arm."""

    def act(self, context, generator=None):
        action = context.x.new_full(context.x.shape[:2], self.num_arms - 1, dtype=torch.long)
        probs = torch.nn.functional.one_hot(action, self.num_arms).to(context.x.dtype)
        return Decision(probs=probs, action=action)


def test_families_come_from_the_learner_classes(tmp_path):
    classes = learner_classes(_run_dir(tmp_path / "run"))
    assert classes["cabs_d"] is CABSD and classes["hpg"] is HPG
    assert learner_classes(tmp_path) == {}  # no config.yaml: no grouping, no error


def test_the_parameter_free_hpg_is_in_the_hpg_family_and_a_plug_in_static_router_is_static(
    tmp_path,
):
    """Family and role are the classes' own: the parameter-free HPG (class
    ParameterFreeHPG) is reported among HPG, and a static router defined outside torchroute
    is static in the opening and the leaderboard (not an online learner)."""
    run = tmp_path / "run"
    run.mkdir()
    config = CONFIG + (
        "  pf_hpg: {_target_: torchroute.learners.ParameterFreeHPG.from_problem}\n"
        f"  mine: {{_target_: {__name__}.PlugInStatic.from_problem}}\n"
    )
    (run / "config.yaml").write_text(config)
    utility = UTILITY | {"pf_hpg": [0.58, 0.58], "mine": [0.95, 0.95]}
    rows = [
        {"learner": name, "rho": rho, "seed": 0, "rounds": 10, "avg_utility": u}
        for name, values in utility.items()
        for rho, u in zip([0.0, 900.0], values)
    ]
    results = pd.DataFrame(rows)
    lines = headline([(results, learner_classes(run))])
    (hpg,) = [line for line in lines if line.startswith("- **HPG**")]
    assert "pf_hpg averages utility 0.580" in hpg  # the family's best: pf_hpg 0.58 > hpg 0.56
    (base,) = [line for line in lines if line.startswith("- **baselines**")]
    assert "pf_hpg" not in base
    (online,) = [line for line in lines if "online vs" in line]
    # mine (0.95) is the best static router; the best online learner is cabs_d (0.75)
    assert "no online learner beats the best static router here: mine averages" in online
    families = learner_families(run, ["mine", "random", "linucb", "pf_hpg"])
    assert families == {
        "mine": "static",
        "random": "static",
        "linucb": "cold online",
        "pf_hpg": "cold online",
    }


def test_one_sentence_per_family_with_the_numbers_of_the_results(tmp_path):
    run = _run_dir(tmp_path / "run")
    results = pd.read_csv(run / "results.csv")
    lines = headline([(results, learner_classes(run))])
    assert lines[0] == OPENING
    sentences = [line for line in lines if line.startswith("- ")]
    assert len(sentences) == 4  # online vs static, baselines, CABS, HPG
    online, base, cabs, hpg = sentences
    # online learners linucb, cabs_d, hpg; static best_single; random and full feedback neither
    assert "learning online beats every static router: cabs_d averages utility 0.750" in online
    assert "+0.140 against the best static router best_single (0.610)" in online
    # hand-computed means: linucb 0.72, cabs_d 0.75, hpg 0.56, random 0.51, best_single 0.61
    # linucb_full sees every reward: the reference of the baselines, not their best bandit
    assert "linucb averages utility 0.720" in base and "random (0.510, +0.210)" in base
    assert "linucb_full (0.900, -0.180)" in base
    assert "cabs_d averages utility 0.750" in cabs and "(rank 2 of 6)" in cabs
    assert "linucb (0.720, +0.030)" in cabs and "best_single (0.610, +0.140)" in cabs
    assert "hpg averages utility 0.560" in hpg and "linucb (0.720, -0.160)" in hpg


def test_the_online_sentence_says_so_when_a_static_router_wins(tmp_path):
    utility = {"random": [0.5, 0.5], "best_single": [0.8, 0.9], "linucb": [0.7, 0.74]}
    run = _run_dir(tmp_path / "run", utility)
    results = pd.read_csv(run / "results.csv")
    online = [line for line in headline([(results, learner_classes(run))]) if "online" in line]
    assert (
        "no online learner beats the best static router here: best_single averages " in (online[0])
    )
    assert (
        "utility 0.850 over 2 trials, the best online learner linucb 0.720 (-0.130)" in (online[0])
    )
    # with the columns of a stream that changes, the comparison after the change too
    results["avg_utility_after"] = results["learner"].map({"linucb": 0.8, "best_single": 0.4})
    (line,) = [x for x in headline([(results, learner_classes(run))]) if "online vs" in x]
    assert "after the change in the stream, linucb 0.800 against best_single 0.400 (+0.400)" in (
        line
    )


def test_a_subset_run_gets_its_sentence(tmp_path):
    results = pd.DataFrame(
        {
            "learner": ["omd", "omd", "greedy", "greedy"],
            "avg_reward": [0.6, 0.7, 0.9, 0.9],
            "feasible": [1.0, 1.0, 0.0, 1.0],
        }
    )
    (sentence,) = [line for line in headline([(results, {})]) if line.startswith("- ")]
    # greedy earns more but is feasible in half the trials: omd is the best feasible router
    assert "omd collects the most reward, 0.650 per round (feasible in 100% of trials)" in sentence
    assert "greedy (0.900, feasible 50%)" in sentence


def test_the_report_opens_with_the_sentences_and_appends_its_companions(tmp_path):
    run = _run_dir(tmp_path / "run")
    companion = _run_dir(run / "default_subset", {"random": [0.4, 0.4], "linucb": [0.5, 0.5]})
    text = write_report([run], companions=[companion])
    assert text.startswith(OPENING)
    assert text.count("- **baselines**") == 2  # the run's and the companion's, in the opening
    assert "## Companion run default_subset" in text
    assert OPENING not in text[len(OPENING) :]  # the companion's opening is not repeated
    assert (companion / "report.md").read_text().startswith(OPENING)


def test_a_companion_shares_the_grid_overrides_only(tmp_path):
    given = ["rounds=20", "seeds=[0]", "~logger", "data.num_queries=60", "learners.linucb.lam=3"]
    given += ["+data.extra=1", "env=table_subset", "out_dir=x", "experiment=default"]
    got = companion_overrides(given, "default_subset", tmp_path)
    assert got == [
        "rounds=20",
        "seeds=[0]",
        "~logger",
        "data.num_queries=60",
        "+data.extra=1",
        "experiment=default_subset",
        f"out_dir={tmp_path / 'default_subset'}",
        "companions=[]",
    ]


def test_the_best_static_router_is_chosen_on_validation_when_routers_report_it(tmp_path):
    """``val_utility`` names the static anchor: the test-best static router (best_single,
    0.85) loses the choice to the validation-best one (knn, 0.9 on validation)."""
    utility = {"best_single": [0.8, 0.9], "knn": [0.6, 0.7], "linucb": [0.7, 0.74]}
    run = _run_dir(tmp_path / "run", utility)
    results = pd.read_csv(run / "results.csv")
    classes = {**learner_classes(run), "knn": KNNRouter}
    results["val_utility"] = results["learner"].map({"best_single": 0.5, "knn": 0.9})
    (line,) = [x for x in headline([(results, classes)]) if "online vs" in x]
    assert "linucb averages utility 0.720 over 2 trials, +0.070 against the best static " in line
    assert "router knn (0.650)" in line and line.endswith("chosen on validation.")
    results = results.drop(columns="val_utility")
    (line,) = [x for x in headline([(results, classes)]) if "online vs" in x]
    assert "static router here: best_single averages utility 0.850" in line
    assert "chosen on test" in line


def test_roles_are_found_from_the_configs_in_a_fresh_process():
    """The classes, with their roles, are found whatever was imported before (the report
    runs on its own, without the learners' modules loaded)."""
    import subprocess
    import sys

    code = (
        "from omegaconf import OmegaConf\n"
        "from torchroute.configs_path import config_dir\n"
        "from torchroute.run.classes import learner_class\n"
        "for path in sorted((config_dir() / 'learner').glob('*.yaml')):\n"
        "    cls = learner_class(OmegaConf.to_container(OmegaConf.load(path)))\n"
        "    print(path.stem, cls.__name__, cls.role)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    roles = {line.split()[1]: line.split()[2] for line in out.stdout.splitlines()}
    static = ["BestSingleArm", "RegressorRouter", "KNNRouter", "LogisticScoreRouter"]
    static += ["MLPScoreRouter", "MFScoreRouter", "KNNScoreRouter", "BestArmClassifier"]
    assert {name: roles[name] for name in static} == dict.fromkeys(static, "static")
    assert roles["LinUCB"] == "online" and roles["RandomRouter"] == "reference"


def test_a_static_router_is_never_the_baselines_best_bandit(tmp_path):
    """A static anchor in the baselines family (knn, 0.95) is compared in the online-vs-static
    sentence; the baselines' sentence names the best online bandit (linucb)."""
    utility = {**UTILITY, "knn": [0.95, 0.95]}
    run = _run_dir(tmp_path / "run", utility)
    results = pd.read_csv(run / "results.csv")
    classes = {**learner_classes(run), "knn": KNNRouter}
    (line,) = [x for x in headline([(results, classes)]) if x.startswith("- **baselines**")]
    assert "the baselines' best bandit linucb averages utility 0.720" in line
    (cabs,) = [x for x in headline([(results, classes)]) if x.startswith("- **CABS**")]
    assert "linucb (0.720, +0.030)" in cabs  # compared with the best bandit, not knn
