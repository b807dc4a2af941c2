"""The CABS paper's relations judged over several runs (independently pre-trained oracles).

A run of a CABS preset depends on its pre-trained oracle (every learner reads the oracle's
feature head), so a relation between two learners is judged over runs that differ only in
``oracle_seed``. In each run ``r`` the two learners are compared trial by trial
(:func:`~torchroute.report.paired.paired_differences`): a mean difference ``d_r`` and its
standard error ``se_r``. The verdict of a relation in a regime is

- **PASS** when the mean of ``d_r`` over the runs has the claimed sign (``> 0`` for ``>``,
  ``>= 0`` for ``>=``) and no run reverses it beyond two of its standard errors
  (``d_r >= -2 se_r`` in every run);
- **FAIL** otherwise.

The spread is ``min..max`` of ``d_r`` over the runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from torchroute.report.paired import paired_differences
from torchroute.report.regimes import REGIMES


@dataclass(frozen=True)
class Relation:
    """The claim ``a op b`` (``op``: ``>`` or ``>=``) on a result metric; ``label`` names it."""

    a: str
    op: str
    b: str
    label: str = ""

    @property
    def text(self) -> str:
        """``a op b`` with the learner names in code marks."""
        return self.label or f"`{self.a}` {self.op} `{self.b}`"


#: the relations the CABS paper reports (Tables 1, 2 and 8), linear then neural; the one
#: table of them (the CABS report section checks the same). CABS-D over CABS-C is strict:
#: Section 5.2 reads "across all regimes, CABS-D consistently improves utility ... relative
#: to CABS-C"; the full-feedback variants are upper bounds (``>=``).
PAPER_RELATIONS: tuple[Relation, ...] = (
    Relation("cabs_d", ">", "linucb"),
    Relation("cabs_d", ">", "lints"),
    Relation("cabs_d", ">", "epsilon_greedy"),
    Relation("cabs_d", ">", "cabs_c"),
    Relation("linucb_full", ">=", "cabs_d"),
    Relation("cabs_d_neural", ">", "neural_ucb"),
    Relation("cabs_d_neural", ">", "cabs_c_neural"),
    Relation("neural_ucb_full", ">=", "cabs_d_neural"),
)

#: the surrogates' contribution: CABS-D against CABS-D on the identity graph (an upper bound:
#: the graph also shapes CABS-C's exploration) and against CABS-D whose regression is fed no
#: surrogate (``surrogates: none``: the same graph and exploration)
SURROGATE_RELATIONS: tuple[Relation, ...] = (
    Relation("cabs_d", ">", "cabs_d_identity", "surrogates: `cabs_d` - `cabs_d_identity`"),
    Relation("cabs_d", ">", "cabs_d_nosurrogates", "surrogates: `cabs_d` - `cabs_d_nosurrogates`"),
    Relation(
        "cabs_d_neural",
        ">",
        "cabs_d_neural_identity",
        "surrogates: `cabs_d_neural` - `cabs_d_neural_identity`",
    ),
)


def verdict(diffs: list[float], ses: list[float], op: str) -> bool:
    """PASS (``True``) when the mean of ``diffs`` has the sign of ``op`` and no run's
    difference is below ``-2`` of its standard error (a NaN SE counts as zero)."""
    mean = sum(diffs) / len(diffs)
    signed = mean > 0 if op == ">" else mean >= 0
    reversed_ = any(d < -2 * (0.0 if math.isnan(s) else s) for d, s in zip(diffs, ses))
    return signed and not reversed_


def relation_verdicts(
    runs: Mapping[str, pd.DataFrame],
    relations: tuple[Relation, ...] = PAPER_RELATIONS + SURROGATE_RELATIONS,
    metric: str = "avg_utility",
) -> pd.DataFrame:
    """One row per (relation, regime) over the runs that have both learners.

    Args:
        runs: ``{run name: results.csv rows of that run}``.
        relations: the claims judged (those whose learners no run has are left out).
        metric: the result column compared.

    Returns:
        columns ``relation``, ``regime``, one ``d +- se`` text column per run (``-`` where
        that run lacks one of the two learners), ``runs`` (how many were judged), ``mean``
        (of the runs' mean differences), ``min``, ``max`` (the spread over runs),
        ``verdict`` (``PASS`` / ``FAIL``, see the module docstring).
    """
    rows = []
    for rel in relations:
        per_run = {
            name: paired_differences(frame, rel.a, rel.b, metric)
            for name, frame in runs.items()
            if {rel.a, rel.b} <= set(frame["learner"])
        }
        if not per_run:
            continue
        first = next(iter(per_run.values()))
        regimes = [r for r in first.index if all(r in p.index for p in per_run.values())]
        for regime in regimes:
            diffs = [float(p.loc[regime, "mean"]) for p in per_run.values()]
            ses = [float(p.loc[regime, "se"]) for p in per_run.values()]
            row: dict[str, object] = {"relation": rel.text, "regime": regime}
            row.update(dict.fromkeys(runs, "-"))
            for name, d, s in zip(per_run, diffs, ses):
                row[name] = f"{d:+.4f} ± {s:.4f}"
            row.update(
                runs=len(per_run),
                mean=sum(diffs) / len(diffs),
                min=min(diffs),
                max=max(diffs),
                verdict="PASS" if verdict(diffs, ses, rel.op) else "FAIL",
            )
            rows.append(row)
    return pd.DataFrame(rows)


def verdict_lines(runs: Mapping[str, pd.DataFrame], metric: str = "avg_utility") -> list[str]:
    """Markdown: the rule, the table of :func:`relation_verdicts` and one summary line per
    relation over the cost regimes (``[]`` when no relation has its learners)."""
    table = relation_verdicts(runs, metric=metric)
    if table.empty:
        return []
    lines = [
        f"Paper relations over {len(runs)} run(s) ({', '.join(f'`{r}`' for r in runs)}): "
        f"paired differences of {metric} by (seed, rho) trial, +- one standard error per "
        "run; PASS when the mean over runs has the claimed sign and no run reverses it "
        "beyond 2 of its standard errors.",
        "",
        *table.to_markdown(index=False, floatfmt="+.4f").splitlines(),
        "",
    ]
    for relation, part in table.groupby("relation", sort=False):
        judged = part[part["regime"].isin(REGIMES)]
        failed = judged.loc[judged["verdict"] == "FAIL", "regime"].tolist()
        status = "PASS in every regime" if not failed else f"FAIL ({', '.join(failed)})"
        lines.append(f"- {relation}: {status}")
    return lines


__all__ = [
    "PAPER_RELATIONS",
    "SURROGATE_RELATIONS",
    "Relation",
    "relation_verdicts",
    "verdict",
    "verdict_lines",
]
