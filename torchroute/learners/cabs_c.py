"""CABS-C (CABS Algorithm 1; ``docs/papers/cabs.md`` (CABS-C)): SquareCB-G with oracle surrogates.

The learner draws a feedback graph from the affinity oracle, plays the solution of the
SquareCB-G program (:func:`~torchroute.functional.graph_program.graph_squarecb_probs`) on
its regression solver's predicted losses, observes the played arm only (bandit feedback)
and feeds the regression solver the played arm's reward plus de-biased oracle surrogates
for the played arm's out-neighbours. The core never imports :mod:`torchroute.models`: the
oracle (a module with ``accuracy``, ``propagation`` and ``cost``, e.g. a
``MultiHeadOracle``) comes in as a constructor argument and is fixed data, not state (it is
not in ``state_dict()``; ``.to()`` moves it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor, nn

from torchroute.checks import check_number
from torchroute.functional.availability import played_probs
from torchroute.functional.graph_program import graph_squarecb_probs
from torchroute.functional.oracle import (
    GRAPH_RULES,
    affinity_from_accuracy,
    iqr_keep_mask,
    sample_graph,
    surrogate_utility,
)
from torchroute.functional.random import Source
from torchroute.functional.ridge import ridge_predict
from torchroute.functional.sampling import probability_floor, sample_categorical
from torchroute.learners.base import Learner
from torchroute.learners.neural import NeuralUCB
from torchroute.learners.ridge_base import RidgeLearner
from torchroute.types import Context, Decision, Feedback, Problem

if TYPE_CHECKING:
    from torchroute.learners.warm_options import WarmStart
    from torchroute.learners.warm_start import WarmRows

Solver = Literal["ridge", "neural"]
#: ``CABSC(targets=...)`` values.
TARGETS = ("ips", "plain", "ips_weights")
#: ``CABSC(graph=...)`` values (``"oracle"`` is accepted as an alias of ``"paper"``).
GRAPHS = (*GRAPH_RULES, "identity", "complete")
#: ``CABSC(surrogates=...)`` values.
SURROGATES = ("oracle", "none")


def make_solver(
    solver: Solver,
    num_trials: int,
    num_arms: int,
    dim: int,
    lam: float,
    neural: dict[str, Any] | None = None,
    weighted: bool = False,
) -> Learner:
    """The regression solver RS (``docs/reference/learners.md``): per-arm ridge or NeuralUCB MLPs.

    ``neural`` holds :class:`NeuralUCB` arguments (``hidden``, ``lr``, ...); its ``lam`` is
    the ``lambda`` of ``Z_k`` (unused here, ``nu = 0``). ``weighted``: the solver will be fed
    sample weights (``fit_weighted``).
    """
    if solver == "ridge":
        if neural:
            raise ValueError(f"solver='ridge' takes no neural arguments, got {sorted(neural)}")
        return RidgeLearner(num_trials, num_arms, dim, lam)
    if solver == "neural":  # nu = 0: a plain regressor (its lam, the Z prior, is unused)
        extra = {"sample_weights": True} if weighted else {}
        return NeuralUCB(num_trials, num_arms, dim, **{**(neural or {}), "nu": 0.0, **extra})
    raise ValueError(f"solver must be 'ridge' or 'neural', got {solver!r}")


def neural_init(problem: Problem, hp: dict[str, Any]) -> dict[str, Any]:
    """``hp`` whose ``neural`` arguments take their initial weights from ``problem.init_rng``
    (when set and ``solver="neural"``)."""
    if problem.init_rng is None or hp.get("solver", "ridge") != "neural":
        return hp
    return {**hp, "neural": {"generator": problem.init_rng, **(hp.get("neural") or {})}}


def solver_predict(solver: Learner, x: Tensor) -> Tensor:
    """Predicted rewards ``r^ [R, B, K]`` of a regression solver for contexts ``x [R, B, d]``."""
    if isinstance(solver, RidgeLearner):
        return ridge_predict(solver.theta, x.to(solver.theta.dtype))
    with torch.no_grad():
        return solver(x)[0]


def check_oracle(problem: Problem, oracle: nn.Module | None, who: str) -> nn.Module:
    """One-line errors for a missing oracle or one trained for other arms / embeddings."""
    if oracle is None:
        raise ValueError(f"{who}.from_problem needs an oracle (oracle=...)")
    if hasattr(oracle, "check_compatible"):
        oracle.check_compatible(problem.arm_names, problem.embed_dim, source="the oracle")
    return oracle


class CABSC(Learner):
    """CABS-C: SquareCB-G with oracle feedback graphs and surrogate rewards (CABS Alg. 1).

    Per round (``docs/papers/cabs.md`` (CABS-C)): ``A = Bernoulli(sigmoid((1 - AO(e)) / 2))``,
    ``p = argmin V(p; 1 - r^, A, gamma)`` floored at ``eps_floor``, ``i ~ p``; after the
    played arm's reward ``r`` and score ``y`` are observed, surrogates
    ``s_j = RO(e, i, y)`` for ``j in N = {j : A[i, j]}``, ``j != i``, kept by the IQR rule
    ``iqr`` (``"keep_large"``: keep ``|delta_j| > Q3 + 1.5 IQR``, the paper's literal rule;
    ``"drop_large"``: keep the others; ``"off"``: keep all), de-biased
    ``s~_j = s_j - b_j`` with ``b_j`` the running mean of ``s_j - r^_j``; targets
    ``r / p_i`` and ``s~_j / (A[:, j]^T p)`` with unit weights (``targets="ips"``, the
    paper's literal step 7), ``r`` and ``s~_j`` with unit weights (``"plain"``), or ``r`` and
    ``s~_j`` with sample weights ``1 / p_i`` and ``1 / (A[:, j]^T p)`` (``"ips_weights"``:
    weighted ridge ``A += w x x^T``, ``b += w y x``, or the weighted squared error of the
    neural solver) train the regression solver. With ``"ips_weights"`` the predictions stay
    on the reward scale, so the de-bias step compares surrogates with reward-scale
    predictions.

    :meth:`update` reuses the graph and the distribution ``p`` of :meth:`act` when it receives
    the same ``Context`` object (the loop's case); for a decision made elsewhere (forced
    arms, delayed feedback) it draws a fresh graph with its generator and recomputes ``p``
    from the current state. ``decision.action`` is the played arm.

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d`` of ``Context.x`` (the regression solver's input).
        rho: cost sensitivity per trial ``[R]`` (for the surrogate utilities).
        oracle: module with ``accuracy(e) [n, K]``, ``propagation(e, i, y) [n, K]``,
            ``cost(e) [n, K]``.
        gamma: exploitation strength (4 in the CABS experiments).
        solver: ``"ridge"`` (``lam``) or ``"neural"`` (``neural`` arguments).
        lam: ridge regulariser (10 in the CABS experiments).
        targets: ``"ips"``, ``"plain"`` or ``"ips_weights"``.
        iqr: ``"keep_large"``, ``"drop_large"`` or ``"off"``.
        graph: ``"paper"`` (oracle graph, edge probability ``sigmoid((1 - R) / 2)``),
            ``"affinity"`` (oracle graph, edge probability ``(1 + R) / 2``, increasing in the
            affinity; :func:`~torchroute.functional.oracle.edge_probability`), ``"identity"``
            (bandit feedback only) or ``"complete"``. ``"oracle"`` is accepted as an alias of
            ``"paper"`` (its former name, still used by saved runs and configs).
        oracle_input: ``"embedding"`` (``Context.embedding``) or ``"x"`` (when the bandit
            features are the encoder embedding itself).
        eps_floor: minimum probability (CABS Assumption 4.5).
        neural: :class:`NeuralUCB` arguments for ``solver="neural"``.
        surrogates: ``"oracle"`` (the paper: the kept surrogates train the regression
            solver) or ``"none"`` (an ablation: the graph, its distribution ``p`` and the
            surrogates returned by :meth:`learn` are as with ``"oracle"``, but the
            regression solver is fed the played arm's reward only, and the de-bias means
            stay 0).

    Shapes:
        ``act``: ``x [R, B, d]``, ``embedding [R, B, e]`` -> ``probs [R, B, K]``,
        ``action [R, B]``; ``update`` returns ``surrogates`` (surrogate observations per
        context) and ``played_prob``, each ``[R]``.
    """

    prices_unread = (
        "its solver learns the utility at the env's prices from the played reward and "
        "oracle surrogates on the reward scale; repricing the surrogates is not done"
    )

    family = "CABS"

    samples_from_probs = True  # given the graph drawn in ``act``
    device_tolerance = "ips"  # targets divided by the graph program's probabilities

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        rho: Tensor,
        oracle: nn.Module,
        gamma: float = 4.0,
        solver: Solver = "ridge",
        lam: float = 10.0,
        targets: Literal["ips", "plain", "ips_weights"] = "ips",
        iqr: Literal["keep_large", "drop_large", "off"] = "keep_large",
        graph: Literal["paper", "affinity", "identity", "complete", "oracle"] = "paper",
        oracle_input: Literal["embedding", "x"] = "embedding",
        eps_floor: float = 1e-3,
        neural: dict[str, Any] | None = None,
        surrogates: Literal["oracle", "none"] = "oracle",
    ) -> None:
        super().__init__(num_trials, num_arms)
        name = type(self).__name__
        check_number(name, "dim", dim, ge=1, integer=True)
        check_number(name, "gamma", gamma, gt=0)
        check_number(name, "eps_floor", eps_floor, ge=0, le=1.0 / num_arms)
        CABSC.check_options(
            targets=targets, iqr=iqr, graph=graph, oracle_input=oracle_input, surrogates=surrogates
        )
        rho = torch.as_tensor(rho, dtype=torch.float32)
        if rho.shape != (num_trials,) or not bool((torch.isfinite(rho) & (rho >= 0)).all()):
            raise ValueError(f"{name}: rho must be [R={num_trials}] finite and >= 0")
        self.dim, self.gamma, self.eps_floor = int(dim), float(gamma), float(eps_floor)
        graph = "paper" if graph == "oracle" else graph
        self.targets, self.iqr, self.graph, self.oracle_input = targets, iqr, graph, oracle_input
        self.surrogate_feed = surrogates
        self.rs = make_solver(
            solver, num_trials, num_arms, dim, lam, neural, weighted=targets == "ips_weights"
        )
        self._oracle = [oracle.eval()]  # fixed data: kept out of state_dict()
        self.register_buffer("rho", rho)
        self.register_buffer("counts", torch.zeros(num_trials, num_arms, dtype=torch.long))
        self.register_buffer("bias", torch.zeros(num_trials, num_arms))
        self._pending: tuple[Context, Tensor, Tensor] | None = None

    @classmethod
    def check_options(
        cls,
        targets: str = "ips",
        iqr: str = "keep_large",
        graph: str = "paper",
        oracle_input: str = "embedding",
        surrogates: str = "oracle",
        **_: Any,
    ) -> None:
        """The checks of the named options (:meth:`Learner.check_options`): each must be one
        of its values; ``ValueError`` naming the option otherwise."""
        for arg, value, allowed in (
            ("targets", targets, TARGETS),
            ("iqr", iqr, ("keep_large", "drop_large", "off")),
            ("graph", graph, (*GRAPHS, "oracle")),
            ("oracle_input", oracle_input, ("embedding", "x")),
            ("surrogates", surrogates, SURROGATES),
        ):
            if value not in allowed:
                raise ValueError(f"CABSC: {arg} must be one of {allowed}, got {value!r}")

    @classmethod
    def from_problem(cls, problem: Problem, oracle: nn.Module | None = None, **hp: Any) -> CABSC:
        """``cls(R, K, d, rho, oracle, **hp)`` after checking the oracle's arms and ``e``."""
        oracle = check_oracle(problem, oracle, cls.__name__)
        hp = neural_init(problem, hp)
        return cls(problem.num_trials, problem.num_arms, problem.dim, problem.rho, oracle, **hp)

    @property
    def oracle(self) -> nn.Module:
        return self._oracle[0]

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> CABSC:
        super()._apply(fn, recurse)
        self._oracle[0] = self._oracle[0]._apply(fn)
        return self

    # ----------------------------------------------------------------- pieces
    def oracle_input_of(self, context: Context) -> Tensor:
        """The oracle's input ``[R, B, e]``: ``Context.embedding`` (or ``x``)."""
        if self.oracle_input == "x":
            return context.x
        if context.embedding is None:
            raise ValueError(
                f"{type(self).__name__} reads Context.embedding (the encoder output) for its "
                "oracle, but the context has none"
            )
        return context.embedding

    def draw_graph(self, context: Context, generator: Source) -> Tensor:
        """Feedback graph ``A [R, B, K, K]`` bool (CABS-C line 6)."""
        r, b, k = context.num_trials, context.batch_size, self.num_arms
        dev = context.x.device
        if self.graph not in GRAPH_RULES:
            if self.graph == "complete":
                return torch.ones(r, b, k, k, dtype=torch.bool, device=dev)
            return torch.eye(k, dtype=torch.bool, device=dev).expand(r, b, k, k)
        e = self.oracle_input_of(context)
        with torch.no_grad():
            y_bar = self.oracle.accuracy(e.reshape(r * b, -1).to(self._oracle_dtype()))
        affinity = affinity_from_accuracy(y_bar.reshape(r, b, k))
        return sample_graph(affinity, generator, rule=self.graph)

    def _oracle_dtype(self) -> torch.dtype:
        return next(self.oracle.parameters()).dtype

    def probs(self, context: Context, graph: Tensor) -> Tensor:
        """``p = floor(argmin V(p; 1 - r^, A, gamma))``, ``[R, B, K]``, restricted to
        ``context.available`` when it is set (what ``act`` samples from and ``update``
        weights by)."""
        losses = 1.0 - solver_predict(self.rs, context.x)
        probs = graph_squarecb_probs(losses, graph, self.gamma)
        return played_probs(probability_floor(probs, self.eps_floor), context.available)

    def surrogates(
        self, context: Context, graph: Tensor, action: Tensor, score: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Oracle surrogates ``s [R, B, K]`` and their mask ``[R, B, K]`` (neighbours, IQR;
        never an arm ``context.available`` masks)."""
        r, b, k = context.num_trials, context.batch_size, self.num_arms
        arms = torch.arange(k, device=action.device)
        neighbours = graph.gather(2, action[:, :, None, None].expand(r, b, 1, k))[:, :, 0]
        mask = neighbours & (arms != action[..., None])
        if context.available is not None:  # a model that does not exist yet: no surrogate
            mask = mask & context.available
        if self.graph == "identity":
            return torch.zeros(r, b, k, dtype=score.dtype, device=score.device), mask
        e = self.oracle_input_of(context).reshape(r * b, -1).to(self._oracle_dtype())
        with torch.no_grad():
            y = score.to(e.dtype).reshape(-1)
            delta = self.oracle.propagation(e, action.reshape(-1), y).reshape(r, b, k)
            cost = self.oracle.cost(e).reshape(r, b, k)
        s = surrogate_utility(score, delta, cost, self.rho).to(score.dtype)
        if self.iqr != "off":
            large = iqr_keep_mask(delta, action)
            mask = mask & (large if self.iqr == "keep_large" else ~large)
        return s, mask

    # ----------------------------------------------------------------- bandit interface
    def warm_start(self, rows: WarmRows, problem: Problem, warm: WarmStart) -> None:
        """The pre-trained oracle as it is; the rows go to the regression solver
        (its own :meth:`~torchroute.learners.Learner.warm_start`)."""
        self.rs.warm_start(rows, problem, warm)

    def act(self, context: Context, generator: Source = None) -> Decision:
        self._check_context(context)
        graph = self.draw_graph(context, generator)
        probs = self.probs(context, graph)
        self._pending = (context, graph, probs)
        return Decision(probs=probs, action=sample_categorical(probs, generator))

    def pending(self, context: Context, generator: Source) -> tuple[Tensor, ...]:
        """``(graph, p)`` of ``act`` for this ``context``, or a fresh graph and its ``p``."""
        pending, self._pending = self._pending, None
        if pending is not None and pending[0] is context:
            return pending[1:]
        graph = self.draw_graph(context, generator)
        return graph, self.probs(context, graph)

    def update(
        self,
        context: Context,
        decision: Decision,
        feedback: Feedback,
        generator: Source = None,
    ) -> dict[str, Tensor]:
        self._check_context(context)
        self._check_feedback(context, feedback)
        graph, probs = self.pending(context, generator)
        return self.learn(context, graph, probs, decision.action, feedback, generator)[0]

    def learn(
        self,
        context: Context,
        graph: Tensor,
        probs: Tensor,
        action: Tensor,
        feedback: Feedback,
        generator: Source = None,
    ) -> tuple[dict[str, Tensor], Tensor, Tensor]:
        """Steps 5–7 of CABS-C; returns ``(metrics, s [R, B, K], mask [R, B, K])``.

        ``mask``: the surrogates the IQR rule keeps (fed to the regression solver unless
        ``surrogates="none"``).
        """
        x = context.x
        dtype = self.bias.dtype
        played = torch.nn.functional.one_hot(action, self.num_arms).bool()  # [R, B, K]
        reward = feedback.reward.to(dtype).gather(2, action[..., None])[..., 0]  # [R, B]
        # y of the played arm; an env without a separate quality (Feedback.score None, e.g. a
        # synthetic bandit) gives its reward as the score.
        y_all = feedback.reward if feedback.score is None else feedback.score
        score = y_all.to(dtype).gather(2, action[..., None])[..., 0]
        s, kept = self.surrogates(context, graph, action, score)
        # surrogates="none": the same graph and surrogates, none of them fed to the regression
        mask = kept if self.surrogate_feed == "oracle" else torch.zeros_like(kept)
        r_hat = solver_predict(self.rs, x).to(dtype)  # before the update
        # De-bias with the running mean of s - r^ (step 6); B contexts add their sums at once.
        m = mask.to(dtype)
        s_tilde = s - self.bias[:, None, :]
        new_counts = self.counts + mask.sum(1)
        total = self.bias * self.counts.to(dtype) + ((s - r_hat) * m).sum(1)
        self.bias = torch.where(new_counts > 0, total / new_counts.clamp_min(1).to(dtype), 0.0)
        self.counts = new_counts
        p = probs.to(dtype)
        target = torch.where(played, reward[..., None], s_tilde)
        observed = played | mask
        if self.targets != "plain":
            seen = (graph.to(dtype) * p[..., :, None]).sum(-2)  # A[:, j]^T p, [R, B, K]
            denom = torch.where(observed, torch.where(played, p, seen), 1.0)
        if self.targets == "ips":
            target = target / denom
        target = torch.where(observed, target, 0.0)
        if self.targets == "ips_weights":
            weight = torch.where(observed, denom.reciprocal(), 0.0)  # 1/p_i, 1/(A[:, j]^T p)
            self.rs.fit_weighted(context, action, target.to(x.dtype), weight, generator)
        else:
            self.rs.update(
                context,
                Decision(probs=p, action=action),
                Feedback(reward=target.to(x.dtype), observed=observed),
                generator,
            )
        self._tick(context)
        metrics = {
            "surrogates": m.sum(-1).mean(1),
            "played_prob": p.gather(2, action[..., None])[..., 0].mean(1),
        }
        return metrics, s, kept
