"""The ``choose_on_validation`` option of a run: how a list-valued change option is chosen
from the candidates' validation utilities.

::

    choose_on_validation:
      per: regime                 # rho (default) | regime
      rounds: test                # split (default) | test: the validation stream's length
      seeds: 2                    # replay the run's first 2 seeds only (default: all)
      as_baseline: [base]         # static-router keys chosen as the report's baseline
      prefer_first: [lam, alpha]  # keys whose first-listed value stays without evidence
      margin: 1                   # how many standard errors count as evidence (default 1)

- ``per``: the trials one choice is made for. ``rho`` (the default): each ``rho``, its
  seeds averaged. ``regime``: each cost regime of the run's ``report_regimes`` rule (the
  report's low / medium / high), its rhos and seeds averaged: one choice per regime, as the
  report chooses its baseline static router. Every trial of a regime then runs the same
  values; the validation rows are the same for every trial, so pooling rhos takes away the
  part of the noise that differs between neighbouring rhos, not the rows' own.
- ``rounds``: how many rounds the validation stream has. ``split`` (the default): the
  validation rows once, ``min(T, n_val)`` rounds (``T`` the test stream's). ``test``:
  ``T`` rounds, the validation rows replayed in passes, each pass a new order from the
  trial's seed: a scenario's change then falls on the same round as on test and leaves as
  many rounds after it, so how fast a candidate recovers counts as it will on test (with
  a validation split much shorter than the test stream, the rounds after the change are
  too few to tell a learner that adapts from one that does not). A learner sees each
  validation row about ``T / n_val`` times: options that let it memorise rows (a full
  linear model on the embedding with a small prior) gain from the repeats.
- ``seeds``: replay only the trials of the run's first ``seeds`` seeds (of every ``rho``);
  the choice of each group (``rho`` or regime) then applies to all its trials. Every
  trial replays the same validation rows, in its own order, so more seeds average the
  order's noise, not the rows': a few seeds cost a fraction of the replay and change
  little, where the replay is long (a large validation split) or the learner costly.
- ``as_baseline``: keys whose values are static routers (a residual learner's ``base``,
  ``static_refit``'s ``base``), chosen as the report chooses its baseline: per group, the
  router with the highest mean of its *own* validation utility (``val_utility``, the mean
  utility of its choices on the validation split at each trial's ``rho``, recorded by the
  router itself) over the group's trials, the first listed on a tie. No replay is needed
  for them: a residual learner that learns nothing makes its base router's choices, so
  its base is the static router a user would deploy in that regime. The other list keys
  are then replayed with that value only (a candidate with another value is not run for
  the group's trials). A key is a bare option name (every learner's ``base``) or
  ``<learner>.<key>`` (``static_refit.base``: that learner's only).
- ``prefer_first``: keys (of any learner that has them in its lists) whose values are
  ordered by preference, the first the one to keep without evidence (a residual learner's
  largest ``lam``, its smallest ``alpha``). A candidate is *eligible* when its validation
  utility is within ``margin`` standard errors of the best candidate's (one by default:
  the one-standard-error rule of model selection); among the eligible the choice takes
  the earliest values of the ``prefer_first`` keys, in their order, then the highest
  validation utility. The standard error is that of the paired difference to the best
  candidate, from ``J = 20`` blocks of the validation stream: ``d_j`` the difference of
  the two candidates' mean utility in block ``j``, averaged over the group's trials (the
  candidates replay the same rows in the same order, so the difference is paired), and
  ``SE = s / sqrt(J)`` with ``s^2 = sum_j (d_{j+1} - d_j)^2 / (2 (J - 1))``, the variance
  of the blocks from their successive differences. On a stream without change it
  estimates what the blocks' standard deviation does; with a scenario it leaves out what
  the change itself does to the difference (nothing before the change, a gap in the
  blocks after it that closes as the candidates adapt), which the blocks' standard
  deviation counts as noise: with the deviation, an option that recovers clearly after a
  drift measured 1.2-2.6 standard errors ahead on the RouterBench drift, with successive
  differences 1.5-4.5.
- ``margin``: the number of standard errors within which a candidate is eligible (a
  number > 0; default 1, the one-standard-error rule). The best of many candidates is
  ahead of the others by about a standard error or more on noise alone: a larger margin
  keeps a first-listed value against more candidates that gain nothing.

Without the option (or with ``per: rho`` and no ``prefer_first``) the choice is the one of
before: per ``rho`` the highest mean validation utility, the first in list order on a tie.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchroute.errors import ConfigError

#: the groups one choice can be made for
PER = ("rho", "regime")
#: the lengths of the validation stream
ROUNDS = ("split", "test")
#: blocks of the validation stream the standard error is taken over
BLOCKS = 20

KEY = "choose_on_validation"


@dataclass(frozen=True)
class ChoiceRule:
    """How candidates are chosen (the module docstring).

    Attributes:
        per: ``"rho"`` or ``"regime"``.
        prefer_first: keys whose first-listed value is kept unless another is better by
            more than ``margin`` standard errors.
        as_baseline: keys whose values are static routers, chosen by the routers' own
            validation utility (no replay).
        rounds: ``"split"`` or ``"test"``, the validation stream's length.
        seeds: replay the run's first ``seeds`` seeds only (``None``: all).
        margin: the standard errors within which a candidate is eligible (> 0).
    """

    per: str = "rho"
    prefer_first: tuple[str, ...] = ()
    as_baseline: tuple[str, ...] = ()
    rounds: str = "split"
    seeds: int | None = None
    margin: float = 1.0

    @property
    def needs_blocks(self) -> bool:
        """Whether the choice needs the validation stream's per-block utilities."""
        return bool(self.prefer_first)


