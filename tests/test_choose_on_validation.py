"""Change options given as lists are chosen on the validation split with the run's
scenario replayed on it (:mod:`torchroute.run.choose_on_validation`)."""

from __future__ import annotations

import copy
import dataclasses

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import tiny_run_config
from torchroute.errors import ConfigError
from torchroute.learners.discounted import DiscountedLinUCB
from torchroute.learners.trial_groups import TrialGroups
from torchroute.run import RunOptions, build, run_config
from torchroute.run.choose_on_validation import (
    Candidates,
    Choice,
    candidates_of,
    choose,
    chosen_learner,
    pick,
)

DRIFT = [{"kind": "drift", "arm": "a", "at": 0.5, "score_shift": -0.6}]
D_LINUCB = {
    "_target_": "torchroute.learners.discounted.DiscountedLinUCB.from_problem",
    "_partial_": True,
    "alpha": 1.0,
}


def _config(out_dir, gamma, scenario, *overrides):
    """A run of discounted LinUCB on the two-model table (rho 0, seed 0, per-trial rng)."""
    node = {**D_LINUCB, "gamma": gamma}
    cfg = tiny_run_config(out_dir, {"d": node}, "rhos=[0]", "rng=per_trial", *overrides)
    cfg.data = OmegaConf.create({"_target_": "tests.choice_tables.two_model_table"})
    if scenario is not None:
        cfg.env.scenario = scenario
    return cfg


def _solo_val_utility(tmp_path, gamma, scenario) -> tuple[float, float]:
    """The reference: a plain run of one gamma replaying the val split (the scenario's
    events at the same fractions of it), its avg_utility and avg_utility_after."""
    cfg = _config(tmp_path / f"solo-{gamma}", gamma, scenario, "split=val")
    row = run_config(cfg).iloc[0]
    return float(row["avg_utility"]), float(row.get("avg_utility_after", float("nan")))


def test_forgetting_is_chosen_on_the_drifted_validation_stream(tmp_path):
    out = tmp_path / "run"
    results = run_config(_config(out, [0.9, 1.0], DRIFT))
    assert list(results["chosen_gamma"]) == [0.9]
    saved = pd.read_csv(out / "results.csv")
    assert list(saved["chosen_gamma"]) == [0.9]
    table = pd.read_csv(out / "runs" / "d" / "choice_on_validation.csv")
    # each candidate's validation utility is that of a plain run on the val split with the
    # drift at the same fraction (per-trial streams: the same draws)
    for gamma in (0.9, 1.0):
        whole, after = _solo_val_utility(tmp_path, gamma, DRIFT)
        row = table[table["gamma"] == gamma].iloc[0]
        assert row["val_utility"] == pytest.approx(whole, abs=1e-6)
        assert row["val_utility_after"] == pytest.approx(after, abs=1e-6)
    forget, keep = (table[table["gamma"] == g]["val_utility"].item() for g in (0.9, 1.0))
    assert forget > keep + 0.005  # clearly better on the drifted stream, not a tie
    assert saved["chosen_val_utility"].item() == pytest.approx(forget, abs=1e-6)
    # the test run is the plain learner with the chosen value
    plain = run_config(_config(tmp_path / "fixed", 0.9, DRIFT)).iloc[0]
    assert saved["avg_utility"].item() == pytest.approx(plain["avg_utility"], abs=1e-6)


def test_without_the_scenario_no_forgetting_is_chosen(tmp_path):
    out = tmp_path / "run"
    results = run_config(_config(out, [0.9, 1.0], None))
    assert list(results["chosen_gamma"]) == [1.0]
    table = pd.read_csv(out / "runs" / "d" / "choice_on_validation.csv")
    assert "val_utility_after" not in table
    forget, keep = (table[table["gamma"] == g]["val_utility"].item() for g in (0.9, 1.0))
    assert keep > forget


