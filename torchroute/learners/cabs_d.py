"""CABS-D (CABS Algorithm 2; ``docs/papers/cabs.md`` (CABS-D)) and the neural SquareCB expert.

CABS-D mixes two experts, a standard bandit-feedback learner (SquareCB, LinUCB or LinTS)
and CABS-C, with exponential weights over meta-copies. ``meta="paper"``: copies ``(m, g)``
on the geometric grid ``gamma^(g) = 2^(g-1) / T``, ``g = 1..L``, ``L = ceil(log2 T) + 1``
**[spec]**, which differ only in the implicit exploration ``gamma^(g)`` of their loss
estimates. ``meta="single_ix"``: one copy per expert and one adaptive implicit-exploration
value (a departure from the paper, see :class:`CABSD`). Weights are kept in log space.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor, nn

from torchroute.checks import check_igw, check_number
from torchroute.functional.availability import played_probs
from torchroute.functional.random import Source
from torchroute.functional.sampling import probability_floor, sample_categorical
from torchroute.functional.squarecb import squarecb_probs
from torchroute.learners.base import Learner
from torchroute.learners.cabs_c import CABSC, check_oracle, neural_init, solver_predict
from torchroute.learners.linear import LinTS, LinUCB, SquareCB
from torchroute.learners.neural import NeuralUCB
from torchroute.types import Context, Decision, Feedback, Problem

if TYPE_CHECKING:
    from torchroute.learners.warm_options import WarmStart
    from torchroute.learners.warm_start import WarmRows


class NeuralSquareCB(NeuralUCB):
    """SquareCB (CABS Algorithm 3) on the per-trial MLPs of :class:`NeuralUCB`.

    ``p = IGW(f(x); gamma, mu = K)`` mixed with the uniform distribution so that
    ``p_k >= eps_floor``; the MLPs train on the played arm's reward as in NeuralUCB
    (``nu = 0``: no ``Z`` statistics). Other arguments as :class:`NeuralUCB`; prices are
    read as :class:`NeuralUCB` reads them (the IGW weights the moved predictions).
    """

    samples_from_probs = True

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        gamma: float = 4.0,
        mu: float | None = None,
        eps_floor: float = 1e-3,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("nu", 0.0)
        super().__init__(num_trials, num_arms, dim, **kwargs)
        check_igw(type(self).__name__, num_arms, gamma, mu, eps_floor)
        self.gamma, self.mu, self.eps_floor = float(gamma), mu, float(eps_floor)

    def probs(self, context: Context) -> Tensor:
        """``[R, B, K]`` floored IGW distribution on the MLP's predictions."""
        with torch.no_grad():
            f, _ = self(context.x)
        f = self.priced_scores(f, context)  # Context.prices: -rho (p_now - p_ref)
        return probability_floor(squarecb_probs(f, self.gamma, self.mu), self.eps_floor)

    def act(self, context: Context, generator: Source = None) -> Decision:
        self._check_context(context)
        probs = self.probs(context)
        return Decision(probs=probs, action=sample_categorical(probs, generator))


def _squarecb_probs(expert: Learner, context: Context) -> Tensor:
    if isinstance(expert, NeuralSquareCB):
        return expert.probs(context)
    assert isinstance(expert, SquareCB)
    rewards = solver_predict(expert, context.x)
    return probability_floor(squarecb_probs(rewards, expert.gamma, expert.mu), expert.eps_floor)


#: ``CABSD(standard=...)`` values, ``CABSD(meta=...)`` values.
STANDARDS = ("squarecb", "linucb", "lints")
METAS = ("paper", "single_ix")
# The standard_args each (standard, solver) takes.
_STANDARD_ARGS = {
    ("squarecb", "ridge"): (),
    ("linucb", "ridge"): ("alpha", "kernel"),
    ("lints", "ridge"): ("v",),
    ("squarecb", "neural"): (),
    ("linucb", "neural"): ("nu",),
}


