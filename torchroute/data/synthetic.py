"""Synthetic routing tables: a text benchmark with real-looking queries, and a linear one.

:func:`synthetic_text_benchmark` is the built-in default benchmark. Queries are written from
templates over seven task domains, at three difficulty levels (harder templates read
harder: more steps, constraints, longer passages). Eight arms from three model families
answer them:

- ``atlas-*`` — general-purpose API models (nano / base / max): strong on facts, law and
  summaries; the largest is the most accurate generalist and by far the priciest.
- ``sable-*`` — open multilingual models (7b / 70b): best at translation and creative writing.
- ``forge-*`` — code and maths specialists (coder-7b / math-13b / coder-34b): cheap, and better
  than the biggest generalist on their own domains, weak elsewhere.

Correctness is Bernoulli with probability ``sigmoid(family skill[domain] + size bonus +
specialty + difficulty shift + query noise)``; larger models lose less on hard queries.
Costs are ``input tokens x input price + output tokens x output price`` (USD, list-price
like, about 1e-5 to 1e-2 per query), so for ``rho`` in ``[0, 1000]`` both the best arm and
the value of paying for a big model change with the query's domain and difficulty.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from torchroute.buildable import buildable
from torchroute.data.splits import random_split
from torchroute.data.table import RoutingTable, TableError
from torchroute.data.templates import TEMPLATES, VOCAB

DOMAINS = ("arithmetic", "coding", "trivia", "legal", "translation", "summarization", "creative")
LEVELS = ("easy", "medium", "hard")


@dataclass(frozen=True)
class ArmSpec:
    """One synthetic model: family, size bonus (logit), prices in USD per 1M tokens."""

    name: str
    family: str
    size: float
    price_in: float
    price_out: float
    specialty: dict[str, float] = field(default_factory=dict)


ARMS = (
    ArmSpec("atlas-nano", "atlas", 0.0, 0.15, 0.6),
    ArmSpec("atlas-base", "atlas", 0.9, 1.0, 3.0),
    ArmSpec("atlas-max", "atlas", 1.9, 5.0, 15.0),
    ArmSpec("sable-7b", "sable", 0.1, 0.2, 0.2, {"translation": 0.8}),
    ArmSpec("sable-70b", "sable", 1.3, 0.9, 0.9),
    ArmSpec("forge-coder-7b", "forge", 0.0, 0.2, 0.2, {"coding": 1.6}),
    ArmSpec("forge-math-13b", "forge", 0.5, 0.3, 0.3, {"arithmetic": 1.6}),
    ArmSpec("forge-coder-34b", "forge", 1.1, 0.8, 0.8, {"coding": 1.2, "arithmetic": 0.6}),
)
# family skill (logit) per domain, in the order of DOMAINS
FAMILY_SKILL = {
    "atlas": (0.3, 0.3, 0.8, 0.5, 0.4, 0.8, 0.6),
    "sable": (-0.3, -0.4, 0.2, -0.1, 1.3, 0.6, 1.4),
    "forge": (1.0, 1.3, -0.5, -0.6, -0.8, -0.2, -0.9),
}
LEVEL_SHIFT = (1.2, 0.0, -1.4)  # easy / medium / hard, before size resistance
OUTPUT_TOKENS = (120, 250, 30, 200, 80, 100, 300)  # typical answer length per domain

_WORDS = {key: tuple(w.strip() for w in words.split(" | ")) for key, words in VOCAB.items()}


_KEYS = tuple(_WORDS)


class _Slots(dict):
    """One query's template slots: its numbers, and words picked by its uniforms ``[V]``."""

    def __init__(self, numbers: dict[str, int], uniforms: list[float]) -> None:
        super().__init__(numbers)
        self.uniforms = uniforms

    def __missing__(self, key: str) -> str:
        words = _WORDS[key]
        self[key] = value = words[int(self.uniforms[_KEYS.index(key)] * len(words))]
        return value


