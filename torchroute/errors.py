"""The errors that mean "the user asked for something that cannot work".

Every error raised where input is checked (a config key, a flag, a table, a run folder, a
checkpoint, a decision log, an HTTP body) derives from :class:`UserError`. The command line
turns a :class:`UserError` into one line naming what was wrong and exits 2; any other
exception is a bug and keeps its traceback (exit 1).

The concrete classes keep their historical base (``ValueError`` for most), so code that
catches ``ValueError`` still catches them. They are defined here, one place for every part
(each stays importable from the module that raises it); the gateway's, serve's, the
scenario's and the ridge kernel's classes are still beside their code.
"""

from __future__ import annotations

import errno

__all__ = [
    "CaseTimeout",
    "CheckpointError",
    "ConfigError",
    "DecisionLogError",
    "EvaluateError",
    "GapConfigError",
    "InputError",
    "MultirunError",
    "NonFiniteError",
    "NotWritableError",
    "OptionError",
    "ResultsFileError",
    "RunFolderMissing",
    "SavedProblemError",
    "ScoreRangeError",
    "SectionError",
    "TableError",
    "UnreachableTargetError",
    "UntrustedTarget",
    "UserError",
    "is_user_error",
    "one_line",
]


class UserError(Exception):
    """Bad input from the user: a config key, flag, file, table, log or request.

    Subclasses name what was checked (``ConfigError``, ``TableError``, ...); the message is
    one line that names the key, flag, file or field and what was expected.
    """


class ConfigError(UserError, ValueError):
    """The experiment configuration asks for something impossible; names the key."""


class OptionError(UserError, ValueError):
    """An option's value out of its range or of the wrong kind: a hyper-parameter, a config
    value or a flag (``LinUCB: alpha must be a finite number >= 0, got -1``)."""


class InputError(UserError, ValueError):
    """Input data of the wrong shape or value: a context, a feedback, a request's field."""


class SectionError(UserError, ValueError):
    """A ``report_sections`` entry or ``--section`` name that names no section."""


class ScoreRangeError(InputError):
    """A feedback score outside the range its router takes (``[0, 1]``, or ``[0, N]`` for
    a subset router's set outcome)."""


# --------------------------------------------------------------- the errors of each part


class CheckpointError(UserError, ValueError):
    """A checkpoint cannot be used: unreadable, truncated, or from another run."""


class TableError(UserError, ValueError):
    """A routing table (or the file it came from) does not have the expected content."""


class DecisionLogError(TableError):
    """A decision log (or the file it came from) does not have the expected content."""


class NotWritableError(UserError, ValueError):
    """A folder that a command must write into cannot be written."""


class ResultsFileError(UserError, ValueError):
    """A results or curves file of a run is unreadable, truncated or has bad cells."""


class NonFiniteError(UserError, FloatingPointError):
    """A learner's state or the run's metrics became NaN or infinite."""


class MultirunError(UserError, ValueError):
    """``-m/--multirun`` was given: the message is the ``torchroute sweep`` equivalent."""


class GapConfigError(UserError, ValueError):
    """The ``gap`` section of a config is missing or holds a bad value (named as ``gap.<key>``)."""


class EvaluateError(UserError, ValueError):
    """A bad ``torchroute evaluate`` option; the message names the key."""


class SavedProblemError(UserError, ValueError):
    """A ``problem.pt`` that does not hold what this torchroute needs (an older format)."""


class UntrustedTarget(ConfigError):
    """A ``_target_`` that does not resolve to one of the buildable objects."""


class RunFolderMissing(UserError, FileNotFoundError):
    """A path that holds no run: no ``config.yaml`` there."""


class UnreachableTargetError(UserError, ValueError):
    """The target box misses every cost vector the routing policies can reach."""


class CaseTimeout(TimeoutError):
    """A run of a case went past its time limit."""


#: ``errno`` values of an ``OSError`` that are a condition of the user's machine or paths
#: (full disk or quota, read-only file system, address in use or not available), not a bug
_USER_ERRNOS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.EADDRINUSE,
    errno.EADDRNOTAVAIL,
}


def is_user_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the user's to fix, printed as one line: a
    :class:`~torchroute.errors.UserError`, a Hydra or OmegaConf config error, or a file-system
    error (a missing, existing or wrong-kind path, a refused permission, a full or read-only
    disk, a port in use). Anything else is a bug and keeps its traceback."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(exc, (UserError, HydraException, OmegaConfBaseException)):
        return True
    paths = (
        FileNotFoundError,
        FileExistsError,
        NotADirectoryError,
        IsADirectoryError,
        PermissionError,
    )
    return isinstance(exc, paths) or (isinstance(exc, OSError) and exc.errno in _USER_ERRNOS)


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line; a Hydra composition error gets its cause too
    (``Could not override 'trainer.bogus'. To append ... (Key 'bogus' is not in struct)``)."""
    from hydra.errors import ConfigCompositionException

    message = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    cause = exc.__cause__
    if isinstance(exc, ConfigCompositionException) and cause is not None and str(cause).strip():
        message += f" ({str(cause).splitlines()[0].strip()})"
    return message or type(exc).__name__
