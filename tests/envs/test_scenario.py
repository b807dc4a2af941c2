"""Scenarios on the single-choice env: masks, shifts, prices, results columns, bad keys."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from tests.conftest import make_priced_table, make_table, naive_best_arms
from torchroute.envs import SingleChoiceEnv
from torchroute.envs.scenario import (
    ScenarioError,
    new_model_names,
    parse_scenario,
    rounds_to_recover,
)
from torchroute.functional.settling import stationary_quantile
from torchroute.learners import BestSingleArm, LinUCB, RandomRouter
from torchroute.loop import simulate
from torchroute.types import Decision


def _env(table, scenario, **kw):
    kw.setdefault("rho", [0.0, 500.0])
    kw.setdefault("seeds", [0, 1])
    return SingleChoiceEnv(table, dtype=torch.float64, scenario=scenario, **kw)


def test_new_model_is_masked_before_at_and_hidden_from_the_train_split(tiny_table):
    env = _env(tiny_table, [{"kind": "new_model", "arm": "best", "at": 0.5}])
    best = naive_best_arms(tiny_table, [0.0, 500.0])
    change = math.floor(0.5 * env.horizon)
    for t in (0, change - 1):
        avail = env.context(t).available
        assert avail.shape == (2, 1, 4)
        for r in range(2):
            assert avail[r, 0].tolist() == [k != best[r] for k in range(4)]
    assert env.context(change).available is None
    hidden = env.problem().hidden_arms
    assert hidden.tolist() == [[k == best[r] for k in range(4)] for r in range(2)]
    # best_single, fitted offline, never chooses a hidden arm
    chosen = BestSingleArm.from_problem(env.problem()).arm.tolist()
    assert all(chosen[r] != best[r] for r in range(2))
    # a named new model: its train scores are unknown (0), its prices are kept
    named = _env(tiny_table, [{"kind": "new_model", "arm": "arm2", "at": 0.5}])
    train = named.problem().train
    assert bool((train.scores[:, 2] == 0).all())
    rows = torch.as_tensor(tiny_table.rows("train"))
    torch.testing.assert_close(train.costs[:, 2], tiny_table.costs[rows, 2].double())


def test_unavailable_arm_is_neither_observed_nor_the_regret_reference(tiny_table):
    env = _env(tiny_table, [{"kind": "new_model", "arm": "arm1", "at": 0.5}], feedback="full")
    ctx = env.context(0)
    action = torch.tensor([[0], [3]])
    fb, out = env.step(ctx, Decision(torch.nn.functional.one_hot(action, 4).double(), action))
    assert not fb.observed[:, 0, 1].any() and fb.observed[:, 0, [0, 2, 3]].all()
    rows = ctx.index[:, 0]
    rho = torch.tensor([0.0, 500.0], dtype=torch.float64)
    util = (tiny_table.scores[rows] - rho[:, None] * tiny_table.costs[rows]).clamp(0, 1).double()
    util[:, 1] = -1.0
    chosen = util[torch.arange(2), action[:, 0]]
    torch.testing.assert_close(out["regret"][:, 0], util.max(1).values - chosen)


def test_drift_and_price_change_scores_and_costs_from_at_on(tiny_table):
    scenario = [
        {"kind": "drift", "arm": "arm0", "at": 0.5, "score_shift": -0.3},
        {"kind": "price", "arm": "arm3", "at": 0.75, "factor": 4.0},
    ]
    env = _env(tiny_table, scenario, feedback="full")
    action = torch.zeros(2, 1, dtype=torch.long)
    probs = torch.nn.functional.one_hot(action, 4).double()
    for t in (0, 9, 10, 14, 15, 19):
        ctx = env.context(t)
        fb, _ = env.step(ctx, Decision(probs, action))
        rows = ctx.index[:, 0]
        scores = tiny_table.scores[rows].double().clone()
        costs = tiny_table.costs[rows].double().clone()
        if t >= 10:
            scores[:, 0] = (scores[:, 0] - 0.3).clamp(0, 1)
        if t >= 15:
            costs[:, 3] = costs[:, 3] * 4.0
        torch.testing.assert_close(fb.score[:, 0], scores)
        torch.testing.assert_close(fb.cost[:, 0], costs)


def test_rounds_to_recover_on_a_hand_made_stream():
    """Five trials, 20 rounds after the change, window 2 (final part F = max(2, 20 // 4) = 5),
    three groups; every number below is worked out by hand."""
    u = torch.tensor(
        [
            [0.0] * 6 + [1.0] * 14,  # group 0
            [0.0] * 8 + [1.0] * 12,  # group 0: mean 0 x6, .5, .5, 1 x12
            [0.0] * 17 + [1.0] * 3,  # group 1: still moving in the final part
            [0.0] * 17 + [1.0] * 3,
            [0.5] * 20,  # group 2: flat
        ]
    )
    group = torch.tensor([0, 0, 1, 1, 2])
    out = rounds_to_recover(u, group, window=2)
    # the band is .01 + z s sqrt(1/2 + 1/5), z the 95% quantile of a flat curve's largest
    # standardised distance at n = 20, W = 2, F = 5 (simulated; the margins below hold for
    # any z in 2.9 .. 3.6)
    z = stationary_quantile(20, 2, 5, 0.95)
    assert 2.9 < z < 3.6
    # group 0: level 1; successive differences .5, .5 -> s^2 = .5 / (2 * 19) = 1 / 76,
    # band = .01 + .0960 z (.29 .. .36); moving averages m_5 = .25, m_6 = .5, m_7 = .75,
    # then 1: within the band from j = 7 on -> 7 + 2 = 9 (<= 20 - 5)
    assert out[:2].tolist() == [9.0, 9.0]
    # group 1: level .6, one difference of 1 -> s^2 = 1 / 38, band = .01 + .1357 z
    # (.40 .. .50); m_15 = 0 is out, m_16 = .5 and m_17 = m_18 = 1 are in: settled at
    # 16 + 2 = 18, inside the final part (> 20 - 5) -> NaN
    assert math.isnan(out[2].item()) and math.isnan(out[3].item())
    # group 2: no noise, the band is the tolerance, settled from the first window
    assert out[4].item() == 2.0
    # each trial alone (s^2 = 1 / 38, band .40 .. .50): trial 0 settles at m_6 = 1 (m_5 =
    # .5 is out), trial 1 at m_8
    alone = rounds_to_recover(u[:2], window=2)
    assert alone.tolist() == [8.0, 10.0]
    # settling inside the final part does not count: the step at round 16, level .8,
    # band .1357 z; m_14 = 0 is out, m_15 = .5 and then 1 are in -> 15 + 2 = 17 > 20 - 5
    late = torch.tensor([[0.0] * 16 + [1.0] * 4])
    assert math.isnan(rounds_to_recover(late, window=2, tolerance=0.0).item())
    # the tolerance widens the band: group 1 with tolerance .7 settles at once
    assert rounds_to_recover(u[2:4], window=2, tolerance=0.7).tolist() == [2.0, 2.0]


def test_results_before_after_and_recover_columns(tiny_table):
    scenario = [{"kind": "drift", "arm": "best", "at": 0.5, "score_shift": -0.5}]
    env = _env(tiny_table, scenario, rho=[0.0, 500.0, 0.0], seeds=[0, 1, 2], recover_window=3)
    played = []  # each round's utility of the played arm, as the feedback reveals it
    result = simulate(
        RandomRouter(3, 4), env, progress=False, log_every=7,
        on_round=lambda t, ctx, d, fb: played.append(fb.reward.gather(-1, d.action[..., None])),
    )  # fmt: skip
    utility = torch.cat(played, 1)[..., 0].double()  # [R, T]
    trace = env._trace  # minus each round's regret, as the env recorded it
    summary = result.summary
    c = 10
    torch.testing.assert_close(
        torch.tensor(summary["avg_utility_before"].to_numpy()), utility[:, :c].mean(1)
    )
    torch.testing.assert_close(
        torch.tensor(summary["avg_utility_after"].to_numpy()), utility[:, c:].mean(1)
    )
    torch.testing.assert_close(
        torch.tensor(summary["avg_utility"].to_numpy()), utility.mean(1), rtol=1e-6, atol=1e-9
    )
    torch.testing.assert_close(
        torch.tensor(summary["avg_regret"].to_numpy()), -trace.mean(1), rtol=1e-6, atol=1e-9
    )
    # trials 0 and 2 share rho = 0: their mean curve; trial 1 alone
    pair = rounds_to_recover(trace[[0, 2], c:].mean(0, keepdim=True), window=3)
    single = rounds_to_recover(trace[[1], c:], window=3)
    expected = torch.cat([pair, single, pair])
    got = torch.tensor(summary["rounds_to_recover"].to_numpy())
    torch.testing.assert_close(got, expected, equal_nan=True)
    assert summary["recover_trials"].tolist() == [2, 1, 2]


def test_rounds_to_recover_only_once_the_stream_is_over(tiny_table):
    """A summary at an earlier logged round has the phase columns but no
    ``rounds_to_recover`` (its level, the final quarter, is not there yet); the final one
    has it, and the loop's logged rounds do not change it."""
    scenario = [{"kind": "drift", "arm": "best", "at": 0.5, "score_shift": -0.5}]
    env = _env(tiny_table, scenario, rho=[0.0, 500.0], seeds=[0, 1])
    logged = []

    class Tracker:
        def log(self, values, step=None):
            logged.append(values)

    summary = simulate(
        RandomRouter(2, 4), env, progress=False, log_every=3, tracker=Tracker()
    ).summary
    assert len(logged) > 3
    assert all("rounds_to_recover" not in row for row in logged[:-1])
    assert all("avg_utility_after" in row for row in logged[4:-1])
    assert "rounds_to_recover" in logged[-1] and "rounds_to_recover" in summary
    again = _env(tiny_table, scenario, rho=[0.0, 500.0], seeds=[0, 1])
    once = simulate(RandomRouter(2, 4), again, progress=False, log_every=20).summary
    assert once["rounds_to_recover"].equals(summary["rounds_to_recover"])


def test_cost_and_accuracy_per_phase_by_hand(tiny_table):
    # trial 0 always plays arm3 (its price x4 from round 10), trial 1 arm1 (its score -0.3)
    scenario = [
        {"kind": "price", "arm": "arm3", "at": 0.5, "factor": 4.0},
        {"kind": "drift", "arm": "arm1", "at": 0.5, "score_shift": -0.3},
    ]
    env = _env(tiny_table, scenario)
    rows = []
    summary = simulate(
        BestSingleArm(2, 4, torch.eye(4)[[3, 1]]),
        env,
        progress=False,
        log_every=7,
        on_round=lambda t, ctx, d, fb: rows.append(ctx.index[:, 0].tolist()),
    ).summary
    c = 10
    for r, arm in enumerate((3, 1)):
        index = [row[r] for row in rows]
        scores = [float(tiny_table.scores[i, arm]) for i in index]
        costs = [float(tiny_table.costs[i, arm]) for i in index]
        if arm == 1:
            scores = scores[:c] + [min(max(s - 0.3, 0.0), 1.0) for s in scores[c:]]
        else:
            costs = costs[:c] + [4.0 * x for x in costs[c:]]
        expected = {
            "accuracy_before": sum(scores[:c]) / c,
            "accuracy_after": sum(scores[c:]) / (len(index) - c),
            "avg_cost_before": sum(costs[:c]) / c,
            "avg_cost_after": sum(costs[c:]) / (len(index) - c),
        }
        for column, value in expected.items():
            assert summary[column][r] == pytest.approx(value, rel=1e-6), (r, column)


def _val_best(table, rho: float) -> int:
    """The arm of largest mean validation utility at ``rho``, by a loop over arms."""
    rows = table.rows("val")
    means = [
        float((table.scores[rows, k] - rho * table.costs[rows, k]).clamp(0, 1).mean())
        for k in range(table.num_arms)
    ]
    return means.index(max(means))


def test_best_at_validation_is_one_arm_for_every_trial_at_the_middle_rho():
    table = make_priced_table()
    rho = [0.0, 0.0, 20.0, 100.0, 100.0]  # distinct 0, 20, 100: the middle is 20
    per_rho = naive_best_arms(table, rho)
    assert len(set(per_rho)) > 1  # arm: best would change a different model per rho
    event = {"kind": "new_model", "arm": "best", "at": 0.5, "best_at": "validation"}
    env = _env(table, [event], rho=rho, seeds=[0, 1, 0, 0, 1])
    arm = _val_best(table, 20.0)
    assert env.problem().hidden_arms.tolist() == [[k == arm for k in range(4)]] * 5
    assert new_model_names([event], table, rho) == [table.arm_names[arm]]
    # the trials of one piece of the run keep the run's arm
    piece = env.select_trials([3])
    assert piece.problem().hidden_arms.tolist() == [[k == arm for k in range(4)]]
    # the default is each trial's own best on the train split, as before
    plain = _env(table, [{"kind": "new_model", "arm": "best", "at": 0.5}], rho=rho, seeds=[0] * 5)
    assert plain.problem().hidden_arms.long().argmax(1).tolist() == per_rho


def test_best_at_keeps_the_fingerprint_of_events_without_it():
    plain = parse_scenario([{"kind": "drift", "arm": "best", "at": 0.5, "score_shift": -0.1}])
    assert plain[0].fingerprint() == {"kind": "drift", "arm": "best", "at": 0.5, "value": -0.1}
    chosen = parse_scenario(
        [{"kind": "drift", "arm": "best", "at": 0.5, "score_shift": -0.1, "best_at": "validation"}]
    )
    assert chosen[0].fingerprint()["best_at"] == "validation"


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (
            {"arm": "best", "best_at": "test"},
            r"scenario\[0\]\.best_at must be one of train, validation",
        ),
        (
            {"arm": "arm1", "best_at": "validation"},
            r"scenario\[0\]\.best_at chooses the arm of 'arm: best'",
        ),
    ],
)
def test_a_bad_best_at_names_the_key(event, message):
    with pytest.raises(ScenarioError, match=message):
        parse_scenario([{"kind": "new_model", "at": 0.5, **event}])


