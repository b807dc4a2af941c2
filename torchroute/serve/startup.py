"""Checks of ``torchroute serve`` that run before anything heavy loads (the encoder, the run).

The run is opened once (:class:`~torchroute.run.folder.RunFolder`) and the trial checked by
the serve API (:func:`~torchroute.serve.trial.plan_trial`: the learner, rho and seed, the
state file, ``--fresh`` over an existing state only with ``--overwrite-state``, the
checkpoint). Serve itself checks only its own flags, each problem a one-line
:class:`ServeArgsError` naming the flag: the router options and limits, the token rules (a
token is made when none is given, unless ``--insecure-no-auth`` on loopback), the bind
address and allowed hosts (:func:`~torchroute.serve.security.host_policy`), the token file
beside the state, and the port (the socket is bound here and handed to the server, so
nobody takes it in between); then the trial's checkpoint is read and checked. Nothing is
written or deleted here."""

from __future__ import annotations

import os
import re
import secrets
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchroute.run.folder import RunFolder
from torchroute.serve.flags import pacing_options, router_options, server_limits
from torchroute.serve.limits import Limits
from torchroute.serve.log import log_path
from torchroute.serve.security import TOKEN_ENV, check_token, host_policy
from torchroute.serve.trial import (
    RouterOptions,
    ServeArgsError,
    TrialPlan,
    check_checkpoint,
    plan_trial,
    state_files,
    trial_state,
)

__all__ = [
    "ServeArgsError",
    "ServePlan",
    "bind",
    "plan_serve",
    "read_token",
    "state_files",
    "token_path",
    "trusted_prefixes",
    "write_token",
]


@dataclass
class ServePlan:
    """What the checks resolved: the trial (:class:`~torchroute.serve.trial.TrialPlan`), the
    token and its file, the allowed hosts, the limits and router options, the bound socket,
    the spend target and the pacer's step (``pacing``: ``--budget``, ``--budget-eta``)."""

    trial: TrialPlan
    token: str | None
    allowed_hosts: tuple[str, ...]
    sock: socket.socket
    limits: Limits
    options: RouterOptions
    token_file: Path | None = None
    insecure: bool = False
    pacing: tuple[float, float] | None = None


#: a ``--trust`` value: a dotted module path, optionally ending in a dot
_MODULE_PREFIX = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\.?$")


def trusted_prefixes(values: Any) -> tuple[str, ...]:
    """The ``--trust`` values as module prefixes (``my_routing`` -> ``my_routing.``).

    Raises:
        ServeArgsError: a value that is no dotted module path (``""``, ``my routing``,
            ``a..b``).
    """
    prefixes = []
    for value in values or ():
        if not isinstance(value, str) or not _MODULE_PREFIX.match(value):
            raise ServeArgsError(
                f"--trust {value!r}: expected a plug-in package's module path, such as "
                "my_routing or my_routing.learners"
            )
        prefixes.append(value if value.endswith(".") else value + ".")
    return tuple(prefixes)


def check_port(port: int) -> None:
    """``port`` is a TCP port number (``0``: any free one)."""
    if not 0 <= port <= 65535:
        raise ServeArgsError(f"--port must be in 0..65535, got {port}")


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (one-line errors for a bad or busy port).

    Its connections send without delay (``TCP_NODELAY``): the protocol is named, so that
    the event loop sets the option on every connection it accepts, and the listener has it
    too. Without it, a response's status line and its body go out as two small writes and
    the second waits for the client's delayed acknowledgement: about 40 ms per call on a
    kept-alive connection, what every HTTP client library uses.
    """
    check_port(port)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno in (98, 48):  # EADDRINUSE (Linux, macOS)
            raise ServeArgsError(f"--port {port} is in use on {host}; pick another") from None
        raise ServeArgsError(f"--host {host} --port {port} cannot be bound: {exc}") from None
    sock.set_inheritable(True)
    return sock


def export_state(args: Any) -> Path:
    """The decision log ``serve --export-log`` reads (checked; nothing written)."""
    folder = RunFolder(Path(args.run_dir), trusted_prefixes(args.trust))
    *_, state = trial_state(folder, args.learner, args.rho, args.seed, args.state)
    if not log_path(state).is_file():
        raise ServeArgsError(f"no decision log {log_path(state)} to export (see --state)")
    return log_path(state)


def plan_serve(args: Any) -> ServePlan:
    """Check the ``serve`` flags in ``args`` (argparse namespace), then bind the port.

    Raises:
        ServeArgsError: the first problem found, before anything is loaded or written.
    """
    options = router_options(args)
    pacing = pacing_options(args)
    limits = server_limits(args, max_batch=args.max_batch)
    if args.max_pending < args.max_batch:
        raise ServeArgsError(
            f"--max-pending {args.max_pending} is below --max-batch {args.max_batch}"
        )
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    where = "--token" if args.token is not None else TOKEN_ENV
    check_token(token, where)
    insecure = bool(args.insecure_no_auth)
    hosts = host_policy(
        args.host,
        args.allowed_hosts,
        insecure=insecure,
        secret=None if token is None else where,
        secrets=f"--token or {TOKEN_ENV}",
    )
    check_port(args.port)
    folder = RunFolder(Path(args.run_dir), trusted_prefixes(args.trust))  # the trust check
    trial = plan_trial(
        folder,
        args.learner,
        args.rho,
        args.seed,
        state_path=args.state,
        fresh=args.fresh,
        overwrite_state=args.overwrite_state,
    )
    token_file = None
    if token is None and not insecure:  # a token by default, kept beside the state
        token_file = token_path(trial.state_path)
        token = read_token(token_file, "--state") or secrets.token_urlsafe(32)
    sock = bind(args.host, args.port)
    try:
        check_checkpoint(trial)
    except BaseException:
        sock.close()
        raise
    return ServePlan(trial, token, hosts, sock, limits, options, token_file, insecure, pacing)


def token_path(state_path: Path) -> Path:
    """The file of the token serve made for the router of ``state_path``: ``<state>.token``."""
    return state_path.with_name(state_path.name + ".token")


def read_token(path: Path, flag: str) -> str | None:
    """The token a previous start wrote to ``path`` (``None``: no such file); ``flag`` chose
    the folder of ``path``."""
    if path.is_dir():
        raise ServeArgsError(
            f"{flag}: the token file {path} is a folder; expected a file holding the token "
            "(move the folder away, or give --token)"
        )
    if not path.is_file():
        return None
    if path.stat().st_mode & 0o077:
        raise ServeArgsError(
            f"the token file {path} can be read by other users; chmod 600 it, or delete it to "
            "get a new token"
        )
    token = path.read_text(encoding="utf-8", errors="replace").strip()
    try:
        return check_token(token, f"the token file {path}")
    except ValueError as exc:
        raise ServeArgsError(f"{exc}; delete the file to get a new token") from None


def write_token(path: Path, token: str) -> None:
    """Write ``token`` to ``path``, readable and writable by the user only (``0600``),
    atomically (a temporary file created ``0600``, then renamed)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(token + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
