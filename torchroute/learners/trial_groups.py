"""Several learners side by side, each owning some of the trials of one batched run.

A learner's hyper-parameters are one value for all its trials (a discount ``gamma``, a
``window``, a base router). :class:`TrialGroups` runs learners built with different values
as one learner of ``R`` trials: group ``g`` owns the trials ``index[g]`` and sees only
their rows of every ``[R, ...]`` tensor of the round (contexts, decisions, feedback); the
groups' decisions, update metrics and result columns are put back in trial order. It is
how a run plays the candidates of a choice on validation as more trials of one simulation
(:mod:`torchroute.run.choose_on_validation`), and how the test run plays each trial's
chosen values when the trials chose differently.

The groups are stepped one after the other each round (a short loop over the candidates,
never over trials or arms); each group's step is batched over its trials. Each group's
rows of a round's context are cut once: ``update`` hands a group the very context object
its ``act`` saw (as the loop does for a plain learner), so a group that keeps a function of
the round's context for its update (:class:`~torchroute.learners.round_memo.RoundMemo`)
computes it once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from torchroute.functional.random import Source, TrialRNG
from torchroute.learners.base import Learner
from torchroute.learners.round_memo import RoundMemo
from torchroute.types import Context, Decision, Feedback

T = TypeVar("T", Context, Decision, Feedback)

#: the name of group ``g``'s trial index among the buffers (and checkpoint entries)
_INDEX = "index_{}"

#: the class attributes a group of learners takes from its learners (all of one class)
_CLASS_TRAITS = (
    "dim",
    "feedback",
    "protocol",
    "device_tolerance",
    "reads_groups",
    "samples_from_probs",
    "learns_online",
    "role",
    "family",
    "starts_warm",
)


class TrialGroups(Learner):
    """The learners ``groups``, learner ``g`` playing the trials ``index[g]`` of ``R``.

    Args:
        groups: ``G`` learners of one class; learner ``g`` was built for
            ``len(index[g])`` trials.
        index: ``G`` long tensors ``[R_g]``, the trials (positions in ``0..R-1``) of each
            learner, in that learner's trial order; together every trial exactly once.

    The class attributes (:attr:`Learner.feedback`, :attr:`Learner.role`, ...) are the
    groups' own. ``learns_only_observed`` holds when it holds for every group.

    Shapes:
        ``act``: ``x [R, B, d]`` -> ``probs [R, B, K]``, ``action [R, B]`` (each trial's
        row from the learner that owns it); ``update`` metrics and ``result_columns``:
        ``{name: [R, ...]}`` for the names every group reports.

    Randomness: with per-trial streams (:class:`~torchroute.functional.random.TrialRNG`)
    each group draws from its own trials' streams, and the run's streams continue from the
    furthest of them (the same as the plain learner's when the groups make equal numbers of
    draws, as learners of one class do); with a shared generator the groups draw from it
    in turn.
    """

    def __init__(self, groups: Sequence[Learner], index: Sequence[Tensor]) -> None:
        if not groups or len(groups) != len(index):
            raise ValueError("TrialGroups needs one trial index per learner, and a learner")
        kinds = {type(g) for g in groups}
        if len(kinds) != 1:
            raise ValueError(
                f"TrialGroups: learners of one class, got {sorted(k.__name__ for k in kinds)}"
            )
        positions = torch.cat([torch.as_tensor(i, dtype=torch.long).cpu() for i in index])
        total = positions.numel()
        if not torch.equal(positions.sort().values, torch.arange(total)):
            raise ValueError("TrialGroups: the groups' trials must cover 0..R-1 once each")
        for g, (learner, idx) in enumerate(zip(groups, index)):
            if learner.num_trials != len(idx):
                raise ValueError(
                    f"TrialGroups: learner {g} holds {learner.num_trials} trials, its index "
                    f"{len(idx)}"
                )
        first = groups[0]
        super().__init__(total, first.num_arms)
        for trait in _CLASS_TRAITS:
            setattr(self, trait, getattr(first, trait))
        self.learns_only_observed = all(g.learns_only_observed for g in groups)
        self.groups = nn.ModuleList(groups)
        device = first.rounds.device
        for g, idx in enumerate(index):
            index_g = torch.as_tensor(idx, dtype=torch.long).to(device)
            self.register_buffer(_INDEX.format(g), index_g)
        self.rounds = self.rounds.to(device)
        # the wrapper of ``act`` restricts to the available arms: each group does it for
        # its own trials, so the composite never restricts (nor draws) a second time
        self.__dict__["_restricting"] = True
        # each group's rows of the round's context, cut once for its act and its update
        self._parts: RoundMemo[list[Context]] = RoundMemo()

    def _indices(self) -> list[Tensor]:
        return [getattr(self, _INDEX.format(g)) for g in range(len(self.groups))]

    @staticmethod
    def saved_group(state: Mapping[str, Any], trial: int) -> tuple[dict[str, Any], int, int]:
        """The entries of the group that played ``trial`` in ``state`` (a saved
        ``state_dict`` of a :class:`TrialGroups`), keyed as that group's own ``state_dict``,
        with the trial's position among the group's trials and their number:
        ``(entries, position, R_g)``.

        Raises:
            LookupError: no group's trial index holds ``trial``.
        """
        g = 0
        while _INDEX.format(g) in state:
            index = torch.as_tensor(state[_INDEX.format(g)])
            hits = (index == trial).nonzero()
            if len(hits):
                prefix = f"groups.{g}."
                own = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
                return own, int(hits[0, 0]), len(index)
            g += 1
        raise LookupError(f"no group of its {g} holds trial {trial}")

    def _contexts(self, context: Context) -> list[Context]:
        """Each group's rows of ``context``, the same objects for a round's ``act`` and
        ``update`` (a new context, or indices moved since, cuts them again)."""
        indices = self._indices()
        stamp = tuple((i.device, i.data_ptr(), i._version) for i in indices)
        return self._parts.get(context, lambda: [take(context, i) for i in indices], stamp)

    def act(self, context: Context, generator: Source = None) -> Decision:
        """Each group's decision on its trials, in trial order (see the class)."""
        self._check_context(context)
        parts = []
        streams = []
        for learner, idx, sub in zip(self.groups, self._indices(), self._contexts(context)):
            source = _select_source(generator, idx)
            parts.append(learner.act(sub, source))
            streams.append(source)
        _advance(generator, streams)
        return _gather(parts, self._indices(), self.num_trials)

    def update(
        self, context: Context, decision: Decision, feedback: Feedback, generator: Source = None
    ) -> dict[str, Tensor]:
        """Each group learns from its trials' rows; the metrics every group reports, ``[R]``."""
        self._check_context(context)
        self._check_feedback(context, feedback)
        stats = []
        streams = []
        for learner, idx, sub in zip(self.groups, self._indices(), self._contexts(context)):
            source = _select_source(generator, idx)
            part = (sub, take(decision, idx), take(feedback, idx))
            stats.append(learner.update(*part, source))
            streams.append(source)
        _advance(generator, streams)
        self._tick(context)
        return _gather_columns(stats, self._indices(), self.num_trials)

    def result_columns(self) -> dict[str, Tensor]:
        """The groups' result columns (the names every group reports), ``{name: [R]}``."""
        columns = [learner.result_columns() for learner in self.groups]
        return _gather_columns(columns, self._indices(), self.num_trials)