def test_no_scenario_adds_no_column_and_no_mask(tiny_table):
    env = _env(tiny_table, None)
    assert env.context(0).available is None and env.problem().hidden_arms is None
    result = simulate(LinUCB.from_problem(env.problem()), env, progress=False)
    assert "avg_utility_after" not in result.summary and env.state_dict() == {}


@pytest.mark.parametrize(
    ("scenario", "key"),
    [
        ({"kind": "new_model"}, "scenario must be a list"),
        ([{"kind": "shift", "arm": "arm0", "at": 0.5}], "scenario[0].kind"),
        ([{"kind": "new_model", "arm": "arm0"}], "scenario[0].at is missing"),
        ([{"kind": "new_model", "arm": "arm0", "at": 1.5}], "scenario[0].at"),
        ([{"kind": "drift", "arm": "arm0", "at": 0.5}], "scenario[0].score_shift"),
        ([{"kind": "price", "arm": "arm0", "at": 0.5, "factor": -1}], "scenario[0].factor"),
        ([{"kind": "price", "arm": "x", "at": 0.5, "factor": 2}], "scenario[0].arm"),
        ([{"kind": "new_model", "arm": "arm0", "at": 0.5, "shift": 1}], "scenario[0].shift"),
    ],
)
def test_bad_scenario_names_the_key(tiny_table, scenario, key):
    with pytest.raises(ScenarioError, match=key.replace("[", r"\[").replace("]", r"\]")):
        _env(tiny_table, scenario)