def check_standard(standard: str, solver: str, standard_args: dict[str, Any]) -> None:
    """Raise ``ValueError`` (one line) unless ``standard`` with ``standard_args`` is a
    standard expert of ``solver``."""
    if standard not in STANDARDS:
        raise ValueError(f"CABSD: standard must be one of {STANDARDS}, got {standard!r}")
    if (standard, solver) not in _STANDARD_ARGS:
        raise ValueError(
            f"CABSD: solver={solver!r} takes standard 'squarecb' or 'linucb' (no neural "
            f"Thompson sampler), got {standard!r}"
        )
    allowed = _STANDARD_ARGS[standard, solver]
    unknown = sorted(set(standard_args) - set(allowed))
    if unknown:
        raise ValueError(
            f"CABSD: standard_args of standard={standard!r} (solver={solver!r}) take "
            f"{list(allowed)}, got {unknown}"
        )


def make_standard(
    standard: str,
    solver: str,
    num_trials: int,
    num_arms: int,
    dim: int,
    gamma: float,
    mu: float | None,
    eps_floor: float,
    lam: float,
    standard_args: dict[str, Any],
    neural: dict[str, Any] | None,
) -> Learner:
    """CABS-D's bandit-feedback expert: ``(standard, solver)`` -> its learner.

    ``ridge``: SquareCB (``gamma``, ``mu``, ``eps_floor``), LinUCB (``alpha``, ``kernel``)
    or LinTS (``v``), each with ridge regulariser ``lam``. ``neural``: NeuralSquareCB or
    NeuralUCB (``nu``) on the ``neural`` arguments; the library has no neural Thompson
    sampler.
    """
    check_standard(standard, solver, standard_args)
    if solver == "ridge":
        if standard == "squarecb":
            return SquareCB(num_trials, num_arms, dim, gamma, mu, eps_floor, lam)
        if standard == "linucb":
            return LinUCB(num_trials, num_arms, dim, lam=lam, **{"alpha": 1.0, **standard_args})
        return LinTS(num_trials, num_arms, dim, lam=lam, **{"v": 1.0, **standard_args})
    if standard == "squarecb":
        return NeuralSquareCB(num_trials, num_arms, dim, gamma, mu, eps_floor, **(neural or {}))
    return NeuralUCB(num_trials, num_arms, dim, **{**(neural or {}), "nu": 1.0, **standard_args})


