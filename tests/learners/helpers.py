"""Shared pieces of the learner tests: a factory per learner and a synthetic linear problem.

Every single-choice learner of ``configs/learner/*.yaml`` (``protocol`` other than
``"subset"``) is a case: a class that no hand-written entry of :data:`LEARNERS` covers is
built from its config on a tiny problem (:func:`config_specs`, with the weakest promises
unless :data:`CONFIG_OVERRIDES` says more; ``uses_dim`` from the learner's ``dim``), so a
new single-choice learner is covered by adding its config. The hand-written entries are
variants with stronger promises (deterministic probabilities, a kernel, an ablation), not a
registration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import Tensor

from torchroute.functional.sampling import one_hot_probs
from torchroute.learners import (
    CABSC,
    CABSD,
    EXP3,
    HPG,
    BestSingleArm,
    EpsilonGreedy,
    EuclideanQuadPG,
    FlattenedNPG,
    FullFeedbackLinUCB,
    FullFeedbackNeuralUCB,
    KNNRouter,
    Learner,
    LinTS,
    LinUCB,
    LogLinearPG,
    NeuralSquareCB,
    NeuralUCB,
    ParameterFreeHPG,
    RandomRouter,
    ResidualLinTS,
    ResidualLinUCB,
    SquareCB,
    anchors,
)
from torchroute.types import Context, Decision, Feedback

F64 = torch.float64


@dataclass(frozen=True)
class Spec:
    """How to build a learner for the tests and what it promises.

    Attributes:
        build: ``(R, K, d, seed) -> Learner``; ``seed`` only changes constructor data that
            ``load_state_dict`` must overwrite (e.g. the arm of :class:`BestSingleArm`).
        deterministic_probs: ``act``'s probs do not depend on the generator (no ties).
        deterministic_action: ``act``'s action does not depend on the generator (no ties).
        uses_dim: the learner checks the feature dimension ``d``.
        without_draws: builds the same learner with an ``update`` that draws nothing from
            the generator (per-trial random draws cannot be equivariant under a shared
            generator; the trial equivariance test uses this build, and the learner's own
            tests check its random part trial by trial against a reference).
    """

    build: Callable[[int, int, int, int], Learner]
    deterministic_probs: bool
    deterministic_action: bool
    uses_dim: bool
    without_draws: Callable[[int, int, int, int], Learner] | None = None


def _best_single_arm(r: int, k: int, d: int, seed: int) -> Learner:
    utility = torch.rand(r, k, generator=torch.Generator().manual_seed(100 + seed))
    return BestSingleArm(r, k, utility)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 + seed)


def _static_data(k: int, d: int, n: int = 12) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(7)
    return (
        torch.randn(n, d, generator=g),
        torch.rand(n, k, generator=g),
        torch.rand(n, k, generator=g),
    )


def _knn_router(r: int, k: int, d: int, seed: int) -> Learner:
    x, scores, costs = _static_data(k, d)
    return KNNRouter(r, k, torch.linspace(0.0, 0.5, r), x, scores, costs, k=3)


def _anchor(cls: type, **hp) -> Callable[[int, int, int, int], Learner]:
    """A static anchor router fitted on :func:`_static_data` (one candidate: no choice)."""
    from torchroute.types import TrainSplit

    def make(r: int, k: int, d: int, seed: int) -> Learner:
        x, scores, costs = _static_data(k, d, n=30)
        return cls(r, k, d, torch.linspace(0.0, 0.5, r), TrainSplit(x, scores, costs), **hp)

    return make


def _residual(cls: type, **hp) -> Callable[[int, int, int, int], Learner]:
    """A residual learner on a small MLP router fitted on :func:`_static_data`."""
    base = _anchor(anchors.MLPScoreRouter, hidden=8, weight_decay=1e-4, steps=20)
    return lambda r, k, d, seed: cls(r, k, d, base(r, k, d, seed), **hp)


def _tiny_oracle(k: int, d: int) -> torch.nn.Module:
    """A small real MultiHeadOracle reading ``d``-d inputs (the same weights every call)."""
    from torchroute.models import MultiHeadOracle

    with torch.random.fork_rng():
        torch.manual_seed(0)
        return MultiHeadOracle(d, k, feature_dim=4, hidden=8)


def _cabs_c(graph: str) -> Callable[[int, int, int, int], Learner]:
    def make(r: int, k: int, d: int, s: int) -> Learner:
        rho = torch.linspace(0.0, 0.5, r)
        oracle = _tiny_oracle(k, d)
        return CABSC(r, k, d, rho, oracle, lam=1.0, iqr="off", graph=graph, oracle_input="x")

    return make


def _cabs_d(graph: str, solver: str = "ridge", steps: int = 1) -> Callable[..., Learner]:
    def make(r: int, k: int, d: int, s: int) -> Learner:
        rho, oracle = torch.linspace(0.0, 0.5, r), _tiny_oracle(k, d)
        neural = None
        if solver == "neural":
            neural = {"hidden": 8, "capacity": 32, "batch_size": 4, "steps": steps}
            neural["generator"] = _gen(s)
        return CABSD(
            r, k, d, rho, oracle, horizon=50, lam=1.0, solver=solver, neural=neural,
            iqr="off", graph=graph, oracle_input="x",
        )  # fmt: skip

    return make


LEARNERS: dict[str, Spec] = {
    "CABSC": Spec(_cabs_c("oracle"), False, False, True, _cabs_c("complete")),
    "CABSD": Spec(_cabs_d("oracle"), False, False, True, _cabs_d("complete")),
    "CABSDNeural": Spec(
        _cabs_d("oracle", "neural"), False, False, True, _cabs_d("complete", "neural", 0)
    ),
    "NeuralSquareCB": Spec(
        lambda r, k, d, s: NeuralSquareCB(
            r, k, d, hidden=8, capacity=32, batch_size=4, generator=_gen(s)
        ),
        True,
        False,
        True,
        lambda r, k, d, s: NeuralSquareCB(
            r, k, d, hidden=8, capacity=32, steps=0, generator=_gen(s)
        ),
    ),
    "RandomRouter": Spec(lambda r, k, d, s: RandomRouter(r, k), True, False, False),
    "BestSingleArm": Spec(_best_single_arm, True, True, False),
    "LinUCB": Spec(lambda r, k, d, s: LinUCB(r, k, d, alpha=1.0, lam=1.0), True, True, True),
    "LinUCB-fused": Spec(
        lambda r, k, d, s: LinUCB(r, k, d, alpha=1.0, lam=1.0, kernel="fused"), True, True, True
    ),
    "FullFeedbackLinUCB": Spec(
        lambda r, k, d, s: FullFeedbackLinUCB(r, k, d, lam=1.0), True, True, True
    ),
    "LinUCB-mean-prior": Spec(
        lambda r, k, d, s: LinUCB(r, k, d, alpha=1.0, lam=1.0, new_arm_prior="mean"),
        True,
        True,
        True,
    ),
    "LinTS": Spec(lambda r, k, d, s: LinTS(r, k, d, v=0.5, lam=1.0), False, False, True),
    "LinTS-mean-prior": Spec(
        lambda r, k, d, s: LinTS(r, k, d, v=0.5, lam=1.0, new_arm_prior="mean"),
        False,
        False,
        True,
    ),
    "EpsilonGreedy": Spec(
        lambda r, k, d, s: EpsilonGreedy(r, k, d, eps0=0.5, lam=1.0), True, False, True
    ),
    "SquareCB": Spec(lambda r, k, d, s: SquareCB(r, k, d, gamma=4.0, lam=1.0), True, False, True),
    "NeuralUCB": Spec(
        lambda r, k, d, s: NeuralUCB(
            r, k, d, hidden=8, capacity=32, batch_size=4, generator=_gen(s)
        ),
        True,
        True,
        True,
        lambda r, k, d, s: NeuralUCB(r, k, d, hidden=8, capacity=32, steps=0, generator=_gen(s)),
    ),
    "FullFeedbackNeuralUCB": Spec(
        lambda r, k, d, s: FullFeedbackNeuralUCB(
            r, k, d, hidden=8, capacity=32, batch_size=4, generator=_gen(s)
        ),
        True,
        True,
        True,
        lambda r, k, d, s: FullFeedbackNeuralUCB(
            r, k, d, hidden=8, capacity=32, steps=0, generator=_gen(s)
        ),
    ),
    "KNNRouter": Spec(_knn_router, True, True, True),
    "LogisticScoreRouter": Spec(
        _anchor(anchors.LogisticScoreRouter, l2=1e-3, steps=20), True, True, True
    ),
    "MLPScoreRouter": Spec(
        _anchor(anchors.MLPScoreRouter, hidden=8, weight_decay=1e-4, steps=20), True, True, True
    ),
    "MFScoreRouter": Spec(_anchor(anchors.MFScoreRouter, rank=2, steps=20), True, True, True),
    "KNNScoreRouter": Spec(_anchor(anchors.KNNScoreRouter, k=3), True, True, True),
    "BestArmClassifier": Spec(
        _anchor(anchors.BestArmClassifier, l2=1e-3, steps=20), True, True, True
    ),
    "ResidualLinUCB": Spec(_residual(ResidualLinUCB, lam=1.0), True, True, True),
    "ResidualLinUCB-discounted": Spec(
        _residual(ResidualLinUCB, lam=1.0, gamma=0.9), True, True, True
    ),
    "ResidualLinUCB-window": Spec(_residual(ResidualLinUCB, lam=1.0, window=3), True, True, True),
    "ResidualLinTS": Spec(_residual(ResidualLinTS, lam=1.0), False, False, True),
    # the change test with a short memory and a loose delta, so that cells restart
    "ResidualLinUCB-restart": Spec(
        _residual(ResidualLinUCB, lam=1.0, restart_delta=0.9, restart_memory=3), True, True, True
    ),
    "ResidualLinTS-restart": Spec(
        _residual(ResidualLinTS, lam=1.0, restart_delta=0.9, restart_memory=3), False, False, True
    ),
    "ResidualLinTS-discounted": Spec(
        _residual(ResidualLinTS, lam=1.0, gamma=0.9), False, False, True
    ),
    "HPG": Spec(
        lambda r, k, d, s: HPG(r, k, d, tau=2.0, beta=0.5, eta=0.5, capacity=3), True, False, True
    ),
    "ParameterFreeHPG": Spec(
        lambda r, k, d, s: ParameterFreeHPG(r, k, d, horizon=50, capacity=3), True, False, True
    ),
    "EXP3": Spec(lambda r, k, d, s: EXP3(r, k, eta=0.1, gamma=0.05), True, False, False),
    "LogLinearPG": Spec(
        lambda r, k, d, s: LogLinearPG(r, k, d, eta=0.3, radius=2.0), True, False, True
    ),
    "LogLinearPG(euclidean)": Spec(
        lambda r, k, d, s: LogLinearPG(r, k, d, eta=0.3, radius=2.0, step="euclidean"),
        True,
        False,
        True,
    ),
    "EuclideanQuadPG": Spec(
        lambda r, k, d, s: EuclideanQuadPG(r, k, d, tau=2.0, eta=0.3), True, False, True
    ),
    "EuclideanQuadPG-frobenius": Spec(
        lambda r, k, d, s: EuclideanQuadPG(r, k, d, tau=2.0, eta=0.3, ball="frobenius"),
        True,
        False,
        True,
    ),
    "FlattenedNPG": Spec(
        lambda r, k, d, s: FlattenedNPG(r, k, d, tau=2.0, eta=0.3), True, False, True
    ),
}


CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "learner"
#: per-config overrides of a config case's promises: ``stem -> {Spec field: value}``
CONFIG_OVERRIDES: dict[str, dict] = {}
#: configs that are no contract case, with the reason
CONFIG_SKIPPED: dict[str, str] = {
    "regressor": "reads Context.embedding (the encoder output); the contract problem gives "
    "features only (its own tests build it on a table)",
}


def _from_config(path: Path) -> Callable[[int, int, int, int], Learner]:
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from torchroute.learners.warm_options import WARM_KEYS
    from torchroute.types import Problem, TrainSplit

    def make(r: int, k: int, d: int, s: int) -> Learner:
        node = OmegaConf.load(path)
        for key in WARM_KEYS:  # built cold (tests/learners/test_warm_start.py warms)
            node.pop(key, None)
        extra = {}
        if "oracle" in node:
            del node["oracle"]
            extra["oracle"] = _tiny_oracle(k, d)
        names = tuple(f"m{i}" for i in range(k))
        train = TrainSplit(*_static_data(k, d, n=30))  # what a static router is fitted on
        problem = Problem(r, k, d, rho=torch.zeros(r), arm_names=names, train=train)
        return instantiate(node, **extra)(problem)

    return make


def _config_class(path: Path) -> type:
    from omegaconf import OmegaConf

    from torchroute.run.classes import own_learner_class

    cls = own_learner_class(OmegaConf.to_container(OmegaConf.load(path)))
    assert cls is not None, f"{path}: its _target_ names no learner class"
    return cls


def config_specs(directory: Path = CONFIG_DIR) -> dict[str, Spec]:
    """A case per single-choice learner config of ``directory`` whose class no entry of
    :data:`LEARNERS` covers (``config:<stem>``), built on a tiny problem with a train split
    (random features, scores and costs), so a static router fitted on it is a case too."""
    covered = {type(spec.build(2, 3, 4, 0)) for spec in LEARNERS.values()}
    specs = {}
    for path in sorted(directory.glob("*.yaml")):
        if path.stem in CONFIG_SKIPPED:
            continue
        cls = _config_class(path)
        if cls.protocol == "subset" or any(issubclass(c, cls) for c in covered):
            continue
        make = _from_config(path)
        spec = Spec(make, False, False, make(2, 3, 4, 0).dim is not None)
        specs[f"config:{path.stem}"] = replace(spec, **CONFIG_OVERRIDES.get(path.stem, {}))
    return specs


def build(name: str, r: int, k: int, d: int, seed: int = 0, dtype: torch.dtype = F64) -> Learner:
    return LEARNERS[name].build(r, k, d, seed).to(dtype)


def feedback_for(learner: Learner, decision: Decision, reward: Tensor) -> Feedback:
    """What a bandit env reveals: the played arm plus the arms of ``decision.observe``."""
    observed = torch.nn.functional.one_hot(decision.action, reward.shape[-1]).bool()
    if decision.observe is not None:
        observed = observed | decision.observe
    return Feedback(
        reward=reward.masked_fill(~observed, 0.0),
        observed=observed,
        only_played=decision.observe is None,
    )


def forced_decision(
    action: Tensor, num_arms: int, dtype: torch.dtype = F64, observe: Tensor | None = None
) -> Decision:
    """A one-hot decision for the given ``[R, B]`` arms (to drive updates from the test)."""
    return Decision(probs=one_hot_probs(action, num_arms, dtype), action=action, observe=observe)


class LinearProblem:
    """Synthetic linear contextual bandit: ``E[u | x, k] = x^T theta_k``.

    ``x`` has a constant first feature (an intercept) and ``N(0, 1/d)`` others; rewards
    carry Gaussian noise of scale ``noise``. All randomness comes from the problem's own
    generator, so two problems with the same seed produce the same stream.
    """

    def __init__(self, r: int, k: int, d: int, seed: int = 0, noise: float = 0.1) -> None:
        self.r, self.k, self.d, self.noise = r, k, d, noise
        self.gen = torch.Generator().manual_seed(seed)
        self.theta = torch.randn(r, k, d, generator=self.gen, dtype=F64)  # [R, K, d]
        self.theta[..., 0] = 0.5 + 0.1 * self.theta[..., 0]

    def context(self, b: int = 1) -> Context:
        x = torch.randn(self.r, b, self.d, generator=self.gen, dtype=F64) / self.d**0.5
        x[..., 0] = 1.0
        return Context(x=x)

    def mean_reward(self, context: Context) -> Tensor:
        """``[R, B, K]`` expected rewards."""
        return torch.einsum("rkd,rbd->rbk", self.theta, context.x)

    def reward(self, context: Context) -> Tensor:
        mean = self.mean_reward(context)
        return mean + self.noise * torch.randn(mean.shape, generator=self.gen, dtype=F64)


def run(
    learner: Learner, problem: LinearProblem, rounds: int, seed: int = 0, b: int = 1
) -> tuple[Tensor, Tensor]:
    """Play ``rounds`` rounds; returns actions ``[T, R, B]`` and expected regret ``[T, R, B]``."""
    gen = torch.Generator().manual_seed(seed)
    actions, regrets = [], []
    for _ in range(rounds):
        context = problem.context(b)
        decision = learner.act(context, gen)
        mean = problem.mean_reward(context)
        reward = problem.reward(context)
        learner.update(context, decision, feedback_for(learner, decision, reward), gen)
        chosen = mean.gather(-1, decision.action[..., None])[..., 0]
        actions.append(decision.action)
        regrets.append(mean.amax(-1) - chosen)
    return torch.stack(actions), torch.stack(regrets)


LEARNERS.update(config_specs())
