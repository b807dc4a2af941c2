"""``budgets`` in simulate: the pacer in the loop against a hand loop, a 3-model table where a
static router stays within its budget, the starting rho against a brute-force search, and
the configuration checks."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from tests.conftest import tiny_run_config
from torchroute.data.table import RoutingTable
from torchroute.envs import SingleChoiceEnv
from torchroute.errors import ConfigError
from torchroute.functional.pacing import BudgetPacer
from torchroute.learners.anchors import KNNScoreRouter
from torchroute.loop import WARMUP_SHARE, simulate
from torchroute.run.budgets import (
    REFINE_STEPS,
    PacingPlan,
    choose_step,
    plan_pacing,
    rho_grid,
)
from torchroute.run.build import build
from torchroute.run.experiment import run
from torchroute.run.options import RunOptions
from torchroute.types import Context

#: the three models' known costs (dollars per request) and mean qualities
COSTS = (1e-4, 1e-3, 1e-2)
KNN = {
    "_target_": "torchroute.learners.anchors.KNNScoreRouter.from_problem",
    "_partial_": True,
    "k": [10, 30],
}


def three_model_table(n: int = 900, seed: int = 0) -> RoutingTable:
    """900 queries (450 train, 150 val, 300 test), 3 models of fixed costs ``COSTS``; the
    dearer the model the better on average, and which one is best depends on the query."""
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(n, 4, generator=g)
    base = torch.tensor([0.0, 0.8, 1.6])
    logits = base + emb[:, :3] * 1.5
    scores = (torch.rand(n, 3, generator=g) < torch.sigmoid(logits)).float()
    costs = torch.tensor(COSTS).expand(n, 3).clone()
    split = ["train"] * (n // 2) + ["val"] * (n // 6) + ["test"] * (n - n // 2 - n // 6)
    return RoutingTable(
        scores=scores,
        costs=costs,
        arm_names=["small", "medium", "large"],
        query_ids=[f"q{i}" for i in range(n)],
        split=split,
        embeddings=emb,
    )


def _config(out, *overrides):
    cfg = tiny_run_config(out, {"knn_val": KNN}, "features.pca_dim=null", *overrides)
    cfg.data = {"_target_": "tests.test_budgets.three_model_table"}
    return cfg


@pytest.mark.parametrize(("decay_after", "horizon"), [(None, None), (6, 120)])
def test_the_loop_paces_every_round_as_a_hand_loop(decay_after, horizon):
    """Each round's Context.rho is the pacer's rho of the costs so far (a Python loop): the
    plain rule, and the step decaying after 6 rounds aiming at the budget left."""
    table = three_model_table()
    env = SingleChoiceEnv(table, rho=[0.0, 0.0], seeds=[0, 1], horizon=120)
    router = KNNScoreRouter.from_problem(env.problem(), k=10)
    budget, eta, start = (2e-3, 4e-3), (0.05, 0.2), (300.0, 0.0)
    pacer = BudgetPacer(
        torch.tensor(budget, dtype=torch.float64), torch.tensor(start), eta, decay_after, horizon
    )
    seen_rho, seen_cost = [], []

    def record(t, context, decision, feedback):
        seen_rho.append(context.rho[:, 0].double().tolist())
        seen_cost.append(feedback.cost.gather(-1, decision.action[..., None])[:, 0, 0].tolist())

    result = simulate(router, env, pacer=pacer, on_round=record, progress=False)
    warm = math.ceil(WARMUP_SHARE * env.horizon)
    for r in range(2):
        rho, spent, b = start[r], 0.0, budget[r]
        for t in range(env.horizon):
            assert seen_rho[t][r] == pytest.approx(rho, rel=1e-5, abs=1e-6), (r, t)
            step = eta[r] if decay_after is None else eta[r] * min(1, decay_after / (t + 1)) ** 0.5
            aim = b if horizon is None else min(b, max(0.0, (b * horizon - spent) / (horizon - t)))
            rho = max(0.0, rho + step * (seen_cost[t][r] - aim) / b**2)
            spent += seen_cost[t][r]
        costs = [c[r] for c in seen_cost]
        row = result.summary.iloc[r]
        assert row["budget"] == budget[r]
        assert row["rho_final"] == pytest.approx(rho, rel=1e-5)
        late = sum(costs[warm:]) / len(costs[warm:])
        assert row["avg_cost_after_warmup"] == pytest.approx(late, rel=1e-6)
        assert row["budget_overrun"] == pytest.approx(sum(costs) / len(costs) / budget[r] - 1)
        assert row["budget_overrun_after_warmup"] == pytest.approx(late / budget[r] - 1)
    # the static router followed the paced rho: both rho paths differ, so do the choices
    assert len({tuple(c) for c in seen_cost}) > 1


def test_a_static_router_follows_context_rho():
    """A huge per-request rho picks the cheapest model; rho 0 the router's own rho-0 choice."""
    table = three_model_table()
    env = SingleChoiceEnv(table, rho=[0.0], seeds=[0], horizon=50)
    router = KNNScoreRouter.from_problem(env.problem(), k=10)
    context = env.context(0)
    cheap = replace(context, rho=torch.full((1, 1), 1e9))
    assert router.act(cheap).action.item() == 0
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    zero = replace(context, rho=torch.zeros(1, 1))
    assert torch.equal(router.act(zero, g1).action, router.act(context, g2).action)