def test_the_choice_never_reads_the_test_rows(tmp_path):
    """The test rows poisoned (NaN scores and costs) and the test env's stream unreadable:
    the choice is made, finite, and the same as on the clean table."""
    cfg = _config(tmp_path / "run", [0.9, 1.0], DRIFT)
    opts = RunOptions.from_config(cfg)
    built = build(opts)
    cand = candidates_of(opts.learners["d"], "d")
    clean = choose(opts, built, built.env, cand)

    table = built.table
    test = torch.as_tensor(table.rows("test"))
    poisoned = copy.copy(table)  # past the table's own NaN check
    object.__setattr__(poisoned, "scores", table.scores.index_fill(0, test, float("nan")))
    object.__setattr__(poisoned, "costs", table.costs.index_fill(0, test, float("nan")))
    env = built.env

    def spy(*_args, **_kwargs):
        raise AssertionError("the choice read the test stream")

    env.context = spy
    env.step = spy
    env._scores = env._scores.index_fill(0, test, float("nan"))  # the test env's test rows
    env._costs = env._costs.index_fill(0, test, float("nan"))
    choice = choose(opts, dataclasses.replace(built, table=poisoned), env, cand)
    assert choice.chosen == clean.chosen == (0,)
    assert torch.isfinite(torch.tensor(choice.table["val_utility"].to_numpy())).all()
    pd.testing.assert_frame_equal(choice.table, clean.table)


def test_pick_takes_the_best_mean_per_rho_first_on_a_tie():
    cand = Candidates("d", ("gamma",), ({"gamma": 0.9}, {"gamma": 0.99}, {"gamma": 1.0}))
    # R = 4 trials (rho 0 x seeds 0, 1; rho 1 x seeds 0, 1), candidate-major
    utility = {
        0: [0.5, 0.7, 0.2, 0.2],  # rho 0 mean 0.6; rho 1 mean 0.2
        1: [0.6, 0.6, 0.3, 0.1],  # rho 0 mean 0.6 (a tie: candidate 0 is first); rho 1 0.2
        2: [0.1, 0.1, 0.4, 0.3],  # rho 1 mean 0.35: the best
    }
    rows = [
        {"rho": rho, "seed": seed, "avg_utility": utility[c][t]}
        for c in range(3)
        for t, (rho, seed) in enumerate([(0.0, 0), (0.0, 1), (1.0, 0), (1.0, 1)])
    ]
    choice = pick(cand, pd.DataFrame(rows), 4)
    assert choice.chosen == (0, 0, 2, 2)
    assert choice.val_utility == pytest.approx((0.6, 0.6, 0.35, 0.35))
    assert choice.columns([1, 2]) == {
        "chosen_gamma": [0.9, 1.0],
        "chosen_val_utility": [pytest.approx(0.6), pytest.approx(0.35)],
    }


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"gamma": []}, "learners.d.gamma is an empty list"),
        ({"gamma": [0.9, "high"]}, "learners.d.gamma[1] must be a number, got 'high'"),
        ({"gamma": [[0.9, 1.0]]}, "learners.d.gamma[0] must be one value"),
        ({"new_arm_bonus": [0.0, True]}, "learners.d.new_arm_bonus[1] must be a number"),
        (
            {"gamma": [0.9, 1.0], "warm_weight": [1.0, -1.0]},
            "learners.d.warm_weight must be a finite number > 0",
        ),
    ],
)
def test_bad_lists_fail_by_name_before_anything_is_written(tmp_path, node, message):
    out = tmp_path / "run"
    cfg = _config(out, 0.99, DRIFT)
    cfg.learners.d = {**D_LINUCB, **node}
    with pytest.raises(ConfigError) as err:
        run_config(cfg)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
    assert not out.exists() or not any(out.iterdir())


def test_a_candidate_out_of_range_fails_by_name_before_anything_is_written(tmp_path):
    out = tmp_path / "run"
    cfg = _config(out, [0.9, 1.5], DRIFT)
    with pytest.raises(ConfigError, match=r"learners\.d.*gamma.*1\.5") as err:
        run_config(cfg)
    assert "\n" not in str(err.value)
    assert not (out / "results.csv").exists() and not (out / "config.yaml").exists()