@pytest.mark.parametrize(
    ("second", "arm"),
    [("arm1", "arm1"), ("best", None)],  # the same name; 'best' resolving to it in a trial
)
def test_two_new_model_events_of_one_arm_are_refused(second, arm):
    table = make_table()
    best = naive_best_arms(table, [0.0, 500.0])  # [R] the best arm of each trial
    first = arm or f"arm{int(best[0])}"
    scenario = [
        {"kind": "new_model", "arm": first, "at": 0.3},
        {"kind": "drift", "arm": "arm0", "at": 0.5, "score_shift": -0.1},
        {"kind": "new_model", "arm": second, "at": 0.6},
    ]
    expected = (
        rf"^scenario\[0\] and scenario\[2\] are both new_model events of '{first}'"
        r".*a model arrives once"
    )
    with pytest.raises(ScenarioError, match=expected):
        _env(table, scenario)


def test_select_trials_keeps_each_trials_scenario():
    table = make_table()
    env = _env(table, [{"kind": "new_model", "arm": "best", "at": 0.5}], rho=[0.0, 500.0])
    alone = env.select_trials([1])
    assert torch.equal(alone.context(0).available, env.context(0).available[1:])
    assert torch.equal(alone.problem().hidden_arms, env.problem().hidden_arms[1:])