def test_a_static_router_stays_within_budget_after_warmup(tmp_path):
    budgets = [1.5e-3, 3e-3, 6e-3]
    cfg = _config(tmp_path / "run", f"budgets={budgets}", "seeds=[0,1]")
    results = run(RunOptions.from_config(cfg))
    assert len(results) == 6 and sorted(set(results["budget"])) == budgets
    assert (results["avg_cost_after_warmup"] <= results["budget"] * 1.01).all(), results[
        ["budget", "avg_cost_after_warmup", "rho", "rho_final"]
    ]
    # and it spends: the dearest model is needed to reach the larger budgets' quality
    spent = results.groupby("budget")["avg_cost"].mean()
    assert spent.is_monotonic_increasing and spent.iloc[-1] > 2 * spent.iloc[0]
    written = (tmp_path / "run" / "results.csv").read_text().splitlines()[0].split(",")
    assert {"budget", "budget_overrun", "budget_overrun_after_warmup"} <= set(written)


def test_the_starting_rho_is_the_brute_force_bisection_of_fixed_rhos(tmp_path):
    """The plan's starting rho: of the grid rhos, the one whose validation mean cost is the
    largest that is <= the budget, then REFINE_STEPS bisections towards the grid rho below
    it, each midpoint kept as the upper end when its validation cost is <= the budget;
    found here by running each rho alone on each validation stream, the router built for
    the budget (its candidate chosen for that cost)."""
    budgets = (1.5e-3, 5e-3)
    opts = RunOptions.from_config(_config(tmp_path / "run", f"budgets={list(budgets)}"))
    built = build(opts)
    plan = plan_pacing(opts, "knn_val", built)
    main = built.env.problem()

    def validation_cost(rho: float, budget: float) -> float:
        mean = 0.0
        for seed in (0, 1, 2):  # the validation streams, one at a time
            env = SingleChoiceEnv(
                built.table, rho=[rho], seeds=[seed], split="val", features=built.features
            )
            spend = torch.tensor([budget], dtype=torch.float64)  # the trial's own budget
            problem = replace(env.problem(), validation=main.validation, budget=spend)
            router = KNNScoreRouter.from_problem(problem, k=[10, 30])
            summary = simulate(router, env, progress=False).summary
            mean += float(summary["avg_cost"].iloc[0]) / 3
        return mean

    grid = rho_grid(budgets).tolist()
    moved = 0
    for i, b in enumerate(budgets):
        costs = [validation_cost(rho, b) for rho in grid]
        under = [(c, -j) for j, c in enumerate(costs) if c <= b]
        assert under  # both budgets have a grid rho within them
        j = -max(under)[1]
        low, high = grid[max(j - 1, 0)], grid[j]
        for _ in range(REFINE_STEPS):
            if low == high:
                break
            mid = math.sqrt(low * high) if low > 0 else (low + high) / 2
            if validation_cost(mid, b) <= b:
                high = mid
            else:
                low = mid
        assert float(plan.rho[i]) == pytest.approx(high, rel=1e-6)
        assert validation_cost(float(plan.rho[i]), b) <= b
        moved += high != grid[j]
    assert moved  # a bisection step moved a start off the grid
    assert plan.rho[0] > plan.rho[1]  # the smaller budget starts dearer in rho


def test_a_plan_s_pacer_decays_after_the_warm_up_and_aims_at_the_budget_left_on_the_run():
    """The plan's pacer for a stream of 300 rounds: the step decays after its first 5%
    (15 rounds) on every stream; only the run's (aim_left) aims at the budget left."""
    one = torch.ones(2, dtype=torch.float64)
    plan = PacingPlan(budget=one * 1e-3, rho=one * 10.0, eta=one * 0.1)
    validation = plan.pacer(torch.device("cpu"), torch.float64, 300)
    paced = plan.pacer(torch.device("cpu"), torch.float64, 300, aim_left=True)
    assert (validation.decay_after, validation.horizon) == (15, None)
    assert (paced.decay_after, paced.horizon) == (15, 300)
    assert plan.pacer(torch.device("cpu"), torch.float64, 10).decay_after == 1


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("[-0.001]", "budgets must be finite and > 0"),
        ("[0]", "budgets must be finite and > 0"),
        ("[]", "budgets must be a non-empty list"),
        ("[abc]", "budgets must hold float values"),
        ("0.001", "budgets must be a list"),
        ("[0.001,0.001]", "budgets repeats"),
    ],
)
def test_bad_budgets_are_refused_in_one_line(tmp_path, value, needle):
    with pytest.raises(ConfigError, match=needle) as caught:
        RunOptions.from_config(_config(tmp_path / "run", f"budgets={value}"))
    assert "\n" not in str(caught.value)


