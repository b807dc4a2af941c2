"""The report's opening: one sentence per learner family saying what the numbers show.

Learners are sorted into families by the class their config builds (``learners.<name>``
in the run folder's ``config.yaml``, resolved to the class by
:func:`torchroute.run.classes.learner_class`, never instantiated), each class declaring its
:attr:`~torchroute.learners.Learner.family` (CABS, HPG; ``baselines`` by default) and its
:attr:`~torchroute.learners.Learner.role` (online, static or reference); subset routing is
a results frame with the subset columns ``avg_reward`` and ``feasible``. Each sentence
compares the family's best learner (by mean utility, or mean reward for subset routing)
with the uniform-random router and, where they ran, the best fixed model (``best_single``)
and the best baseline bandit; a full-feedback learner (``feedback = "full"``, which sees
every arm's reward) is an upper reference, named in the
baselines' sentence but never their best bandit. Every number comes from the results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from torchroute.learners.base import Learner
from torchroute.run.classes import learner_class

#: learner name -> the class its config builds (``None``: unknown)
Classes = Mapping[str, "type[Learner] | None"]
#: learners every comparison is made against, when they ran
RANDOM, BEST_SINGLE = "random", "best_single"
#: the heading the opening starts with
OPENING = "## What the numbers show"


def learner_classes(run_dir: str | Path) -> dict[str, type[Learner] | None]:
    """``{learner: class}`` from ``run_dir/config.yaml`` (empty when it is missing; ``None``
    for a node whose class is not found, see :func:`~torchroute.run.classes.learner_class`)."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return {}
    try:
        learners = OmegaConf.to_container(OmegaConf.load(path)).get("learners") or {}
    except Exception:  # an unreadable config only costs the family grouping
        return {}
    return {str(name): learner_class(node) for name, node in learners.items()}


def family_of(classes: Classes, learner: str) -> str:
    """The family its class declares (``"baselines"`` when its class is unknown)."""
    cls = classes.get(learner)
    return cls.family if cls is not None else "baselines"


def role_of(classes: Classes, learner: str) -> str:
    """The role its class declares: ``online``, ``static`` or ``reference`` (``online``
    when its class is unknown; ``best_single`` is static)."""
    cls = classes.get(learner)
    if cls is None:
        return "static" if learner == BEST_SINGLE else "online"
    return cls.role


def _full_feedback(classes: Classes, learners: Sequence[str]) -> list[str]:
    """The learners whose class sees every arm's reward (an upper reference)."""
    found = [(n, classes.get(n)) for n in learners]
    return [n for n, cls in found if cls is not None and cls.feedback == "full"]


def _means(results: pd.DataFrame, column: str) -> pd.Series:
    return results.groupby("learner")[column].mean().dropna()


def _versus(means: pd.Series, best: str, others: Sequence[str]) -> str:
    parts = [
        f"{other} ({means[other]:.3f}, {means[best] - means[other]:+.3f})"
        for other in others
        if other in means.index and other != best
    ]
    return f"; against {', '.join(parts)}" if parts else ""


def single_choice_sentences(results: pd.DataFrame, classes: Classes) -> list[str]:
    """One sentence per family of a single-choice run (``avg_utility`` per learner)."""
    if "avg_utility" not in results:
        return []
    means = _means(results, "avg_utility")
    if means.empty:
        return []
    families: dict[str, list[str]] = {}
    for learner in means.index:
        families.setdefault(family_of(classes, learner), []).append(learner)
    trials = int(results.groupby("learner").size().max())
    full = _full_feedback(classes, list(means.index))
    base = [  # the best bandit: an online learner (static routers have their own sentence)
        n
        for n in families.get("baselines", [])
        if n not in (RANDOM, BEST_SINGLE, *full) and role_of(classes, n) == "online"
    ]
    best_base = max(base, key=lambda n: means[n]) if base else None
    sentences = []
    for family in ["baselines", *sorted(set(families) - {"baselines"})]:
        members = families.get(family)
        if not members:
            continue
        pool = base if family == "baselines" and base else members
        best = max(pool, key=lambda n: means[n])
        rank = int((means > means[best]).sum()) + 1
        others = [RANDOM, BEST_SINGLE] + ([best_base] if family != "baselines" else full)
        label = "the baselines' best bandit" if family == "baselines" else family
        sentences.append(
            f"**{family}**: {label} {best} averages utility {means[best]:.3f} over {trials} "
            f"trials (rank {rank} of {len(means)})"
            + _versus(means, best, [o for o in others if o])
            + "."
        )
    return sentences