def test_recover_tolerance_and_window_are_used(tiny_table):
    scenario = [{"kind": "drift", "arm": "arm0", "at": 0.5, "score_shift": -0.2}]
    env = _env(tiny_table, scenario, recover_window=2, recover_tolerance=0.3)
    result = simulate(RandomRouter(2, 4), env, progress=False)
    expected = rounds_to_recover(env._trace[:, 10:], None, 2, 0.3)
    got = torch.tensor(result.summary["rounds_to_recover"].to_numpy())
    torch.testing.assert_close(got, expected, equal_nan=True)
    with pytest.raises(ValueError, match="recover_tolerance"):
        _env(tiny_table, scenario, recover_tolerance=1.5)
    with pytest.raises(ValueError, match=r"recover_window must be in 1\.\.5"):
        _env(tiny_table, scenario, recover_window=6)


def test_resume_gives_the_uninterrupted_scenario_columns(tiny_table, tmp_path):
    """Interrupted after the round-14 checkpoint (the change is at round 8), resumed: the
    before/after columns and rounds_to_recover are those of the uninterrupted run."""
    scenario = [{"kind": "new_model", "arm": "best", "at": 0.4}]
    whole_env = _env(tiny_table, scenario)
    whole = simulate(LinUCB.from_problem(whole_env.problem()), whole_env, progress=False)
    ckpt = tmp_path / "ckpt.pt"

    def stop(t, *_):
        if t == 16:
            raise KeyboardInterrupt

    env = _env(tiny_table, scenario)
    with pytest.raises(KeyboardInterrupt):
        simulate(LinUCB.from_problem(env.problem()), env, progress=False, ckpt_every=7,
                 ckpt_path=ckpt, on_round=stop)  # fmt: skip
    fresh = _env(tiny_table, scenario)
    resumed = simulate(LinUCB.from_problem(fresh.problem()), fresh, progress=False,
                       resume_from=ckpt)  # fmt: skip
    cols = ["avg_utility_before", "avg_utility_after", "rounds_to_recover", "avg_utility"]
    assert whole.summary[cols].equals(resumed.summary[cols])
    assert torch.equal(fresh._trace, whole_env._trace)