def test_a_learner_that_cannot_be_paced_is_named_before_anything_is_written(tmp_path):
    from tests.conftest import LINUCB_NODE

    cfg = _config(tmp_path / "run", "budgets=[0.001]")
    cfg.learners["linucb"] = LINUCB_NODE
    with pytest.raises(ConfigError, match="learner 'linucb' \\(LinUCB\\) cannot be paced") as e:
        run(RunOptions.from_config(cfg))
    assert "objective: quality_cost" in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()


def test_without_budgets_the_fingerprint_and_results_are_as_before(tmp_path):
    """``budgets: null`` leaves the fingerprint (resume, reuse) as without the key, and a run
    without budgets writes no budget column."""
    opts = RunOptions.from_config(_config(tmp_path / "run"))
    assert opts.budgets is None and "budgets" not in opts.fingerprint
    config = dict(opts.config)
    config.pop("budgets")
    assert opts.digest() == RunOptions.from_config(config).digest()
    results = run(opts)
    assert not {"budget", "budget_overrun", "rho_final"} & set(results.columns)


def test_context_rho_reaches_the_learner_as_r_by_b():
    pacer = BudgetPacer(torch.tensor([1.0, 2.0]), rho=torch.tensor([3.0, 4.0]), eta=0.1)
    from torchroute.loop import _Paced

    env = SingleChoiceEnv(three_model_table(), rho=[0.0, 0.0], seeds=[0, 1], horizon=40)
    paced = _Paced(pacer, env).context(Context(x=torch.zeros(2, 3, 4)))
    assert paced.rho.tolist() == [[3.0] * 3, [4.0] * 3]


def test_a_paced_run_resumes_to_the_same_numbers(tmp_path):
    """The pacer's state travels in the checkpoint: stop after round 60, resume, same results."""
    from torchroute.checkpoint import load_checkpoint

    class Stop(Exception):
        pass

    def stop(t, *_):
        if t == 60:
            raise Stop

    def paced_run(**kwargs):
        env = SingleChoiceEnv(three_model_table(), rho=[10.0, 0.0], seeds=[0, 1], horizon=120)
        router = KNNScoreRouter.from_problem(env.problem(), k=10)
        budget = torch.tensor([2e-3, 4e-3], dtype=torch.float64)
        pacer = BudgetPacer(budget, 10.0, 0.1, decay_after=6, horizon=120)
        return simulate(router, env, pacer=pacer, progress=False, **kwargs).summary

    whole = paced_run()
    path = tmp_path / "half.pt"
    with pytest.raises(Stop):
        paced_run(ckpt_every=60, ckpt_path=path, on_round=stop)
    payload = load_checkpoint(path)
    assert payload["round"] == 60 and payload["pacer"]["rounds"] == 60
    resumed = paced_run(resume_from=path)
    columns = ["rho_final", "avg_cost", "avg_cost_after_warmup", "budget_overrun", "accuracy"]
    assert whole[columns].equals(resumed[columns])


def test_trial_chunks_give_the_numbers_of_one_piece(tmp_path):
    """Each piece of a chunked run gets its own trials' plan (budget, rho, eta)."""
    common = ("budgets=[0.0015,0.004]", "seeds=[0,1]", "rng=per_trial")
    whole = run(RunOptions.from_config(_config(tmp_path / "a", *common)))
    chunked = run(RunOptions.from_config(_config(tmp_path / "b", *common, "trial_chunk=3")))
    columns = ["budget", "rho", "rho_final", "avg_cost_after_warmup", "accuracy"]
    assert whole[columns].equals(chunked[columns])


def test_sweep_refuses_budgets_in_one_line(tmp_path):
    from torchroute.sweep import run_sweep

    with pytest.raises(ConfigError, match="budgets: torchroute sweep") as caught:
        run_sweep(_config(tmp_path / "run", "budgets=[0.001]"))
    assert "\n" not in str(caught.value) and not (tmp_path / "run").exists()