def _numbers(rng: np.random.Generator, n: int) -> list[dict[str, int]]:
    """Numeric slots for ``n`` queries (``n`` and ``m`` differ, both in 2..9)."""
    first = rng.integers(2, 10, size=n)
    cols = {
        "a": rng.integers(12, 999, size=n),
        "b": rng.integers(11, 99, size=n),
        "n": first,
        "m": (first - 2 + rng.integers(1, 8, size=n)) % 8 + 2,
        "p": rng.integers(2, 20, size=n),
        "bill": rng.choice([50, 100], size=n),
        "pct": rng.integers(5, 60, size=n),
        "z": rng.integers(20, 100, size=n),
    }
    rows = zip(*(c.tolist() for c in cols.values()), strict=True)
    return [dict(zip(cols, r, strict=True)) for r in rows]


@buildable
def synthetic_text_benchmark(
    num_queries: int = 1500,
    seed: int = 0,
    *,
    fractions: Sequence[float] = (0.6, 0.1, 0.3),
    domains: Sequence[str] = DOMAINS,
    level_probs: Sequence[float] = (0.4, 0.35, 0.25),
) -> RoutingTable:
    """The built-in routing benchmark with query text (see the module docstring).

    Args:
        num_queries: ``n``.
        seed: everything (text, scores, costs, split) is a function of the arguments.
        fractions: shares of (train, val, test).
        domains: a subset of :data:`DOMAINS`.
        level_probs: probabilities of easy / medium / hard queries.

    Returns:
        ``scores`` ``[n, 8]`` in ``{0, 1}``, ``costs`` ``[n, 8]`` USD, ``text``, and
        ``groups`` = domain; arms in the order of :data:`ARMS`.
    """
    unknown = sorted(set(domains) - set(DOMAINS))
    if unknown or not domains:
        raise TableError(f"domains must be a non-empty subset of {DOMAINS}, got {list(domains)}")
    if (
        not isinstance(num_queries, (int, np.integer))
        or isinstance(num_queries, bool)
        or num_queries < 1
    ):
        raise TableError(f"num_queries must be an integer >= 1, got {num_queries!r}")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise TableError(f"seed must be an integer >= 0, got {seed!r}")
    probs = np.asarray(list(level_probs), dtype=object)
    ok = len(probs) == 3 and all(
        isinstance(p, (int, float)) and not isinstance(p, bool) and np.isfinite(p) and p >= 0
        for p in probs
    )
    if not ok or sum(probs) <= 0:
        raise TableError(
            "level_probs must be three finite numbers >= 0 (easy, medium, hard) with a "
            f"positive sum, got {list(level_probs)}"
        )
    rng = np.random.default_rng(seed)
    dom_idx = np.array([DOMAINS.index(d) for d in domains])[
        rng.integers(len(domains), size=num_queries)
    ]
    level = rng.choice(3, size=num_queries, p=np.asarray(level_probs) / np.sum(level_probs))
    numbers = _numbers(rng, num_queries)
    pick = rng.random(num_queries).tolist()
    uniforms = rng.random((num_queries, len(_KEYS))).tolist()
    text = []
    for i, (d, lv) in enumerate(zip(dom_idx.tolist(), level.tolist(), strict=True)):
        options = TEMPLATES[DOMAINS[d]][lv]
        slots = _Slots(numbers[i], uniforms[i])
        query = options[int(pick[i] * len(options))].format_map(slots)
        text.append(query.format_map(slots) if "{" in query else query)
    families = sorted(FAMILY_SKILL)
    skill = np.array([FAMILY_SKILL[a.family] for a in ARMS])  # [K, D]
    skill += np.array([[a.specialty.get(d, 0.0) for d in DOMAINS] for a in ARMS])
    size = np.array([a.size for a in ARMS])  # [K]
    fam = np.array([families.index(a.family) for a in ARMS])
    shift = np.asarray(LEVEL_SHIFT)[level][:, None] * (1.0 - 0.35 * size / size.max())  # [n, K]
    noise = rng.normal(0.0, 0.6, size=(num_queries, 1))
    noise = noise + rng.normal(0.0, 0.4, size=(num_queries, len(families)))[:, fam]
    logits = skill[:, dom_idx].T + size + shift + noise  # [n, K]
    scores = (rng.random(logits.shape) < 1.0 / (1.0 + np.exp(-logits))).astype(np.float64)
    tokens_in = np.array([1.3 * len(t.split()) + 8 for t in text])  # [n]
    tokens_out = np.asarray(OUTPUT_TOKENS)[dom_idx] * (1 + 0.5 * level)
    tokens_out = tokens_out * rng.lognormal(0.0, 0.3, size=num_queries)
    price_in = np.array([a.price_in for a in ARMS]) * 1e-6
    price_out = np.array([a.price_out for a in ARMS]) * 1e-6
    costs = tokens_in[:, None] * price_in + tokens_out[:, None] * price_out  # [n, K]
    return RoutingTable(
        scores=scores,
        costs=costs,
        arm_names=tuple(a.name for a in ARMS),
        query_ids=tuple(f"synth-{i:05d}" for i in range(num_queries)),
        split=random_split(num_queries, fractions, seed),
        text=tuple(text),
        groups=tuple(DOMAINS[d] for d in dom_idx.tolist()),
        source=f"synthetic_text_benchmark(num_queries={num_queries}, seed={seed})",
    )