def test_arm_references_follow_drift_and_price(tiny_table):
    scenario = [
        {"kind": "drift", "arm": "arm1", "at": 0.5, "score_shift": 0.4},
        {"kind": "price", "arm": "arm2", "at": 0.25, "factor": 3.0},
    ]
    env = _env(tiny_table, scenario)
    result = simulate(RandomRouter(2, 4), env, progress=False, log_every=3)
    rows = env._stream  # [R, T]
    scores = tiny_table.scores[rows].double().clone()  # [R, T, K]
    costs = tiny_table.costs[rows].double().clone()
    scores[:, 10:, 1] = (scores[:, 10:, 1] + 0.4).clamp(0, 1)
    costs[:, 5:, 2] *= 3.0
    for k in range(4):
        got_acc = torch.tensor(result.summary[f"arm_accuracy_{k}"].to_numpy())
        got_cost = torch.tensor(result.summary[f"arm_cost_{k}"].to_numpy())
        torch.testing.assert_close(got_acc, scores[:, :, k].mean(1))
        torch.testing.assert_close(got_cost, costs[:, :, k].mean(1))


def test_knn_router_learns_nothing_about_a_new_model():
    """kNN fitted on the train split scores a new model 0 (its cost is known): after the
    arrival it routes as a naive kNN with the new model's scores unknown (0). On this table
    kNN with the scores known picks the new model in 15 of the 40 rounds."""
    from torchroute.learners import KNNRouter

    table = make_table(n=120, k=3, seed=1)
    env = _env(table, [{"kind": "new_model", "arm": "best", "at": 0.5}])
    problem = env.problem()
    hidden = problem.hidden_arms
    knn = KNNRouter.from_problem(problem, k=3)
    train_unit = torch.nn.functional.normalize(problem.train.features.float(), dim=-1)
    rows = torch.as_tensor(table.rows("train"))
    picked_known = 0
    for t in range(env.scenario.change, env.horizon):
        context = env.context(t)
        chosen = knn.act(context, torch.Generator().manual_seed(0)).action[:, 0]
        for r in range(2):
            x = context.x[r, 0].float()
            near = (train_unit @ (x / x.norm())).topk(3).indices
            score = table.scores[rows][near].mean(0).clone()
            cost = table.costs[rows][near].mean(0)
            picked_known += int(bool(hidden[r, (score - float(env.rho[r]) * cost).argmax()]))
            score[hidden[r]] = 0.0
            assert int(chosen[r]) == int((score - float(env.rho[r]) * cost).argmax())
    assert picked_known == 15