def test_the_choice_refuses_a_run_that_replays_the_validation_split(tmp_path):
    cfg = _config(tmp_path / "run", [0.9, 1.0], None, "split=val")
    with pytest.raises(ConfigError, match=r"learners\.d: .*val split, which this run replays"):
        run_config(cfg)


def test_a_learner_without_change_options_takes_no_candidates():
    linucb = {"_target_": "torchroute.learners.LinUCB.from_problem", "alpha": [0.5, 1.0]}
    assert candidates_of(linucb, "linucb") is None  # per-trial values, not a choice
    assert candidates_of({**D_LINUCB, "gamma": 0.99}, "d") is None
    residual = {"_target_": "torchroute.learners.residual.ResidualLinUCB.from_problem"}
    found = candidates_of({**residual, "base": ["mlp_router", "knn_val"], "window": 9}, "r")
    assert found.points == ({"base": "mlp_router"}, {"base": "knn_val"})
    found = candidates_of({**D_LINUCB, "gamma": [0.9, 1.0], "new_arm_bonus": [0.0, 0.5]}, "d")
    assert found.keys == ("gamma", "new_arm_bonus")
    assert found.points == (
        {"gamma": 0.9, "new_arm_bonus": 0.0},
        {"gamma": 0.9, "new_arm_bonus": 0.5},
        {"gamma": 1.0, "new_arm_bonus": 0.0},
        {"gamma": 1.0, "new_arm_bonus": 0.5},
    )


def test_trials_that_chose_differently_each_run_their_own_values(tmp_path):
    """The test run's learner: one plain learner when every trial chose the same, else one
    learner per chosen candidate over its own trials (a piece of the run included)."""
    cfg = _config(tmp_path / "run", [0.9, 1.0], None, "rhos=[0,1,2]")
    opts = RunOptions.from_config(cfg)
    built = build(opts)
    cand = candidates_of(opts.learners["d"], "d")
    same = Choice(cand, (1, 1, 1), (0.5, 0.5, 0.5), pd.DataFrame())
    plain = chosen_learner(opts, "d", built.env, same, [0, 1, 2])
    assert isinstance(plain, DiscountedLinUCB) and plain.gamma == 1.0
    mixed = Choice(cand, (1, 0, 1), (0.5, 0.6, 0.5), pd.DataFrame())
    grouped = chosen_learner(opts, "d", built.env, mixed, [0, 1, 2])
    assert isinstance(grouped, TrialGroups)
    assert [g.gamma for g in grouped.groups] == [0.9, 1.0]
    assert [i.tolist() for i in grouped._indices()] == [[1], [0, 2]]
    piece = chosen_learner(opts, "d", built.env.select_trials([1, 2]), mixed, [1, 2])
    assert [g.gamma for g in piece.groups] == [0.9, 1.0]
    assert [i.tolist() for i in piece._indices()] == [[0], [1]]
    assert mixed.columns([1, 2])["chosen_gamma"] == [0.9, 1.0]