def is_static(classes: Classes, learner: str) -> bool:
    """Whether ``learner`` is a static router (its class's role, or ``best_single``)."""
    return role_of(classes, learner) == "static"


def online_sentence(results: pd.DataFrame, classes: Classes) -> list[str]:
    """The sentence on why to route online: the best online learner against the best static
    router (``[]`` unless both ran; ``random`` and full-feedback references are neither).

    Where the results carry ``avg_utility_after`` (the rounds after a change in the
    stream), the comparison is made there too.
    """
    if "avg_utility" not in results:
        return []
    means = _means(results, "avg_utility")
    full = set(_full_feedback(classes, list(means.index)))
    static = [n for n in means.index if is_static(classes, n)]
    online = [
        n for n in means.index if role_of(classes, n) == "online" and n not in {RANDOM, *full}
    ]
    if not static or not online:
        return []
    trials = int(results.groupby("learner").size().max())
    best = max(online, key=lambda n: means[n])
    anchor, chosen_on = _best_static(results, static, means)
    gap = means[best] - means[anchor]
    if gap > 0:
        text = (
            f"**online vs static**: learning online beats every static router: {best} "
            f"averages utility {means[best]:.3f} over {trials} trials, {gap:+.3f} against "
            f"the best static router {anchor} ({means[anchor]:.3f})"
        )
    else:
        text = (
            f"**online vs static**: no online learner beats the best static router here: "
            f"{anchor} averages utility {means[anchor]:.3f} over {trials} "
            f"trials, the best online learner {best} {means[best]:.3f} ({gap:+.3f})"
        )
        if "avg_utility_after" not in results:
            text += "; a stream that does not change favours a router fitted on the train split"
    if "avg_utility_after" in results:
        after = _means(results, "avg_utility_after")
        if best in after.index and anchor in after.index:
            text += (
                f"; after the change in the stream, {best} {after[best]:.3f} against "
                f"{anchor} {after[anchor]:.3f} ({after[best] - after[anchor]:+.3f})"
            )
    return [f"{text}; the best static router is chosen {chosen_on}."]


def _best_static(results: pd.DataFrame, static: Sequence[str], means: pd.Series) -> tuple[str, str]:
    """The best static router and how it was chosen: by mean ``val_utility`` (the routers'
    own validation split) where static routers report one, else by the test mean."""
    if "val_utility" in results:
        val = results.groupby("learner")["val_utility"].mean().reindex(list(static)).dropna()
        if not val.empty:
            return str(val.idxmax()), "on validation"
    fallback = "on test (no static router reports a validation figure)"
    return max(static, key=lambda n: means[n]), fallback


def subset_sentences(results: pd.DataFrame) -> list[str]:
    """One sentence for a subset-routing run (mean ``avg_reward`` and ``feasible`` share)."""
    if not {"avg_reward", "feasible"} <= set(results):
        return []
    means = _means(results, "avg_reward")
    if means.empty:
        return []
    feasible = results.groupby("learner")["feasible"].mean().reindex(means.index).fillna(0.0)
    most = feasible[feasible >= feasible.max() - 1e-12].index
    best = max(most, key=lambda n: means[n])
    others = ", ".join(
        f"{n} ({means[n]:.3f}, feasible {feasible[n]:.0%})" for n in means.index if n != best
    )
    return [
        f"**subset routing**: of the routers feasible in the most trials, {best} collects "
        f"the most reward, "
        f"{means[best]:.3f} per round (feasible in {feasible[best]:.0%} of "
        f"trials)" + (f"; {others}" if others else "") + "."
    ]


def headline(runs: Sequence[tuple[pd.DataFrame, Classes]]) -> list[str]:
    """The opening lines for ``runs`` (each: its results and ``{learner: class}``)."""
    sentences: list[str] = []
    for results, classes in runs:
        sentences += online_sentence(results, classes)
        sentences += single_choice_sentences(results, classes)
        sentences += subset_sentences(results)
    if not sentences:
        return []
    return [
        OPENING,
        "",
        "Mean over trials; in brackets the other learner's mean and the difference.",
        "",
        *(f"- {s}" for s in sentences),
        "",
    ]


__all__ = [
    "OPENING",
    "Classes",
    "family_of",
    "headline",
    "is_static",
    "learner_classes",
    "online_sentence",
    "role_of",
    "single_choice_sentences",
    "subset_sentences",
]