def linear_contextual_table(
    num_queries: int,
    num_arms: int,
    dim: int,
    seed: int = 0,
    *,
    noise: float = 0.1,
    bernoulli: bool = False,
    fractions: Sequence[float] = (0.6, 0.1, 0.3),
) -> tuple[RoutingTable, Tensor]:
    """A table whose mean scores are exactly linear in unit-norm contexts.

    ``x`` = ``[z * sqrt(1/2), sqrt(1/2)]`` with ``z`` uniform on the unit sphere of
    ``R^(d-1)``, so ``|x| = 1`` and the last feature is a constant (the intercept lives in
    ``theta``). The mean score of arm ``k`` is ``x @ theta[k]`` in ``[0.1, 0.9]``; the score is
    ``clip(mean + noise * N(0, 1), 0, 1)``, or ``Bernoulli(mean)`` with ``bernoulli=True``.
    Costs are per-arm constants ``1e-3 * (k + 1) / K``.

    Returns:
        The table (``embeddings`` ``[n, d]`` float32) and ``theta`` ``[K, d]`` float64.
    """
    if dim < 2 or num_arms < 1 or num_queries < 1:
        raise TableError(f"need dim >= 2, num_arms >= 1, num_queries >= 1; got {dim}, {num_arms}")
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(num_queries, dim - 1))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    c = np.sqrt(0.5)
    x = np.concatenate([z * c, np.full((num_queries, 1), c)], axis=1)  # [n, d]
    u = rng.normal(size=(num_arms, dim - 1))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    bias = rng.uniform(0.35, 0.65, size=num_arms)
    theta = np.concatenate([u * 0.25 / c, (bias / c)[:, None]], axis=1)  # [K, d]
    mean = x @ theta.T  # [n, K], in [0.1, 0.9]
    if bernoulli:
        scores = (rng.random(mean.shape) < mean).astype(np.float64)
    else:
        scores = np.clip(mean + noise * rng.normal(size=mean.shape), 0.0, 1.0)
    costs = np.broadcast_to(1e-3 * np.arange(1, num_arms + 1) / num_arms, mean.shape).copy()
    table = RoutingTable(
        scores=scores,
        costs=costs,
        arm_names=tuple(f"arm{k}" for k in range(num_arms)),
        query_ids=tuple(f"lin-{i:05d}" for i in range(num_queries)),
        split=random_split(num_queries, fractions, seed),
        embeddings=torch.as_tensor(x, dtype=torch.float32),
        source=f"linear_contextual_table(n={num_queries}, K={num_arms}, d={dim}, seed={seed})",
    )
    return table, torch.as_tensor(theta, dtype=torch.float64)
