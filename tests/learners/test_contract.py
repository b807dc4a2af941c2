"""The learner contract, parametrised over every learner."""

from __future__ import annotations

import io

import pytest
import torch

from tests.learners.helpers import (
    F64,
    LEARNERS,
    LinearProblem,
    build,
    config_specs,
    feedback_for,
    forced_decision,
    run,
)
from torchroute.errors import InputError
from torchroute.functional.sampling import one_hot_probs
from torchroute.learners import Learner
from torchroute.learners.base import FixedPolicy
from torchroute.types import Context, Decision

NAMES = sorted(LEARNERS)
R, K, D = 4, 3, 5


def _warm_up(learner: Learner, problem: LinearProblem, rounds: int = 2 * K, b: int = 1):
    """Updates with test-chosen arms (every arm of every trial gets data)."""
    gen = torch.Generator().manual_seed(11)
    for t in range(rounds):
        context = problem.context(b)
        arms = (torch.arange(R)[:, None] + t + torch.arange(b)) % K  # [R, B]
        decision = forced_decision(arms, K)
        feedback = feedback_for(learner, decision, problem.reward(context))
        learner.update(context, decision, feedback, gen)


def _tensors(state, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a (possibly nested: optimizer extra state) state dict, by path."""
    if isinstance(state, torch.Tensor):
        return {prefix: state}
    if isinstance(state, dict):
        items = list(state.items())
    elif isinstance(state, (list, tuple)):
        items = list(enumerate(state))
    else:
        return {}
    out: dict[str, torch.Tensor] = {}
    for key, value in items:
        out.update(_tensors(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _is_step_count(path: str, value: torch.Tensor) -> bool:
    """An optimizer's step counter: one scalar shared by the trials, which step together."""
    return value.ndim == 0 and path.endswith(".step")


def _permute(state, perm: torch.Tensor):
    """``state`` with every per-trial tensor permuted along its leading dimension."""
    if isinstance(state, torch.Tensor):
        return state if state.ndim == 0 else state[perm]
    if isinstance(state, dict):
        return {k: _permute(v, perm) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_permute(v, perm) for v in state)
    return state


def test_every_learner_is_a_case():
    """Every exported single-choice learner is a case here, through its config (or a
    hand-written entry of helpers.LEARNERS with stronger promises): none is registered by
    hand. Subset learners (``protocol = "subset"``: a multiset action and a set reward) have
    the same contract tests in tests/learners/test_subset_contract.py."""
    import torchroute.learners as lib
    from tests.learners.test_subset_contract import SUBSET_CONFIGS

    concrete = {
        name
        for name in lib.__all__
        if name not in {"Learner", "RidgeLearner", "SubsetLearner", "RegressorRouter"}
    }
    subset = {n for n in concrete if getattr(lib, n).protocol == "subset"}
    cased = {type(spec.build(2, 3, 4, 0)).__name__ for spec in LEARNERS.values()}
    assert concrete - subset <= cased, (
        f"add a configs/learner/ config for {concrete - subset - cased}"
    )
    covered = {cls.__name__ for cls in SUBSET_CONFIGS.values()}
    assert subset <= covered, f"add a configs/learner/ config for {subset - covered}"


@pytest.mark.parametrize("b", [1, 3])
@pytest.mark.parametrize("name", NAMES)
def test_decision_shapes_and_distribution(name, b):
    learner = build(name, R, K, D)
    problem = LinearProblem(R, K, D, seed=1)
    gen = torch.Generator().manual_seed(0)
    for _ in range(4):
        context = problem.context(b)
        decision = learner.act(context, gen)
        probs, action = decision.probs, decision.action
        assert probs.shape == (R, b, K) and probs.dtype == F64
        assert action.shape == (R, b) and action.dtype == torch.long
        assert (probs >= 0).all()
        torch.testing.assert_close(probs.sum(-1), torch.ones(R, b, dtype=F64), rtol=0, atol=1e-12)
        assert ((action >= 0) & (action < K)).all()
        assert (probs.gather(-1, action[..., None]) > 0).all()
        metrics = learner.update(
            context, decision, feedback_for(learner, decision, problem.reward(context))
        )
        assert isinstance(metrics, dict)
        for value in metrics.values():
            assert isinstance(value, torch.Tensor) and value.shape[0] == R
    assert torch.equal(learner.rounds, torch.full((R,), 4 * b))


@pytest.mark.parametrize("name", NAMES)
def test_state_has_a_leading_trial_dimension(name):
    """Every tensor of the state (``state_dict``) is per trial; fixed data is not state."""
    learner = build(name, R, K, D)
    _warm_up(learner, LinearProblem(R, K, D, seed=3))  # optimizers create their state lazily
    for key, value in _tensors(learner.state_dict()).items():
        assert _is_step_count(key, value) or value.shape[0] == R, key


@pytest.mark.parametrize("name", NAMES)
def test_trial_equivariance(name):
    """Permuting the trials of the state and the inputs permutes the outputs."""
    spec = LEARNERS[name]
    make = spec.without_draws or spec.build
    problem = LinearProblem(R, K, D, seed=2)
    learner = make(R, K, D, 0).to(F64)
    _warm_up(learner, problem)
    learner.rounds.copy_(torch.tensor([6, 60, 600, 6000]))  # per-trial schedules differ
    perm = torch.tensor([2, 0, 3, 1])

    permuted = make(R, K, D, 1).to(F64)
    permuted.load_state_dict(_permute(learner.state_dict(), perm))
    context = problem.context(2)
    context_p = Context(x=context.x[perm])
    decision = learner.act(context, torch.Generator().manual_seed(3))
    decision_p = permuted.act(context_p, torch.Generator().manual_seed(3))
    if spec.deterministic_probs:
        torch.testing.assert_close(decision_p.probs, decision.probs[perm], rtol=0, atol=1e-14)
    if spec.deterministic_action:
        assert torch.equal(decision_p.action, decision.action[perm])

    # The update is deterministic for every learner: feed the permuted decision and feedback.
    reward = problem.reward(context)
    feedback = feedback_for(learner, decision, reward)
    observe = None if decision.observe is None else decision.observe[perm]
    decision_pp = forced_decision(decision.action[perm], K, observe=observe)
    feedback_p = feedback_for(permuted, decision_pp, reward[perm])
    learner.update(context, decision, feedback, torch.Generator().manual_seed(4))
    permuted.update(context_p, decision_pp, feedback_p, torch.Generator().manual_seed(4))
    expected = _tensors(_permute(learner.state_dict(), perm))
    for key, value in _tensors(permuted.state_dict()).items():
        torch.testing.assert_close(value, expected[key], rtol=0, atol=1e-13, msg=key)


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip(name):
    problem = LinearProblem(R, K, D, seed=4)
    learner = build(name, R, K, D)
    run(learner, problem, rounds=5, seed=5)
    buffer = io.BytesIO()
    torch.save(learner.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert "rounds" in state

    fresh = build(name, R, K, D, seed=1)  # different constructor data where it matters
    fresh.load_state_dict(state)
    fresh_state = _tensors(fresh.state_dict())
    for key, value in _tensors(learner.state_dict()).items():
        assert torch.equal(fresh_state[key], value), key
    gen_a, gen_b = torch.Generator().manual_seed(6), torch.Generator().manual_seed(6)
    for _ in range(3):
        context = problem.context(2)
        a, b = learner.act(context, gen_a), fresh.act(context, gen_b)
        assert torch.equal(a.action, b.action) and torch.equal(a.probs, b.probs)
        feedback = feedback_for(learner, a, problem.reward(context))
        learner.update(context, a, feedback, gen_a)
        fresh.update(context, b, feedback, gen_b)
    fresh_state = _tensors(fresh.state_dict())
    for key, value in _tensors(learner.state_dict()).items():
        assert torch.equal(fresh_state[key], value), key


@pytest.mark.parametrize("name", NAMES)
def test_cpu_float64_determinism(name):
    actions = []
    for _ in range(2):
        learner = build(name, R, K, D)
        acts, _ = run(learner, LinearProblem(R, K, D, seed=7), rounds=50, seed=8)
        actions.append(acts)
    assert torch.equal(actions[0], actions[1])


@pytest.mark.parametrize("name", NAMES)
def test_to_float64(name):
    learner = build(name, R, K, D, dtype=torch.float32)
    for buf in learner.buffers():
        assert buf.dtype in (torch.float32, torch.long, torch.bool)
    learner = learner.to(torch.float64)
    for buf_name, buf in learner.named_buffers():
        assert buf.dtype in (F64, torch.long, torch.bool), buf_name
    assert learner.rounds.dtype == torch.long
    problem = LinearProblem(R, K, D, seed=9)
    acts, _ = run(learner, problem, rounds=3)
    assert acts.dtype == torch.long
    decision = learner.act(problem.context(), torch.Generator().manual_seed(0))
    assert decision.probs.dtype == F64


@pytest.mark.parametrize("name", NAMES)
def test_wrong_number_of_trials_raises(name):
    learner = build(name, R, K, D)
    context = LinearProblem(R - 1, K, D).context()
    with pytest.raises(ValueError, match=r"\[R, B, d\]"):
        learner.act(context)
    decision = forced_decision(torch.zeros(R - 1, 1, dtype=torch.long), K)
    feedback = feedback_for(learner, decision, torch.zeros(R - 1, 1, K, dtype=F64))
    with pytest.raises(ValueError, match=r"\[R, B, d\]"):
        learner.update(context, decision, feedback)


@pytest.mark.parametrize("name", [n for n in NAMES if LEARNERS[n].uses_dim])
def test_wrong_feature_dimension_raises(name):
    learner = build(name, R, K, D)
    context = LinearProblem(R, K, D + 1).context()
    with pytest.raises(ValueError, match=f"d={D}.*d={D + 1}"):
        learner.act(context)
    decision = forced_decision(torch.zeros(R, 1, dtype=torch.long), K)
    feedback = feedback_for(learner, decision, torch.zeros(R, 1, K, dtype=F64))
    with pytest.raises(ValueError, match=f"d={D}.*d={D + 1}"):
        learner.update(context, decision, feedback)


@pytest.mark.parametrize("name", NAMES)
def test_constructor_rejects_bad_sizes(name):
    with pytest.raises(ValueError, match="num_trials"):
        LEARNERS[name].build(0, K, D, 0)
    with pytest.raises(ValueError, match="num_arms"):
        LEARNERS[name].build(R, 1, D, 0)


N_MC = 2000  # independent act draws per context in the routing-probability test


def _frozen(learner: Learner) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in _tensors(learner.state_dict()).items()}


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "trained"])
@pytest.mark.parametrize("name", NAMES)
def test_routing_probs_are_the_frequencies_of_act(name, fresh):
    """``routing_probs`` against an independent Monte-Carlo estimate: the arm frequencies of
    ``N_MC`` further ``act`` calls on the same contexts. An exact rule (a sampling learner,
    LinUCB's ties, epsilon-greedy, the best arm) must match them within the sampling error
    of those calls alone; an estimated one (LinTS's posterior draws, the default further
    ``act`` calls, here ``N_MC`` of them) within that of both. A fresh ridge learner has
    every arm tied."""
    from torchroute.learners import LinTS

    learner = build(name, R, K, D)
    problem = LinearProblem(R, K, D, seed=12)
    if not fresh:
        _warm_up(learner, problem)
    context = problem.context(2)
    decision = learner.act(context, torch.Generator().manual_seed(1))
    before = _frozen(learner)
    probs = learner.routing_probs(context, decision, torch.Generator().manual_seed(2), N_MC)
    for key, value in _tensors(learner.state_dict()).items():
        assert torch.equal(value, before[key]), key  # the state is only read
    assert probs.shape == (R, 2, K) and probs.dtype == F64
    torch.testing.assert_close(probs.sum(-1), torch.ones(R, 2, dtype=F64), rtol=0, atol=1e-12)
    assert (probs >= 0).all() and (probs.gather(-1, decision.action[..., None]) > 0).all()

    many = Context(x=context.x.repeat(1, N_MC, 1))  # [R, N * 2, d]: N copies of the 2
    with torch.no_grad():
        draws = learner.act(many, torch.Generator().manual_seed(3))
    freq = torch.nn.functional.one_hot(draws.action.view(R, N_MC, 2), K).double().mean(1)
    expected = probs
    if learner.samples_from_probs:
        torch.testing.assert_close(probs, decision.probs.double(), rtol=0, atol=0)
        if not LEARNERS[name].deterministic_probs:  # a graph drawn per call: E[probs]
            expected = draws.probs.view(R, N_MC, 2, K).double().mean(1)
    estimated = not learner.samples_from_probs and type(learner).routing_probs in (
        Learner.routing_probs,
        LinTS.routing_probs,
    )
    sigma = (expected * (1 - expected) / N_MC).sqrt()
    slack = 5 * (0.25 / N_MC) ** 0.5 + 1 / (N_MC + 1) if estimated else 0.0
    gap = (freq - expected).abs()
    assert (gap <= 5 * sigma + 1e-3 + slack).all(), (gap.max(), freq, expected)


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "trained"])
@pytest.mark.parametrize("name", NAMES)
def test_scores_act_hands_on_give_the_probabilities_computed_anew(name, fresh):
    """Where ``act`` passes on the scores it chose by (``Decision.scores``), ``routing_probs``
    reading them equals ``routing_probs`` of the same decision without them, bit for bit,
    also with an arm unavailable (a fresh ridge learner has every arm tied); a mis-shaped
    ``scores`` is refused."""
    learner = build(name, R, K, D)
    problem = LinearProblem(R, K, D, seed=12)
    if not fresh:
        _warm_up(learner, problem)
    context = problem.context(2)
    available = torch.ones(R, 2, K, dtype=torch.bool)
    available[:, :, 0] = False
    for ctx in (context, Context(x=context.x, available=available)):
        decision = learner.act(ctx, torch.Generator().manual_seed(1))
        if decision.scores is None:
            continue
        assert decision.scores.shape == decision.probs.shape
        bare = Decision(decision.probs, decision.action, decision.observe)
        given = learner.routing_probs(ctx, decision, torch.Generator().manual_seed(2))
        anew = learner.routing_probs(ctx, bare, torch.Generator().manual_seed(2))
        torch.testing.assert_close(given, anew, rtol=0, atol=0)
    with pytest.raises(InputError, match=r"Decision.scores must be \[R, B, K\]"):
        Decision(
            torch.ones(R, 2, K) / K, torch.zeros(R, 2, dtype=torch.long), None, torch.ones(R, K)
        )