def test_a_bad_scenario_fails_before_any_data_is_loaded(tmp_path):
    from omegaconf import OmegaConf

    from tests.conftest import LINUCB_NODE, tiny_run_config
    from torchroute.run.options import ConfigError, RunOptions

    cfg = tiny_run_config(tmp_path / "out", {"linucb": LINUCB_NODE})
    cfg.env.scenario = OmegaConf.create([{"kind": "drift", "arm": "best", "at": 0.5}])
    with pytest.raises(ConfigError, match=r"env: scenario\[0\]\.score_shift is missing"):
        RunOptions.from_config(cfg)
    assert not (tmp_path / "out").exists()


def test_saved_problem_keeps_the_hidden_arms(tiny_table):
    from torchroute.run.saved import problem_from_state, problem_state, trial_problem

    problem = _env(tiny_table, [{"kind": "new_model", "arm": "best", "at": 0.5}]).problem()
    back = problem_from_state(problem_state(problem))
    assert torch.equal(back.hidden_arms, problem.hidden_arms)
    assert torch.equal(trial_problem(back, 1).hidden_arms, problem.hidden_arms[1:])
    plain = _env(tiny_table, None).problem()
    assert "hidden_arms" not in problem_state(plain)
    assert problem_from_state(problem_state(plain)).hidden_arms is None