def test_a_base_router_chosen_among_the_run_learners_is_named_by_its_learner(tmp_path):
    """``base: [${learners.m}, ${learners.k}]`` (config nodes): the run writes which base
    each trial chose by the run learner's name, and a node that is no run learner's config
    by its class (it crashed writing ``results.csv`` with the node itself)."""
    mlp = {
        "_target_": "torchroute.learners.anchors.MLPScoreRouter.from_problem",
        "_partial_": True,
        "hidden": 4,
        "steps": 5,
    }
    knn = {"_target_": "torchroute.learners.anchors.KNNScoreRouter.from_problem", "_partial_": True}
    knn_k3 = {**knn, "k": 3}
    residual = {
        "_target_": "torchroute.learners.residual.ResidualLinUCB.from_problem",
        "_partial_": True,
        "base": [mlp, knn, knn_k3],
        "lam": [10.0, 1000.0],
        "projection": 0,
    }
    out = tmp_path / "run"
    cfg = tiny_run_config(out, {"m": mlp, "k": knn, "r": residual})
    results = run_config(cfg)
    rows = results[results["learner"] == "r"]
    assert set(rows["chosen_base"]) <= {"m", "k", "KNNScoreRouter"}
    assert set(rows["chosen_lam"]) <= {10.0, 1000.0}
    table = pd.read_csv(out / "runs" / "r" / "choice_on_validation.csv")
    # 3 bases x 2 lams per rho, labelled by name (the third by its class), lam fastest
    assert list(table[table["rho"] == 0]["base"]) == ["m", "m", "k", "k"] + ["KNNScoreRouter"] * 2
    assert list(table[table["rho"] == 0]["lam"]) == [10.0, 1000.0] * 3
    saved = pd.read_csv(out / "results.csv")
    assert (
        saved.loc[saved["learner"] == "r", "chosen_base"].isin(["m", "k", "KNNScoreRouter"]).all()
    )


def test_the_residual_learners_choose_how_far_to_leave_the_base_on_validation():
    """The prior precision and the exploration width of the residual learners are change
    options: a list is a choice on validation, one value is used as given."""
    from torchroute.learners.residual import ResidualLinTS, ResidualLinUCB
    from torchroute.learners.residual_squarecb import ResidualSquareCB

    for cls, width in (
        (ResidualLinUCB, "alpha"),
        (ResidualLinTS, "v"),
        (ResidualSquareCB, "igw_gamma"),
    ):
        assert {"base", "lam", width} <= set(cls.chosen_on_validation)
    target = "torchroute.learners.residual.ResidualLinTS.from_problem"
    found = candidates_of({"_target_": target, "lam": [10, 100], "v": 0.5}, "r")
    assert found.keys == ("lam",) and found.points == ({"lam": 10}, {"lam": 100})


def test_choices_are_made_with_the_threads_of_the_workers(monkeypatch):
    """With jobs > 1 and more than one learner the learners run in workers of
    threads // jobs threads (at least 1): their change options are chosen with that many
    (a router fitted for the choice is then the one the worker fits), and torch's setting
    is restored after; otherwise with the main process's threads."""
    from types import SimpleNamespace

    from torchroute.run import choose_on_validation as module

    seen: list[tuple[str, int]] = []
    monkeypatch.setattr(
        module,
        "choose",
        lambda opts, built, env, cand: seen.append((cand, torch.get_num_threads())),
    )
    before = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        for jobs, names, expected in [
            (2, ["a", "b"], 2),
            (3, ["a", "b", "c"], 1),
            (2, ["a"], 4),  # one learner: it runs in the main process
            (1, ["a", "b"], 4),
        ]:
            seen.clear()
            opts = SimpleNamespace(jobs=jobs, run_learners=names)
            module.choose_all(opts, None, None, {"a": "cand_a"})  # type: ignore[arg-type]
            assert seen == [("cand_a", expected)]
            assert torch.get_num_threads() == 4
    finally:
        torch.set_num_threads(before)


def test_with_jobs_the_choices_are_made_in_workers_and_are_those_of_one_process(tmp_path, caplog):
    """Two learners with change options and ``jobs=2``: their choices are made in two
    worker processes at once, and the run writes what one process writes."""
    import logging

    def run(name, *extra):
        cfg = _config(tmp_path / name, [0.9, 1.0], DRIFT, "rhos=[0,1]", *extra)
        cfg.learners.e = {**D_LINUCB, "alpha": 0.5, "gamma": [0.8, 1.0]}
        return run_config(cfg)

    one = run("one")
    with caplog.at_level(logging.INFO, logger="torchroute.run.jobs"):
        two = run("two", "jobs=2")
    assert caplog.text.count("2 learners in 2 processes") == 2  # the choices, then the runs
    pd.testing.assert_frame_equal(two, one, check_exact=True)
    assert {"chosen_gamma"} <= set(one.columns)