@pytest.mark.parametrize("name", NAMES)
def test_capabilities_are_declared(name):
    """The class attributes serve, the runner and the device check read have known values."""
    from torchroute.devicecheck.compare import TOLERANCES

    learner = build(name, R, K, D)
    assert learner.feedback in ("bandit", "full", "graph")
    assert learner.protocol in ("single", "low_rank")  # subset learners: their own contract
    assert learner.device_tolerance in TOLERANCES
    assert isinstance(learner.samples_from_probs, bool) and isinstance(learner.reads_groups, bool)
    decision = learner.act(LinearProblem(R, K, D, seed=13).context(), torch.Generator())
    asks_all = decision.observe is not None and bool(decision.observe.all())
    assert asks_all == (learner.feedback == "full")  # a full-feedback learner asks for all


class TrainMeanRouter(FixedPolicy):
    """A plug-in static router (defined here, not in torchroute): per trial, the arm of the
    highest mean train score, fitted once from ``Problem.train``."""

    def __init__(self, num_trials: int, num_arms: int, arm: torch.Tensor) -> None:
        super().__init__(num_trials, num_arms)
        self.register_buffer("arm", arm.expand(num_trials).clone())

    @classmethod
    def from_problem(cls, problem, **hparams):
        train = problem.require_train(cls.__name__)
        return cls(problem.num_trials, problem.num_arms, train.scores.mean(0).argmax())

    def act(self, context, generator=None):
        action = self.arm[:, None].expand(context.x.shape[:2])
        return Decision(one_hot_probs(action, self.num_arms, context.x.dtype), action)


def test_a_new_static_router_config_is_a_case_with_no_edit(tmp_path):
    """The contract problem has a train split: a static router config in a config folder
    becomes a case (``config:<stem>``) as it is, fitted on that split."""
    (tmp_path / "mean_router.yaml").write_text(
        f"_target_: {__name__}.TrainMeanRouter.from_problem\n_partial_: true\n"
    )
    specs = config_specs(tmp_path)
    assert list(specs) == ["config:mean_router"]
    learner = specs["config:mean_router"].build(R, K, D, 0)
    assert isinstance(learner, TrainMeanRouter) and learner.role == "static"
    problem = LinearProblem(R, K, D, seed=1)
    decision = learner.act(problem.context(3), torch.Generator().manual_seed(0))
    assert decision.probs.shape == (R, 3, K)
    torch.testing.assert_close(decision.probs.sum(-1), torch.ones(R, 3, dtype=decision.probs.dtype))