def take(part: T, index: Tensor) -> T:
    """``part`` (a :class:`Context`, :class:`Decision` or :class:`Feedback`) with every
    tensor field cut to the trials ``index [n]`` (its leading dimension)."""
    changes = {}
    for f in fields(part):
        value = getattr(part, f.name)
        if isinstance(value, Tensor):
            changes[f.name] = value.index_select(0, index.to(value.device))
    return replace(part, **changes)


def _select_source(generator: Source, index: Tensor) -> Source:
    """The streams of the trials ``index`` (a :class:`TrialRNG`), or the shared generator."""
    return generator.select(index) if isinstance(generator, TrialRNG) else generator


def _advance(generator: Source, used: list[Source]) -> None:
    """Move the run's per-trial streams past every draw a group made."""
    if isinstance(generator, TrialRNG):
        generator.counter = max(s.counter for s in used if isinstance(s, TrialRNG))


def _gather(parts: list[Decision], index: list[Tensor], total: int) -> Decision:
    """One decision ``[R, ...]`` from the groups' ``[R_g, ...]`` ones."""
    values: dict[str, Any] = {}
    for f in fields(Decision):
        found = [getattr(p, f.name) for p in parts]
        if all(isinstance(v, Tensor) for v in found):
            values[f.name] = _scatter(found, index, total)
        else:
            values[f.name] = None
    return Decision(**values)


def _gather_columns(parts: list[dict[str, Tensor]], index: list[Tensor], total: int):
    """``{name: [R, ...]}`` of the names every part has (``[R_g, ...]`` each)."""
    names = [k for k in parts[0] if all(k in p for p in parts[1:])]
    return {k: _scatter([p[k] for p in parts], index, total) for k in names}


def _scatter(values: list[Tensor], index: list[Tensor], total: int) -> Tensor:
    first = values[0]
    out = first.new_empty((total, *first.shape[1:]))
    for value, idx in zip(values, index):
        out.index_copy_(0, idx.to(out.device), value.to(out.dtype))
    return out


__all__ = ["TrialGroups", "take"]
