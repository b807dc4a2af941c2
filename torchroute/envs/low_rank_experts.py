"""The low-rank experts simulator of HPG (docs/papers/hpg.md; paper 000 Section 2).

Queries ``q in R^d`` (unit norm) come from a mixture of clusters (or adversarial blocks of
one cluster) in an ``L``-dimensional latent space embedded in ``R^d`` by a random
orthonormal ``P [d, L]``, plus isotropic ambient noise. Items ``a in R^da`` are unit
vectors; the reward kernel is ``Psi* = B* P^T`` (``B*`` with orthonormal rows, so
``||Psi*||_2 = 1``); expert ``m`` has the rank-``s`` kernel ``Psi_m = V_m^T U_m P^T``
(``||Psi_m||_2 = kernel_scale``) and draws one item from ``xi_m(a | q) ~ exp(a^T Psi_m q)``;
the reward is ``a^T Psi* q + N(0, noise^2)``.
``R_m(q) = sum_a xi_m(a | q) a^T Psi* q`` is exact. Proposition 1's comparator is the
first-order expansion around the uniform item draw, ``W*_m = sym(Psi*^T Cov(a) Psi_m)``
(rank ``<= 2 s``), scaled by ``c`` so that ``max_m ||c W*_m||_* = comparator_tau``.

``generator="well_specified"`` is the instance on which the paper's low-rank claims can show:
no items, ``R_m(q) = q^T W*_m q`` with ``W*_m = P D_m P^T``, ``D_m`` diagonal with ``2 s``
entries ``+-1`` on a random support ``S_m`` of the ``L`` latent axes (rank ``2 s``, nuclear
norm ``2 s``, spectral norm 1, so ``|R_m(q)| <= 1``); queries from ``num_clusters`` clusters
in the ``L``-dimensional latent space (``L > 2 s``: each expert sees only part of where the
queries live) plus ambient noise; reward ``R_m(q) + N(0, noise^2)``. The comparator is
``W*`` itself (scaled like the other to ``max_m ||c W*_m||_* = comparator_tau``).

Regret against the whole comparator class: the loop's sums give eq. 9 against the fixed
``W*``; ``sup_regret`` is its supremum over ``||W_m||_* <= comparator_tau`` (exact: eq. 9
is linear in ``W``, so the supremum is ``sum_t <g_t, W_t> + tau sum_m ||C_m||_2`` with
``C_m = sum_t pi_m (R_m - rbar) q_t q_t^T``). The env keeps the per-round coefficients
``pi_m (R_m - rbar)`` of the current run (its restorable state) to form ``C_m`` at the end.

Several dimensions run in one env: trials are ``dims x seeds`` (dim-major); queries of a
trial with ``d < max(dims)`` are zero-padded, and ``Problem.labels['dim']`` holds each
trial's true ``d``. The latent world (clusters, items, kernels) depends on the seed only,
so the same seed at two dimensions differs only by the embedding and the ambient noise.

:meth:`LowRankExperts.to_table` (and :func:`low_rank_experts_table`, a data config target)
emits a routing table of one trial's world with the exact ``R_m(q)`` as scores, for
table-based learners and the policy-class gap (``torchroute gap``).

(Over 400 lines: one env whose docstring states the model and its comparators; the
generators and the regret against the comparator class share the env's latent state.)
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Literal

import pandas as pd
import torch
from torch import Tensor

from torchroute.buildable import buildable
from torchroute.checks import check_number
from torchroute.data.splits import random_split
from torchroute.data.table import RoutingTable
from torchroute.envs.base import Env
from torchroute.envs.streams import env_noise_keys, trial_source
from torchroute.functional.random import Source, normal
from torchroute.functional.sampling import sample_multinomial
from torchroute.types import Context, Decision, Feedback, Outcome, Problem


def _unit(x: Tensor) -> Tensor:
    return x / x.norm(dim=-1, keepdim=True)


def _spectral_scale(x: Tensor, scale: float) -> Tensor:
    return x * (scale / torch.linalg.matrix_norm(x, ord=2)[..., None, None])


GENERATORS = ("shared_subspace", "well_specified")


def _quadratic_rewards(latent: Tensor, reward_matrix: Tensor) -> Tensor:
    """``R_m(q) = z^T A_m z`` ``[..., B, M]`` from latent queries ``z [..., B, L]`` and
    ``reward_matrix [..., M, L, L]``."""
    return torch.einsum("...bl,...mlk,...bk->...bm", latent, reward_matrix, latent)


def sup_linearized_regret(
    queries: Tensor, coef: Tensor, policy_term: Tensor, tau: float | Tensor
) -> Tensor:
    """The supremum of eq. 9 over the comparators ``||W_m||_* <= tau`` (symmetric), ``[R]``.

    ``sup_W sum_t <g_t, W_t - W> = policy_term + tau sum_m ||sum_t coef[t, m] q_t q_t^T||_2``
    with ``g_{t,m} = -coef[t, m] q_t q_t^T`` and ``policy_term = sum_t <g_t, W_t>``.

    Args:
        queries: ``[R, T, D]``.
        coef: ``[R, T, M]``, ``pi_m (R_m - rbar)`` per round.
        policy_term: ``[R]``.
        tau: radius (float or ``[R]``).
    """
    out = []
    for r in range(queries.shape[0]):  # once per run, one trial at a time to bound memory
        q = queries[r].to(torch.float64)
        c = coef[r].to(torch.float64)
        mats = torch.einsum("td,tm,te->mde", q, c, q)  # [M, D, D]
        out.append(torch.linalg.eigvalsh(mats).abs().amax(-1).sum())
    spectral = torch.stack(out).to(policy_term.device)
    return policy_term.to(torch.float64) + torch.as_tensor(tau, dtype=torch.float64) * spectral


def _mixture_rewards(
    latent: Tensor, item_rewards: Tensor, item_logits: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """``R_m(q) [..., B, M]``, ``xi_m(a | q) [..., B, M, n]`` and ``a^T Psi* q [..., B, n]``
    from latent queries ``[..., B, L]``, ``item_rewards [..., n, L]`` and
    ``item_logits [..., M, n, L]``."""
    item_reward = latent @ item_rewards.transpose(-1, -2)  # [..., B, n]
    logits = latent.unsqueeze(-3) @ item_logits.transpose(-1, -2)  # [..., M, B, n]
    xi = torch.softmax(logits.transpose(-3, -2), -1)  # [..., B, M, n]
    return (xi * item_reward.unsqueeze(-2)).sum(-1), xi, item_reward


class LowRankExperts(Env):
    """Online routing among ``M`` rank-``s`` experts with exact expected rewards.

    Args:
        seeds: world seeds (one trial per seed and dimension).
        dims: query dimensions ``d``.
        num_experts: ``M``.
        rank: ``s``, the rank of each expert kernel.
        horizon: ``T``.
        latent_dim, item_dim, num_items, num_clusters: ``L``, ``da``, items, clusters.
        query_noise: ambient noise norm added to the latent query before normalisation.
        latent_noise: within-cluster spread in the latent space.
        mode: ``"clusters"`` (i.i.d. cluster draws) or ``"blocks"`` (adversarial blocks of
            ``block_length`` rounds of one cluster, cycling).
        kernel_scale: ``||Psi_m||_2`` (the experts' sharpness).
        noise: Gaussian reward noise sigma.
        comparator_tau: nuclear norm of the scaled comparator and radius of the class of
            ``sup_regret`` (default ``2 s``).
        generator: ``"shared_subspace"`` (items and expert kernels in one latent space) or
            ``"well_specified"`` (``R_m(q) = q^T W*_m q``, ``W*_m`` of rank ``2 s``; needs
            ``latent_dim >= 2 s``; items and ``kernel_scale`` unused).
        rounds: the run's ``rounds=`` key; when set it replaces ``horizon``.
        device, dtype: where and in which precision contexts and rewards live.

    Shapes:
        ``context(t).x [R, 1, D]`` (``D = max(dims)``); the outcome has ``reward``,
        ``expected_reward``, ``regret`` (vs the per-query best expert), ``comparator_regret``
        (vs the policy ``softmax(q^T c W* q)``), ``linearized_regret`` (eq. 9, per round),
        ``policy_term`` (``<g_t, W_t>``) ``[R, 1]`` and ``expert_reward [R, 1, M]``, computed
        in float64 and returned in ``dtype``. A trial's step noise (item draw, reward noise)
        comes from its own stream (:func:`torchroute.envs.streams.trial_source`), so it does
        not depend on the trials beside it.
    """

    curve_keys = ("regret", "linearized_regret")
    single_choice = True  # one expert per query, its noisy reward revealed

    def __init__(
        self,
        seeds: Sequence[int],
        dims: Sequence[int] = (64,),
        num_experts: int = 8,
        rank: int = 4,
        horizon: int = 2000,
        latent_dim: int = 8,
        item_dim: int = 8,
        num_items: int = 32,
        num_clusters: int = 8,
        query_noise: float = 0.3,
        latent_noise: float = 0.3,
        mode: Literal["clusters", "blocks"] = "clusters",
        block_length: int = 100,
        kernel_scale: float = 16.0,
        noise: float = 0.1,
        comparator_tau: float | None = None,
        generator: str = "shared_subspace",
        rounds: int | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        name = "LowRankExperts"
        if rounds is not None:
            if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
                raise ValueError(f"{name}: rounds must be an integer >= 1 or null, got {rounds!r}")
            horizon = rounds
        if generator not in GENERATORS:
            raise ValueError(f"{name}: generator must be one of {GENERATORS}, got {generator!r}")
        if generator == "well_specified":
            check_number(name, "latent_dim", latent_dim, ge=2 * rank, integer=True)
            item_dim = latent_dim  # items unused; keeps the shared draws well formed
        for key, value in (("num_experts", num_experts), ("rank", rank), ("horizon", horizon)):
            check_number(name, key, value, ge=1, integer=True)
        check_number(name, "latent_dim", latent_dim, ge=rank, integer=True)
        for key, value in (("query_noise", query_noise), ("noise", noise)):
            check_number(name, key, value, ge=0)
        check_number(name, "kernel_scale", kernel_scale, gt=0)
        if mode not in ("clusters", "blocks"):
            raise ValueError(f"{name}: mode must be 'clusters' or 'blocks', got {mode!r}")
        dims_l = [int(d) for d in dims]
        if not dims_l or min(dims_l) < latent_dim:
            raise ValueError(f"{name}: dims must be non-empty and >= latent_dim, got {dims_l}")
        seeds_l = [int(s) for s in seeds]
        self.dims = torch.tensor([d for d in dims_l for _ in seeds_l])
        self.seeds = torch.tensor([s for _ in dims_l for s in seeds_l])
        self.num_trials, self.num_arms, self.horizon = len(self.seeds), num_experts, horizon
        self.rank, self.noise, self.dtype = rank, float(noise), dtype
        tau_star = 2.0 * rank if comparator_tau is None else float(comparator_tau)
        self.comparator_tau = tau_star
        d_max, big = max(dims_l), torch.float64
        cfg = {
            "latent_dim": latent_dim,
            "item_dim": item_dim,
            "num_items": num_items,
            "num_experts": num_experts,
            "rank": rank,
            "horizon": horizon,
            "num_clusters": num_clusters,
            "latent_noise": latent_noise,
            "query_noise": query_noise,
            "mode": mode,
            "block_length": block_length,
            "kernel_scale": kernel_scale,
            "tau_star": tau_star,
            "generator": generator,
        }
        self.generator = generator
        self._cfg = cfg
        worlds = [self._world(int(s), int(d), d_max, cfg) for s, d in zip(self.seeds, self.dims)]
        stack = {k: torch.stack([w[k] for w in worlds]) for k in worlds[0]}
        self._device = torch.device(device)
        self.embed = stack["embed"].to(self._device, big)  # [R, D, L]
        items = stack["items"].to(self._device, big)  # [R, n, da]
        # item rewards a^T B* and expert logits a^T V_m^T U_m in the latent space
        self.item_rewards = items @ stack["reward_kernel"].to(self._device, big)  # [R, n, L]
        self.item_logits = items[:, None] @ stack["expert_kernels"].to(self._device, big)
        self.comparator = stack["comparator"].to(self._device, big)  # [R, M, L, L]
        self.reward_matrix = stack["reward_matrix"].to(self._device, big)  # [R, M, L, L]
        self.queries = stack["queries"].to(self._device, dtype)  # [R, T, D]
        self.round = 0  # the round of the last context(t)
        self.coef = torch.zeros(
            self.num_trials, horizon, num_experts, device=self._device, dtype=big
        )
        # [R] keys of the trials' own noise streams (from their labels, :meth:`trials`)
        self.noise_keys = env_noise_keys(self.trials(), self._device)

    @staticmethod
    def _world(seed: int, d: int, d_max: int, cfg: dict) -> dict[str, Tensor]:
        """One trial's world: latent parts from ``seed``, embedding from ``(seed, d)``."""
        g = torch.Generator().manual_seed(seed)
        f64 = torch.float64
        lat, da, m, s = cfg["latent_dim"], cfg["item_dim"], cfg["num_experts"], cfg["rank"]
        t, k = cfg["horizon"], cfg["num_clusters"]
        centers = _unit(torch.randn(k, lat, generator=g, dtype=f64))
        items = _unit(torch.randn(cfg["num_items"], da, generator=g, dtype=f64))
        star = torch.linalg.qr(torch.randn(lat, da, generator=g, dtype=f64))[0].T  # [da, L]
        v = torch.randn(m, s, da, generator=g, dtype=f64)
        u = torch.randn(m, s, lat, generator=g, dtype=f64)
        experts = _spectral_scale(v.transpose(-1, -2) @ u, cfg["kernel_scale"])  # [M, da, L]
        if cfg["mode"] == "clusters":
            cluster = torch.randint(0, k, (t,), generator=g)
        else:
            cluster = (torch.arange(t) // cfg["block_length"] + seed) % k
        z = centers[cluster] + cfg["latent_noise"] * torch.randn(t, lat, generator=g, dtype=f64)
        z = _unit(z)
        if cfg.get("generator", "shared_subspace") == "well_specified":
            # W*_m = diag of 2 s signs on a random support of the L latent axes
            support = torch.rand(m, lat, generator=g, dtype=f64).argsort(-1)[:, : 2 * s]
            signs = torch.randint(0, 2, (m, 2 * s), generator=g).to(f64) * 2 - 1
            diag = torch.zeros(m, lat, dtype=f64).scatter_(1, support, signs)
            w = torch.diag_embed(diag)  # [M, L, L]
            reward_matrix = w
        else:
            cov = torch.cov(items.T, correction=0)  # [da, da]
            w = star.T @ cov @ experts  # [M, L, L]
            w = 0.5 * (w + w.transpose(-1, -2))
            reward_matrix = torch.zeros(m, lat, lat, dtype=f64)  # unused
        nuc = torch.linalg.matrix_norm(w, ord="nuc").amax()
        comparator = w * (cfg["tau_star"] / nuc)
        g_d = torch.Generator().manual_seed(seed * 100_003 + d)
        embed, _ = torch.linalg.qr(torch.randn(d, lat, generator=g_d, dtype=f64))
        ambient = torch.randn(t, d, generator=g_d, dtype=f64) / d**0.5
        queries = _unit(z @ embed.T + cfg["query_noise"] * ambient)  # [T, d]
        pad = d_max - d
        return {
            "cluster": cluster,
            "embed": torch.nn.functional.pad(embed, (0, 0, 0, pad)),
            "items": items,
            "reward_kernel": star,
            "expert_kernels": experts,
            "comparator": comparator,
            "reward_matrix": reward_matrix,
            "queries": torch.nn.functional.pad(queries, (0, pad)),
        }

    @property
    def device(self) -> torch.device:
        return self._device

    def trials(self) -> pd.DataFrame:
        """Labels ``dim, seed`` (what varies) and ``s, L, M`` (rank, latent dimension and
        experts, the same for every trial; they let several runs' results be put side by side)."""
        n = self.num_trials
        return pd.DataFrame(
            {
                "dim": self.dims.numpy(),
                "seed": self.seeds.numpy(),
                "s": [self.rank] * n,
                "L": [self._cfg["latent_dim"]] * n,
                "M": [self.num_arms] * n,
            }
        )

    def select_trials(self, index: Sequence[int] | Tensor) -> LowRankExperts:
        """The trials ``index`` (their worlds and query streams) as a new env."""
        idx = self.trial_index(index)
        env = copy.copy(self)
        env.num_trials = idx.numel()
        env.dims, env.seeds = self.dims[idx], self.seeds[idx]
        on = idx.to(self._device)
        names = ("embed", "item_rewards", "item_logits", "comparator", "reward_matrix", "queries")
        for name in (*names, "coef", "noise_keys"):
            setattr(env, name, getattr(self, name)[on])
        return env

    def problem(self) -> Problem:
        r = self.num_trials
        return Problem(
            num_trials=r,
            num_arms=self.num_arms,
            dim=self.queries.shape[-1],
            rho=torch.zeros(r, dtype=torch.float64),
            arm_names=tuple(f"expert{m}" for m in range(self.num_arms)),
            horizon=self.horizon,
            device=self._device,
            dtype=self.dtype,
            labels={"dim": self.dims.to(torch.float64)},
        )

    def context(self, t: int) -> Context:
        self.round = t
        return Context(x=self.queries[:, t : t + 1])

    def expected_rewards(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``R_m(q) [R, B, M]``, the item distributions ``[R, B, M, n]`` and item rewards
        ``a^T Psi* q [R, B, n]`` for queries ``x [R, B, D]`` (float64; for the
        well-specified generator the last two are empty, ``n = 0``)."""
        latent = x.to(torch.float64) @ self.embed  # [R, B, L]
        return self._means(latent, self.item_rewards, self.item_logits, self.reward_matrix)

    def _means(self, latent, item_rewards, item_logits, reward_matrix):
        if self.generator == "well_specified":
            means = _quadratic_rewards(latent, reward_matrix)
            empty = means.new_zeros(*means.shape, 0)
            return means, empty, empty[..., 0, :]
        return _mixture_rewards(latent, item_rewards, item_logits)

    def to_table(
        self,
        num_queries: int | None = None,
        trial: int = 0,
        fractions: Sequence[float] = (0.6, 0.1, 0.3),
    ) -> RoutingTable:
        """A routing table of ``num_queries`` queries from trial ``trial``'s world.

        The queries are drawn like the trial's stream (same clusters, embedding and ambient
        noise; with ``num_queries = horizon``, the default, they are the stream itself).
        ``scores [n, M]``: ``Y[i, m] = (R_m(q_i) + 1) / 2``, the exact expected reward
        mapped affinely from ``[-1, 1]`` (``|a^T Psi* q| <= 1`` for unit ``a, q`` and
        ``||Psi*||_2 = 1``) to ``[0, 1]``, so every gap is half the reward gap. ``costs``
        are zero; ``embeddings [n, d]`` are the queries at the trial's true ``d`` (no
        padding), and the scores are exact for them as stored (float32); the split is
        random with ``fractions``, seeded by the trial's seed; ``groups`` name the cluster
        (or block) of each query.
        """
        n = self.horizon if num_queries is None else num_queries
        check_number("LowRankExperts.to_table", "num_queries", n, ge=1, integer=True)
        if not 0 <= trial < self.num_trials:
            raise ValueError(
                f"LowRankExperts.to_table: trial must be in 0..{self.num_trials - 1}, got {trial}"
            )
        seed, d = int(self.seeds[trial]), int(self.dims[trial])
        world = self._world(seed, d, d, {**self._cfg, "horizon": int(n)})
        queries = world["queries"].float()  # [n, d], what the table stores
        latent = queries.to(self._device, torch.float64) @ self.embed[trial, :d]
        means, _, _ = self._means(
            latent, self.item_rewards[trial], self.item_logits[trial], self.reward_matrix[trial]
        )
        scores = ((means + 1) / 2).clamp(0.0, 1.0).cpu()  # clamp: rounding at +-1 only
        return RoutingTable(
            scores=scores,
            costs=torch.zeros_like(scores),
            arm_names=tuple(f"expert{m}" for m in range(self.num_arms)),
            query_ids=tuple(f"lre-s{seed}-d{d}-{i:06d}" for i in range(int(n))),
            split=random_split(int(n), fractions, seed),
            embeddings=queries,
            groups=tuple(f"cluster{c}" for c in world["cluster"].tolist()),
            source=f"LowRankExperts(seed={seed}, d={d}).to_table(num_queries={n})",
        )

    def comparator_scores(self, x: Tensor) -> Tensor:
        """``q^T c W*_m q``, ``[R, B, M]``."""
        latent = x.to(torch.float64) @ self.embed
        return torch.einsum("rbl,rmlk,rbk->rbm", latent, self.comparator, latent)

    def step(
        self, context: Context, decision: Decision, generator: Source = None
    ) -> tuple[Feedback, Outcome]:
        self.check_decision(decision)
        means, xi, item_reward = self.expected_rewards(context.x)  # [R, B, M]
        action = decision.action
        r, b = action.shape
        streams = trial_source(generator, self.noise_keys)  # each trial's own noise
        if self.generator == "well_specified":
            clean = means.gather(-1, action[..., None])[..., 0]
        else:
            xi_played = xi.gather(2, action[..., None, None].expand(r, b, 1, xi.shape[-1]))
            item = sample_multinomial(xi_played[:, :, 0], streams)  # [R, B]
            clean = item_reward.gather(-1, item.reshape(r, b, 1))[..., 0]
        eps = normal(streams, (r, b), dtype=torch.float64, device=self.device)
        reward = clean + self.noise * eps
        observed = torch.nn.functional.one_hot(action, self.num_arms).bool()
        reward_k = torch.where(observed, reward[..., None], 0.0).to(self.dtype)
        chosen = means.gather(-1, action[..., None])[..., 0]
        probs = decision.probs.to(torch.float64)
        rbar = (probs * means).sum(-1, keepdim=True)
        log_pi = probs.clamp_min(1e-300).log()
        comparator = self.comparator_scores(context.x)
        coef = probs * (means - rbar)  # pi_m (R_m - rbar): -g_t / (q q^T)
        lin = (coef * (comparator - log_pi)).sum(-1)
        if b == 1 and 0 <= self.round < self.coef.shape[1]:
            self.coef[:, self.round] = coef[:, 0]
        star = torch.softmax(comparator, -1)
        outcome = {
            "reward": reward,
            "expected_reward": chosen,
            "regret": means.amax(-1) - chosen,
            "comparator_regret": (star * means).sum(-1) - chosen,
            "linearized_regret": lin,
            "policy_term": -(coef * log_pi).sum(-1),
            "expert_reward": means,
        }
        # computed in float64, reported in the env's dtype (a no-op for float64 runs)
        outcome = {key: value.to(self.dtype) for key, value in outcome.items()}
        return Feedback(reward_k, observed, only_played=True), outcome

    def logged_feedback(
        self, context: Context, decision: Decision, feedback: Feedback
    ) -> tuple[Tensor, Tensor]:
        """The chosen expert's exact quality on the ``[0, 1]`` scale of :meth:`table`,
        ``(R_a(q) + 1) / 2``, and a zero cost, ``[R, B]`` each: a decision log's score
        must lie in ``[0, 1]``, which the noisy reward the learner saw does not (its mean
        given the query and expert is ``R_a(q)``, so the two differ by zero-mean noise)."""
        means = self.expected_rewards(context.x)[0]  # [R, B, M]
        chosen = means.gather(-1, decision.action[..., None])[..., 0]
        score = ((chosen + 1) / 2).clamp(0.0, 1.0)  # clamp: rounding at +-1 only
        return score, torch.zeros_like(score)

    def summarize(self, sums: dict[str, Tensor], rounds: int) -> dict[str, Tensor]:
        best_const = sums["expert_reward"].amax(-1)
        out = {
            "avg_reward": sums["reward"] / rounds,
            "avg_expected_reward": sums["expected_reward"] / rounds,
            "avg_regret": sums["regret"] / rounds,
            "const_regret": (best_const - sums["expected_reward"]) / rounds,
            "comparator_regret": sums["comparator_regret"] / rounds,
            "linearized_regret": sums["linearized_regret"],
            "avg_linearized_regret": sums["linearized_regret"] / rounds,
        }
        if rounds >= self.horizon and "policy_term" in sums:
            sup = sup_linearized_regret(
                self.queries, self.coef, sums["policy_term"], self.comparator_tau
            )
            out["sup_regret"] = sup.to(out["avg_regret"])
            out["avg_sup_regret"] = out["sup_regret"] / rounds
        return out

    def state_dict(self) -> dict[str, Any]:
        """The current run's per-round coefficients ``pi_m (R_m - rbar)`` (for ``sup_regret``)."""
        return {"coef": self.coef.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.coef = state["coef"].to(self.coef)

    def fingerprint(self) -> dict:
        return {
            "env": "LowRankExperts",
            "generator": self.generator,
            "trials": self.trials().to_dict("list"),
            "horizon": self.horizon,
            "shape": list(self.queries.shape),
            "checksum": float(self.queries.double().sum()),
        }


@buildable
def low_rank_experts_table(
    num_queries: int = 2000,
    seed: int = 0,
    dim: int = 64,
    fractions: Sequence[float] = (0.6, 0.1, 0.3),
    **env_kwargs,
) -> RoutingTable:
    """The routing table of :meth:`LowRankExperts.to_table` for one world (``seed``, ``d =
    dim``): ``num_queries`` queries, ``scores [n, M] = (R_m(q) + 1) / 2``, ``embeddings
    [n, d]``. ``env_kwargs`` are the simulator's other arguments (``num_experts``,
    ``rank``, ...); a data config target for ``torchroute gap`` and table-based runs."""
    env = LowRankExperts(
        seeds=[seed], dims=[dim], horizon=num_queries, dtype=torch.float32, **env_kwargs
    )
    return env.to_table(fractions=fractions)