def test_envs_sharing_their_tensors_keep_a_trace_each(tiny_table):
    """The learners of a run share the env built once, and ``jobs`` workers its tensors
    (sent in shared memory): two runs on copies of one env, played round by round in turn,
    record the trace and ``rounds_to_recover`` of each run alone."""
    scenario = [{"kind": "drift", "arm": "best", "at": 0.5, "score_shift": -0.5}]
    learners = {"best": BestSingleArm, "random": RandomRouter}
    alone = {}
    for name, cls in learners.items():
        env = _env(tiny_table, scenario)
        alone |= _run_in_turn({name: (env, _learner(cls, env))})
    built = _env(tiny_table, scenario)
    shared = {name: copy.copy(built) for name in learners}  # one tensor behind both traces
    both = _run_in_turn({n: (env, _learner(learners[n], env)) for n, env in shared.items()})
    for name in learners:
        assert torch.equal(both[name].nan_to_num(-1), alone[name].nan_to_num(-1)), name


def _learner(cls, env):
    return cls.from_problem(env.problem()) if cls is BestSingleArm else cls(2, 4)


def _run_in_turn(runs: dict) -> dict:
    """Play the runs' rounds in turn (round t of each before round t + 1 of any); per run,
    the trace its env recorded and its ``rounds_to_recover``, ``[R, horizon + 1]``."""
    generator = torch.Generator().manual_seed(0)
    horizon = next(iter(runs.values()))[0].horizon
    for t in range(horizon):
        for env, learner in runs.values():
            context = env.context(t)
            decision = learner.act(context, generator)
            feedback, _ = env.step(context, decision, generator)
            learner.update(context, decision, feedback, generator)
    out = {}
    for name, (env, _) in runs.items():
        recover = rounds_to_recover(env._trace[:, env.scenario.change :], window=3)
        out[name] = torch.cat([env._trace, recover[:, None]], 1)
    return out


_COLD_RUN = """
import sys, tempfile
from pathlib import Path
from omegaconf import OmegaConf
from tests.conftest import LINUCB_NODE, tiny_run_config
from torchroute.run import RunOptions, run
cfg = tiny_run_config(Path(tempfile.mkdtemp()) / "out", {"linucb": LINUCB_NODE})
if sys.argv[1] == "scenario":
    cfg.env.scenario = OmegaConf.create([{"kind": "drift", "arm": "best", "at": 0.5,
                                          "score_shift": -0.2}])
run(RunOptions.from_config(cfg))
print(sorted(m for m in sys.modules if m.startswith(
    ("torchroute.envs.scenario", "torchroute.envs.events", "torchroute.run.hidden"))))
"""


@pytest.mark.parametrize("scenario", [False, True])
def test_a_run_imports_the_scenario_code_only_when_it_has_a_scenario(scenario):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    argv = [sys.executable, "-c", _COLD_RUN, "scenario" if scenario else "cold"]
    done = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.strip().splitlines()[-1]
    if scenario:
        assert "'torchroute.envs.events.drift'" in loaded and "'torchroute.envs.scenario'" in loaded
        assert "'torchroute.envs.events.price'" not in loaded  # only the kinds configured
    else:
        assert loaded == "[]"


def test_each_file_of_the_events_package_is_the_kind_it_is_named_after():
    """A kind is a file: the kinds are the package's files, each binding its class."""
    from pathlib import Path

    from torchroute.envs import events

    files = sorted(
        p.stem
        for p in Path(events.__file__).parent.glob("*.py")
        if p.stem not in ("__init__", "base")
    )
    assert events.kinds() == files == ["drift", "new_model", "price"]
    for kind in files:
        cls = events.event_class(kind, "scenario[0]")
        assert cls.kind == kind and issubclass(cls, events.Event)
    with pytest.raises(ScenarioError, match=r"scenario\[3\]\.kind must be one of \['drift', "):
        events.event_class("base", "scenario[3]")
