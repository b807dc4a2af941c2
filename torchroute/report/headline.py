"""The report's opening: one sentence per learner family saying what the numbers show.

Learners are sorted into families by the class their config builds (``learners.<name>.
_target_`` in the run folder's ``config.yaml``, read as text, never instantiated): CABS
(``CABSD``, ``CABSC``), HPG (``HPG``, ``PFHPG``), subset routing (a results frame with the
subset columns ``avg_reward`` and ``feasible``) and the single-choice baselines (every other
learner). Each sentence compares the family's best learner (by mean utility, or mean reward
for subset routing) with the uniform-random router and, where they ran, the best fixed
model (``best_single``) and the best baseline bandit; a full-feedback learner
(``FullFeedback*``, which sees every arm's reward) is an upper reference, named in the
baselines' sentence but never their best bandit. Every number comes from the results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

#: family name -> class names (the last dotted part of ``_target_``, before ``.from_problem``)
FAMILIES: dict[str, tuple[str, ...]] = {
    "CABS": ("CABSD", "CABSC"),
    "HPG": ("HPG", "PFHPG"),
}
#: learners every comparison is made against, when they ran
RANDOM, BEST_SINGLE = "random", "best_single"
#: the heading the opening starts with
OPENING = "## What the numbers show"


def learner_classes(run_dir: str | Path) -> dict[str, str]:
    """``{learner: class name}`` from ``run_dir/config.yaml`` (empty when it is missing)."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return {}
    try:
        learners = OmegaConf.to_container(OmegaConf.load(path)).get("learners") or {}
    except Exception:  # an unreadable config only costs the family grouping
        return {}
    out = {}
    for name, node in learners.items():
        target = str(node.get("_target_", "")) if isinstance(node, Mapping) else ""
        parts = [p for p in target.split(".") if p != "from_problem"]
        out[str(name)] = parts[-1] if parts else ""
    return out


def family_of(classes: Mapping[str, str], learner: str) -> str:
    """The family of ``learner`` (``"baselines"`` when its class is in no family)."""
    cls = classes.get(learner, "")
    for family, members in FAMILIES.items():
        if cls in members:
            return family
    return "baselines"


def _means(results: pd.DataFrame, column: str) -> pd.Series:
    return results.groupby("learner")[column].mean().dropna()


def _versus(means: pd.Series, best: str, others: Sequence[str]) -> str:
    parts = [
        f"{other} ({means[other]:.3f}, {means[best] - means[other]:+.3f})"
        for other in others
        if other in means.index and other != best
    ]
    return f"; against {', '.join(parts)}" if parts else ""


def single_choice_sentences(results: pd.DataFrame, classes: Mapping[str, str]) -> list[str]:
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
    full = [n for n in means.index if classes.get(n, "").startswith("FullFeedback")]
    base = [n for n in families.get("baselines", []) if n not in (RANDOM, BEST_SINGLE, *full)]
    best_base = max(base, key=lambda n: means[n]) if base else None
    sentences = []
    for family in ["baselines", *FAMILIES]:
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


def static_classes() -> frozenset[str]:
    """The names of the learner classes that say they do not learn online
    (:attr:`~torchroute.learners.base.Learner.learns_online` false), the random router aside:
    the static routers reports compare online learners against."""
    import importlib
    import pkgutil

    import torchroute.learners
    from torchroute.learners.base import Learner

    for module in pkgutil.iter_modules(torchroute.learners.__path__):  # every learner module
        importlib.import_module(f"torchroute.learners.{module.name}")

    found, todo = set(), [Learner]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if not cls.learns_online and cls.__name__ != "RandomRouter":
            found.add(cls.__name__)
    return frozenset(found)


def is_static(classes: Mapping[str, str], learner: str) -> bool:
    """Whether ``learner`` is a static router (its class in :func:`static_classes`, or
    ``best_single``)."""
    return learner == BEST_SINGLE or classes.get(learner, "") in static_classes()


def online_sentence(results: pd.DataFrame, classes: Mapping[str, str]) -> list[str]:
    """The sentence on why to route online: the best online learner against the best static
    router (``[]`` unless both ran; ``random`` and full-feedback references are neither).

    Where the results carry ``avg_utility_after`` (the rounds after a change in the
    stream), the comparison is made there too.
    """
    if "avg_utility" not in results:
        return []
    means = _means(results, "avg_utility")
    full = {n for n in means.index if classes.get(n, "").startswith("FullFeedback")}
    static = [n for n in means.index if is_static(classes, n)]
    online = [n for n in means.index if n not in {RANDOM, *full, *static}]
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


def headline(runs: Sequence[tuple[pd.DataFrame, Mapping[str, str]]]) -> list[str]:
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
    "FAMILIES",
    "OPENING",
    "family_of",
    "headline",
    "is_static",
    "learner_classes",
    "online_sentence",
    "single_choice_sentences",
    "subset_sentences",
]