def test_a_quality_cost_learner_is_paced_and_a_utility_one_is_not(tmp_path):
    from tests.conftest import LINUCB_NODE

    cfg = _config(tmp_path / "run", "budgets=[0.002]", "run_learners=[linucb]")
    cfg.learners["linucb"] = {**LINUCB_NODE, "objective": "quality_cost"}
    results = run(RunOptions.from_config(cfg))
    assert results["rho_final"].iloc[0] != results["rho"].iloc[0]  # the pacer moved it
    assert results["avg_cost_after_warmup"].iloc[0] <= 0.002 * 1.01
    cfg.learners["linucb"] = {**LINUCB_NODE, "objective": "utility"}
    with pytest.raises(ConfigError, match="learner 'linucb' \\(LinUCB\\) cannot be paced"):
        run(RunOptions.from_config(_with(cfg, "overwrite", True)))


def test_budgets_with_request_rhos_are_refused(tmp_path):
    cfg = _config(tmp_path / "run", "budgets=[0.002]", "+env.request_rhos=[0,100]")
    with pytest.raises(ConfigError, match=r"env\.request_rhos"):
        run(RunOptions.from_config(cfg))
    assert not (tmp_path / "run").exists()


def _with(cfg, key, value):
    cfg[key] = value
    return cfg


def test_budgets_with_jobs_give_the_results_of_one_process(tmp_path):
    """``jobs=2`` runs the two learners in worker processes, each with the plan chosen in
    the parent: the same results.csv as ``jobs=1``, where every learner runs here."""
    import pandas as pd

    learners = {"knn_val": KNN, "knn_5": {**KNN, "k": [5]}}
    common = ("budgets=[0.0015,0.004]", "seeds=[0,1]")
    frames = []
    for jobs in (1, 2):
        cfg = _config(tmp_path / f"jobs{jobs}", *common, f"jobs={jobs}")
        cfg.learners = learners
        run(RunOptions.from_config(cfg))
        frames.append(pd.read_csv(tmp_path / f"jobs{jobs}" / "results.csv"))
    assert len(frames[0]) == 8 and set(frames[0]["learner"]) == {"knn_val", "knn_5"}
    assert frames[0]["rho_final"].ne(frames[0]["rho"]).all()  # every trial paced
    pd.testing.assert_frame_equal(frames[0], frames[1], check_exact=True)


def test_the_step_is_the_best_quality_within_the_budget_on_every_stream():
    """Three budgets, three steps, three validation streams, by hand. Budget 0: all within,
    mean qualities 0.72, 0.81, 0.82: step 2. Budget 1: step 0 has the best quality (0.9)
    but overspends on one stream (0.001): step 2 (0.6 against 0.5). Budget 2: none is
    within on every stream; worst-stream overruns 0.05, 0.02, 0.03: step 1."""
    quality = torch.tensor(
        [
            [[0.70, 0.72, 0.74], [0.79, 0.81, 0.83], [0.82, 0.80, 0.84]],
            [[0.90, 0.90, 0.90], [0.50, 0.50, 0.50], [0.60, 0.60, 0.60]],
            [[0.90, 0.90, 0.90], [0.50, 0.50, 0.50], [0.60, 0.60, 0.60]],
        ],
        dtype=torch.float64,
    )
    over = torch.full((3, 3, 3), -0.01, dtype=torch.float64)
    over[1, 0, 2] = 0.001
    over[2] = torch.tensor([[0.0, 0.05, 0.01], [0.02, 0.01, 0.0], [0.03, 0.0, 0.01]])
    assert choose_step(over, quality).tolist() == [2, 2, 1]
    # the last stream alone: budget 2's step 1 is within it (0.0), the only one
    assert choose_step(over[..., 2:], quality[..., 2:]).tolist() == [2, 2, 1]
    # equal qualities within: the first (the smallest step)
    assert choose_step(over[:1], quality[:1].new_full((1, 3, 3), 0.5)).tolist() == [0]


def test_plans_are_chosen_with_the_threads_of_the_workers(monkeypatch):
    """With jobs > 1 and more than one learner the learners run in workers of
    threads // jobs threads (at least 1): their plans are chosen with that many, and
    torch's setting is restored after; otherwise with the main process's threads."""
    from types import SimpleNamespace

    from torchroute.run import budgets

    seen: list[tuple[str, int]] = []
    monkeypatch.setattr(
        budgets,
        "plan_pacing",
        lambda opts, name, built: seen.append((name, torch.get_num_threads())),
    )
    before = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        for jobs, names, expected in [
            (2, ["a", "b"], 2),
            (3, ["a", "b"], 1),
            (8, ["a", "b"], 1),
            (2, ["a"], 4),  # one learner: it runs in the main process
            (1, ["a", "b"], 4),
        ]:
            seen.clear()
            opts = SimpleNamespace(jobs=jobs, run_learners=names)
            budgets.plan_all(opts, None)  # type: ignore[arg-type]
            assert seen == [(name, expected) for name in names]
            assert torch.get_num_threads() == 4
    finally:
        torch.set_num_threads(before)
