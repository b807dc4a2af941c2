"""The errors that mean "the user asked for something that cannot work".

Every error raised where input is checked (a config key, a flag, a table, a run folder, a
checkpoint, a decision log, an HTTP body) derives from :class:`UserError`. The command line
turns a :class:`UserError` into one line naming what was wrong and exits 2; any other
exception is a bug and keeps its traceback (exit 1).

The concrete classes keep their historical base (``ValueError`` for most), so code that
catches ``ValueError`` still catches them.
"""

from __future__ import annotations

__all__ = ["InputError", "OptionError", "ScoreRangeError", "UserError"]


class UserError(Exception):
    """Bad input from the user: a config key, flag, file, table, log or request.

    Subclasses name what was checked (``ConfigError``, ``TableError``, ...); the message is
    one line that names the key, flag, file or field and what was expected.
    """


class OptionError(UserError, ValueError):
    """An option's value out of its range or of the wrong kind: a hyper-parameter, a config
    value or a flag (``LinUCB: alpha must be a finite number >= 0, got -1``)."""


class InputError(UserError, ValueError):
    """Input data of the wrong shape or value: a context, a feedback, a request's field."""


class ScoreRangeError(InputError):
    """A feedback score outside the range its router takes (``[0, 1]``, or ``[0, N]`` for
    a subset router's set outcome)."""