class CABSD(Learner):
    """CABS-D: exponential weights over a bandit-feedback expert and CABS-C (CABS Alg. 2).

    Per round: ``p_1`` = the standard expert's distribution (``standard="squarecb"``: IGW on
    its predictions; ``"linucb"`` / ``"lints"``: the one-hot ``Decision.probs`` of its own
    ``act``, for LinTS the one-hot of its sampled arm), ``p_2 = CABS-C(x)`` (one graph
    ``A``), ``mu = softmax(log w)`` over the ``M`` copies, ``q = sum mu_(m,g) p_m``,
    ``i ~ q``; both experts learn (the standard expert from ``r`` only, CABS-C from ``r`` and
    its surrogates, each with its own ``p``); loss estimates
    ``l^_(1,g) = l_i p_1i / (q_i + gamma_g)``,
    ``l^_(2,g) = sum_{j in N(i)} l_j p_2j / (sum_{k: A[k,j]} q_k + gamma_g)`` with
    ``l_i = 1 - r``, ``l_j = 1 - s_j`` and ``N(i) = {j : A[i, j]}`` the played arm's whole
    graph neighbourhood (played arm included; surrogates of every neighbour, whatever the
    IQR rule keeps for CABS-C's regression); ``Delta += sum mu l^^2``, ``log w -= eta l^``.
    With ``B > 1`` contexts the loss estimates of a round add up.

    Meta-learners:

    - ``meta="paper"`` (Algorithm 2 as written): ``M = 2 L`` copies on the grid
      ``gamma_g = 2^(g-1) / T``, ``eta = min(gamma_1, sqrt(ln M / (1 + Delta)))``.
    - ``meta="single_ix"`` (a departure from the paper): ``M = 2`` copies, one per expert,
      ``eta_t = sqrt(ln 2 / (1 + Delta_(t-1)))`` without the cap, and a single
      implicit-exploration value ``gamma_t = eta_t / 2`` (EXP3-IX, Neu 2015) in place of the
      grid. Reason: with ``gamma_1 = 1 / T`` the cap keeps ``eta`` so small that the weights
      stay at 50/50 (CABS-D is then the average of its experts), and without the cap the
      largest-``gamma`` copies always look best (the losses are positive, so a larger
      ``gamma`` only lowers the estimate) and take all the weight.

    Like :class:`CABSC`, ``update`` reuses ``act``'s graph and distributions for the same
    ``Context`` object and recomputes them otherwise. In ``act`` the standard expert draws
    first from ``generator`` (then the graph, then ``i``).

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d``.
        rho: ``[R]``.
        oracle: as :class:`CABSC`.
        horizon: ``T`` (sets the grid of ``meta="paper"``).
        gamma: the SquareCB expert's and CABS-C's exploitation strength (4 in the CABS
            experiments).
        solver: ``"ridge"`` or ``"neural"`` (both experts).
        lam: ridge regulariser of both experts.
        mu: SquareCB's IGW constant (``K`` when ``None``).
        neural: :class:`NeuralUCB` arguments for ``solver="neural"`` (both experts).
        standard: the bandit-feedback expert: ``"squarecb"``, ``"linucb"`` or ``"lints"``
            (``solver="neural"``: NeuralSquareCB or NeuralUCB; no neural ``"lints"``).
        standard_args: the standard expert's own arguments: ``{"alpha", "kernel"}`` for
            LinUCB (``alpha = 1`` by default), ``{"v"}`` for LinTS (``v = 1``), ``{"nu"}``
            for NeuralUCB (``nu = 1``); none for SquareCB (``gamma``, ``mu`` above).
        meta: ``"paper"`` or ``"single_ix"``.
        **cabs_c: further :class:`CABSC` arguments (``targets``, ``iqr``, ``graph``,
            ``oracle_input``, ``eps_floor``, ``surrogates``). With ``surrogates="none"``
            only CABS-C's regression goes without the surrogates: the graph, CABS-C's
            distribution and the meta-learner's loss estimates (which read the surrogates
            of the played arm's neighbourhood) are computed as with ``"oracle"``.

    Shapes:
        as :class:`CABSC`; ``log_weights`` ``[R, 2, L]`` (``L = 1`` for ``single_ix``);
        ``update`` also returns ``cabs_c_weight`` ``[R]``.
    """

    prices_unread = (
        "a mixture of CABS-C and a standard expert weighted by importance-weighted losses "
        "of the utility at the env's prices; neither part reads Context.prices"
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
        horizon: int,
        gamma: float = 4.0,
        solver: Literal["ridge", "neural"] = "ridge",
        lam: float = 10.0,
        mu: float | None = None,
        neural: dict[str, Any] | None = None,
        standard: Literal["squarecb", "linucb", "lints"] = "squarecb",
        standard_args: dict[str, Any] | None = None,
        meta: Literal["paper", "single_ix"] = "paper",
        **cabs_c: Any,
    ) -> None:
        super().__init__(num_trials, num_arms)
        check_number(type(self).__name__, "horizon", horizon, ge=1, integer=True)
        CABSD.check_options(standard, standard_args, meta, solver, **cabs_c)
        self.dim, self.standard, self.meta = int(dim), standard, meta
        eps_floor = cabs_c.get("eps_floor", 1e-3)
        self.cabs_c = CABSC(
            num_trials, num_arms, dim, rho, oracle, gamma, solver, lam, neural=neural, **cabs_c
        )
        self.expert = make_standard(
            standard, solver, num_trials, num_arms, dim, gamma, mu, eps_floor, lam,
            dict(standard_args or {}), neural,
        )  # fmt: skip
        self.horizon = int(horizon)
        levels = math.ceil(math.log2(self.horizon)) + 1 if self.horizon > 1 else 1
        if meta == "paper":
            grid = torch.tensor([2.0**g / self.horizon for g in range(levels)])
            self.register_buffer("grid", grid.expand(num_trials, levels).clone())  # [R, L]
        copies = levels if meta == "paper" else 1
        self.register_buffer("log_weights", torch.zeros(num_trials, 2, copies))  # [R, 2, L]
        self.register_buffer("delta", torch.zeros(num_trials))  # Delta_t
        self._pending: tuple[Context, Tensor, Tensor, Tensor, Tensor] | None = None

    @classmethod
    def check_options(
        cls,
        standard: str = "squarecb",
        standard_args: dict[str, Any] | None = None,
        meta: str = "paper",
        solver: str = "ridge",
        **cabs_c: Any,
    ) -> None:
        """The checks of the expert, meta and CABS-C options that need no problem or oracle
        (a run calls them before it builds or pre-trains anything, the constructor first);
        ``ValueError`` on a bad one."""
        if meta not in METAS:
            raise ValueError(f"CABSD: meta must be one of {METAS}, got {meta!r}")
        check_standard(standard, solver, dict(standard_args or {}))
        CABSC.check_options(**cabs_c)

    @classmethod
    def from_problem(cls, problem: Problem, oracle: nn.Module | None = None, **hp: Any) -> CABSD:
        """``cls(R, K, d, rho, oracle, T, **hp)``; needs ``problem.horizon``."""
        oracle = check_oracle(problem, oracle, cls.__name__)
        if problem.horizon is None:
            raise ValueError("CABSD needs Problem.horizon (T) for its gamma grid")
        return cls(
            problem.num_trials,
            problem.num_arms,
            problem.dim,
            problem.rho,
            oracle,
            problem.horizon,
            **neural_init(problem, hp),
        )

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        # Checkpoints written before the standard option name the expert "squarecb".
        old = prefix + "squarecb."
        for key in [key for key in state_dict if key.startswith(old)]:
            state_dict[prefix + "expert." + key[len(old) :]] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, *args)

    def mixture(self) -> Tensor:
        """``mu_(m,g) [R, 2, L]``: the normalised weights."""
        r = self.num_trials
        return torch.softmax(self.log_weights.reshape(r, -1), -1).reshape(self.log_weights.shape)

    def _p1(self, context: Context, generator: Source) -> Tensor:
        """The standard expert's distribution ``p_1 [R, B, K]`` (LinUCB/LinTS: one ``act``),
        restricted to ``context.available`` when it is set."""
        if self.standard == "squarecb":
            return played_probs(_squarecb_probs(self.expert, context), context.available)
        return self.expert.act(context, generator).probs

    def _expert_probs(
        self, context: Context, generator: Source
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(graph, p_1, p_2, q)`` for ``context`` (the standard expert draws first)."""
        p1 = self._p1(context, generator)
        graph = self.cabs_c.draw_graph(context, generator)
        p2 = self.cabs_c.probs(context, graph).to(p1.dtype)
        w = self.mixture().sum(-1).to(p1.dtype)  # [R, 2]
        q = w[:, 0, None, None] * p1 + w[:, 1, None, None] * p2
        return graph, p1, p2, q

    def warm_start(self, rows: WarmRows, problem: Problem, warm: WarmStart) -> None:
        """The pre-trained oracle as it is; the rows go to the standard expert and to the
        CABS-C part's regression solver (each its own ``warm_start``)."""
        self.expert.warm_start(rows, problem, warm)
        self.cabs_c.warm_start(rows, problem, warm)

    def act(self, context: Context, generator: Source = None) -> Decision:
        self._check_context(context)
        graph, p1, p2, q = self._expert_probs(context, generator)
        self._pending = (context, graph, p1, p2, q)
        return Decision(probs=q, action=sample_categorical(q, generator))

    def update(
        self,
        context: Context,
        decision: Decision,
        feedback: Feedback,
        generator: Source = None,
    ) -> dict[str, Tensor]:
        self._check_context(context)
        self._check_feedback(context, feedback)
        pending, self._pending = self._pending, None
        if pending is not None and pending[0] is context:
            graph, p1, p2, q = pending[1:]
        else:  # a decision made elsewhere: fresh graph, distributions of the current state
            graph, p1, p2, q = self._expert_probs(context, generator)
        action, dtype = decision.action, self.log_weights.dtype
        p1, p2, q = p1.to(dtype), p2.to(dtype), q.to(dtype)
        played = torch.nn.functional.one_hot(action, self.num_arms).bool()
        bandit = Feedback(
            reward=torch.where(played, feedback.reward, 0.0), observed=played, only_played=True
        )
        self.expert.update(context, Decision(probs=p1, action=action), bandit, generator)
        metrics, s, _ = self.cabs_c.learn(context, graph, p2, action, feedback, generator)
        est = self._loss_estimates(graph, p1, p2, q, action, feedback.reward.to(dtype), s)
        self._exponential_weights(est)
        self._tick(context)
        metrics["played_prob"] = q.gather(2, action[..., None])[..., 0].mean(1)
        metrics["cabs_c_weight"] = self.mixture()[:, 1].sum(-1)
        return metrics

    def ix_gamma(self) -> Tensor:
        """The implicit-exploration values ``gamma [R, L]`` of this round's loss estimates."""
        if self.meta == "paper":
            return self.grid.to(self.log_weights.dtype)
        return (self.learning_rate() / 2.0)[:, None]

    def learning_rate(self) -> Tensor:
        """``eta_t [R]`` from ``Delta_(t-1)`` (capped at ``gamma_1`` for ``meta="paper"``)."""
        copies = self.log_weights.shape[1] * self.log_weights.shape[2]
        eta = torch.sqrt(math.log(copies) / (1.0 + self.delta))
        return torch.minimum(eta, self.grid[:, 0]) if self.meta == "paper" else eta

    def _loss_estimates(
        self,
        graph: Tensor,
        p1: Tensor,
        p2: Tensor,
        q: Tensor,
        action: Tensor,
        reward: Tensor,
        s: Tensor,
    ) -> Tensor:
        """IX loss estimates ``l^ [R, 2, L]`` of the copies, summed over the ``B`` contexts."""
        dtype = q.dtype
        r, b, k = q.shape
        played = torch.nn.functional.one_hot(action, k).bool()
        reward_i = reward.gather(2, action[..., None])  # [R, B, 1]
        loss = torch.where(played, 1.0 - reward_i, 1.0 - s.to(dtype))  # [R, B, K]
        gammas = self.ix_gamma()[:, None, :]  # [R, 1, L]
        q_i = q.gather(2, action[..., None])  # [R, B, 1]
        l1 = (1.0 - reward_i) * p1.gather(2, action[..., None]) / (q_i + gammas)  # [R, B, L]
        seen = (graph.to(dtype) * q[..., :, None]).sum(-2)  # sum_{k: A[k,j]} q_k, [R, B, K]
        # N(i) = {j : A[i, j]}: the played arm's row of the graph (self-loop included).
        hood = graph.gather(2, action[:, :, None, None].expand(r, b, 1, k))[:, :, 0]
        terms = torch.where(hood, loss * p2, 0.0)  # [R, B, K]
        l2 = (terms[..., None] / (seen[..., None] + gammas[:, :, None, :])).sum(2)  # [R, B, L]
        return torch.stack([l1.sum(1), l2.sum(1)], 1)  # [R, 2, L]

    def _exponential_weights(self, est: Tensor) -> None:
        """``Delta += sum mu l^^2``, ``log w -= eta l^`` (``eta`` from the previous Delta)."""
        eta = self.learning_rate()
        mix = self.mixture()
        self.delta = self.delta + (mix * est * est).sum((1, 2))
        log_w = self.log_weights - eta[:, None, None] * est
        self.log_weights = (
            log_w - torch.logsumexp(log_w.reshape(self.num_trials, -1), -1)[:, None, None]
        )
