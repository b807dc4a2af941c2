"""What one trial of a run chose on the validation split, read back for serving.

A learner whose config lists values of its
:attr:`~torchroute.learners.Learner.chosen_on_validation` options (``base: [...]``,
``lam: [...]``) is built, per trial of the test run, with the candidate that trial's
``rho`` chose (:mod:`torchroute.run.choose_on_validation`); when the trials chose
differently, the run's learner is a :class:`~torchroute.learners.trial_groups.TrialGroups`
of one learner per chosen candidate, and so is its checkpoint. Reading one trial back takes
both steps again: :func:`chosen_node` gives the learner config of the trial's candidate
(from ``runs/<learner>/choice_on_validation.csv``, the table of every candidate per
``rho`` with the chosen one marked), :func:`played_state` the checkpoint entries of the
group that played the trial.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from torchroute.checkpoint import CheckpointError
from torchroute.errors import ConfigError
from torchroute.learners.trial_groups import TrialGroups
from torchroute.run.choose_on_validation import CHOICE_FILE, candidates_of


def chosen_node(node: dict[str, Any], name: str, run_dir: Path, rho: float) -> dict[str, Any]:
    """``node`` (learner ``name``'s config) with each list-valued option set to the value
    the trials of ``rho`` chose on validation; ``node`` itself when it lists none.

    Raises:
        ConfigError: one line naming ``runs/<name>/choice_on_validation.csv``: the file is
            missing or unreadable, or it marks no single candidate of the config for
            ``rho``.
    """
    candidates = candidates_of(node, name)
    if candidates is None:
        return node
    path = Path(run_dir) / "runs" / name / CHOICE_FILE
    try:
        table = pd.read_csv(path)
        rows = table[(table["rho"].astype(float) == float(rho)) & table["chosen"].astype(bool)]
        picked = [int(c) for c in rows["candidate"].unique()]
    except (OSError, ValueError, KeyError, pd.errors.ParserError) as exc:
        raise ConfigError(
            f"{path}: the values {name} chose on validation cannot be read ({exc}); "
            "it is written by the run of a learner with list-valued options"
        ) from None
    if len(picked) != 1 or not 0 <= picked[0] < len(candidates.points):
        raise ConfigError(
            f"{path}: expected one chosen candidate of the {len(candidates.points)} for "
            f"rho={rho:g}, found {picked}"
        )
    return candidates.node(node, picked[0])


def played_state(
    payload: dict[str, Any], trial: int, size: int, path: Path, learner_class: str
) -> tuple[dict[str, Any], int, int]:
    """The checkpoint ``payload`` of the learner that played ``trial`` (its position among
    the ``size`` trials of the checkpoint): ``(payload, position, trials)``, the payload
    itself for a plain learner; for a :class:`~torchroute.learners.trial_groups.TrialGroups`
    the entries of the group that played the trial
    (:meth:`~torchroute.learners.trial_groups.TrialGroups.saved_group`), its position among
    that group's trials and their number, under ``learner_class`` (the class of the learner
    built for the trial: the groups are all of one class, and
    :func:`~torchroute.run.trained.load_trial` checks that the entries fit it).

    Raises:
        CheckpointError: a group checkpoint in which no group holds the trial.
    """
    if payload.get("learner_class") != TrialGroups.__name__:
        return payload, trial, size
    try:
        own, position, trials = TrialGroups.saved_group(payload["learner"], trial)
    except LookupError as exc:
        raise CheckpointError(f"checkpoint {path}: {exc}") from None
    return {**payload, "learner": own, "learner_class": learner_class}, position, trials


__all__ = ["chosen_node", "played_state"]