def check_choice_rule(value: Any) -> ChoiceRule:
    """``value`` (the run's ``choose_on_validation``; ``None``: the default rule) as a
    :class:`ChoiceRule`, or a one-line :class:`ConfigError` naming the key."""
    if value is None:
        return ChoiceRule()
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{KEY} must be a mapping {{per: rho|regime, rounds: split|test, seeds: n, "
            f"as_baseline: [keys], prefer_first: [keys], margin: x}}, got {value!r}"
        )
    known = ("per", "rounds", "seeds", "as_baseline", "prefer_first", "margin")
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ConfigError(f"{KEY} has unknown keys {unknown}; known: {', '.join(known)}")
    seeds = value.get("seeds")
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1):
        raise ConfigError(f"{KEY}.seeds must be an integer >= 1 (or null: all), got {seeds!r}")
    margin = value.get("margin", 1.0)
    if (
        isinstance(margin, bool)
        or not isinstance(margin, (int, float))
        or not math.isfinite(margin)
        or margin <= 0
    ):
        raise ConfigError(f"{KEY}.margin must be a number > 0 (standard errors), got {margin!r}")
    rounds = value.get("rounds", "split")
    if rounds not in ROUNDS:
        raise ConfigError(f"{KEY}.rounds must be one of {list(ROUNDS)}, got {rounds!r}")
    per = value.get("per", "rho")
    if per not in PER:
        raise ConfigError(f"{KEY}.per must be one of {list(PER)}, got {per!r}")
    lists = {}
    for name in ("prefer_first", "as_baseline"):
        keys = value.get(name) or ()
        if isinstance(keys, str) or not all(isinstance(k, str) and k for k in keys):
            raise ConfigError(f"{KEY}.{name} must be a list of option names, got {keys!r}")
        lists[name] = tuple(keys)
    both = sorted(set(lists["prefer_first"]) & set(lists["as_baseline"]))
    if both:
        raise ConfigError(
            f"{KEY}: {both} listed in both as_baseline and prefer_first; a key is chosen one way"
        )
    return ChoiceRule(per=str(per), rounds=str(rounds), seeds=seeds, margin=float(margin), **lists)


__all__ = ["BLOCKS", "KEY", "PER", "ROUNDS", "ChoiceRule", "check_choice_rule"]
