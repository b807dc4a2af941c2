"""The errors that mean "the user asked for something that cannot work".

Every error raised where input is checked (a config key, a flag, a table, a run folder, a
checkpoint, a decision log, an HTTP body) derives from :class:`UserError`. The command line
turns a :class:`UserError` into one line naming what was wrong and exits 2; any other
exception is a bug and keeps its traceback (exit 1).

The concrete classes keep their historical base (``ValueError`` for most), so code that
catches ``ValueError`` still catches them. They are defined here, one place for every part
(each stays importable from the module that raises it), the gateway's and serve's
internal signals (a failed backend call, a spend over its cap) included.
"""

from __future__ import annotations

import errno

__all__ = [
    "BackendsError",
    "BodyError",
    "BudgetError",
    "CallFailed",
    "CaseTimeout",
    "CheckpointError",
    "ClientError",
    "ConfigError",
    "ConnectError",
    "DecisionLogError",
    "DuplicateModelError",
    "EvaluateError",
    "FeedbackOptionError",
    "GapConfigError",
    "GatewayArgsError",
    "GatewayError",
    "HTTPError",
    "InputError",
    "KernelUnavailableError",
    "KeysError",
    "LimitError",
    "LogError",
    "MultirunError",
    "NonFiniteError",
    "NotWritableError",
    "OptionError",
    "ProtocolError",
    "ResultsFileError",
    "RunFolderMissing",
    "SavedProblemError",
    "ScenarioError",
    "ScoreRangeError",
    "SectionError",
    "ServeArgsError",
    "StateInUse",
    "StoreError",
    "TableError",
    "UnknownModelError",
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


# --- the errors of the ridge kernel, envs, serve and the gateway (importable from there too)


class KernelUnavailableError(UserError, ValueError):
    """The fused kernel could not be built or loaded (the message says why, in one line)."""


class ScenarioError(UserError, ValueError):
    """A scenario event with a missing, unknown or out-of-range key; names the key."""


class FeedbackOptionError(UserError, ValueError):
    """A ``feedback`` option with an unknown key or a value out of range; names the key."""


class LimitError(UserError, ValueError):
    """A request over a :class:`Limits` bound; ``status`` is 413 or 422."""

    def __init__(self, message: str, status: int = 413) -> None:
        super().__init__(message)
        self.status = status


class LogError(UserError, ValueError):
    """A decision log that cannot be used: another configuration, or unreadable."""


class StoreError(RuntimeError):
    """The decision log cannot be written (read-only folder, full disk): nothing changed."""


class StateInUse(UserError, RuntimeError):
    """The state is locked by another process (one line naming the folder and the pid)."""


class ServeArgsError(UserError, ValueError):
    """A flag of ``torchroute serve`` or ``gateway`` that cannot work; nothing was started,
    written or deleted."""


class UnknownModelError(UserError, ValueError):
    """A model name the router does not serve."""


class DuplicateModelError(UserError, ValueError):
    """A model name the router already serves."""


class GatewayArgsError(UserError, ValueError):
    """A flag of ``torchroute gateway`` that cannot work; nothing was started."""


class HTTPError(Exception):
    """A backend call that failed below HTTP (base of the errors of this module)."""


class ConnectError(HTTPError):
    """No connection to the backend (refused, name not found, TLS handshake failed)."""


class ProtocolError(HTTPError):
    """The connection broke mid-call, or the backend's answer is not HTTP/1.1."""


class BodyError(ValueError):
    """A body that is not standard JSON text (a 400): one line naming the field."""


class CallFailed(Exception):
    """A backend call that gave no usable answer; ``outcome`` names why (logged)."""

    def __init__(self, outcome: str, detail: str) -> None:
        super().__init__(detail)
        self.outcome = outcome


class ClientError(Exception):
    """The backend refused the request itself (a 4xx not in ``BACKEND_FAULTS``): no
    fallback."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"the backend answered {status}")
        self.status, self.body = status, body


class GatewayError(Exception):
    """An error answered to the client: ``status`` and a one-line message."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


class KeysError(UserError, ValueError):
    """A keys file that cannot be used (one line naming the file and the key)."""


class BudgetError(Exception):
    """A request that would take its key over its cap (answered 429, nothing called)."""


class BackendsError(UserError, ValueError):
    """A backends file that cannot be used (one line naming the file, model and key)."""


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
