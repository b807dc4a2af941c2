"""Checks of ``torchroute serve`` that run before anything heavy loads (the encoder, the run).

The run is opened once (:class:`~torchroute.run.folder.RunFolder`: the trust check, the
learner, rho and seed of the trial, the checkpoint that holds it, read and checked against
the run's configuration); ``load_router`` reads nothing of it again. Serve itself checks
only its own flags, each problem a one-line :class:`ServeArgsError` naming the flag: the
port's range and whether it is free (the socket is bound here and handed to the server, so
nobody takes it in between), the token rules (a token is made when none is given, unless
``--insecure-no-auth`` on loopback), the bind address and allowed hosts, the state file (a
file, not a folder; ``--fresh`` over an existing state only with ``--overwrite-state``) and
a writable folder for it."""

from __future__ import annotations

import os
import re
import secrets
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchroute.errors import UserError
from torchroute.run.folder import RunFolder
from torchroute.serve.limits import Limits
from torchroute.serve.log import LogError, RouterLog, clean_temp_files, log_path
from torchroute.serve.security import TOKEN_ENV, check_token, is_loopback

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
WILDCARDS = ("0.0.0.0", "::", "")


class ServeArgsError(UserError, ValueError):
    """A flag of ``torchroute serve`` that cannot work; nothing was started or written."""


@dataclass
class ServePlan:
    """What the checks resolved: the trial, the state file, the token, the bound socket,
    and the run (``folder``, opened once: ``load_router`` reads nothing of it again)."""

    learner: str
    rho: float
    seed: int
    state_path: Path
    token: str | None
    allowed_hosts: tuple[str, ...]
    fresh: bool = False
    sock: socket.socket | None = None
    limits: Limits | None = None
    trusted: tuple[str, ...] = ()
    token_file: Path | None = None
    insecure: bool = False
    folder: RunFolder | None = None


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


def state_files(state_path: Path) -> list[Path]:
    """The state file, its decision log and the log's WAL companions that exist."""
    log = log_path(state_path)
    candidates = [
        state_path,
        log,
        log.with_name(log.name + "-wal"),
        log.with_name(log.name + "-shm"),
    ]
    return [p for p in candidates if p.exists()]


def _writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check."):
            pass
    except OSError as exc:
        raise ServeArgsError(
            f"cannot write the router's state to {folder} ({exc.strerror or exc}); give --state "
            "a path in a writable folder"
        ) from exc


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (one-line errors for a bad or busy port)."""
    if not 0 <= port <= 65535:
        raise ServeArgsError(f"--port must be in 0..65535, got {port}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno in (98, 48):  # EADDRINUSE (Linux, macOS)
            raise ServeArgsError(f"--port {port} is in use on {host}; pick another") from None
        raise ServeArgsError(f"--host {host} --port {port} cannot be bound: {exc}") from None
    sock.set_inheritable(True)
    return sock


def plan_serve(args: Any, *, export: bool = False) -> ServePlan:
    """Check the ``serve`` flags in ``args`` (argparse namespace); bind the port unless exporting.

    Raises:
        ServeArgsError: the first problem found, before anything is loaded or written.
    """
    run_dir = Path(args.run_dir)
    if export:
        token, hosts = None, ()
    else:
        if args.overwrite_state and not args.fresh:
            raise ServeArgsError("--overwrite-state only goes with --fresh")
        token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
        where = "--token" if args.token is not None else TOKEN_ENV
        check_token(token, where)
        insecure = bool(getattr(args, "insecure_no_auth", False))
        if insecure and token is not None:
            raise ServeArgsError(f"--insecure-no-auth contradicts the token of {where}")
        if insecure and not is_loopback(args.host):
            raise ServeArgsError(
                f"--insecure-no-auth works on loopback only; --host {args.host} is reachable "
                "from other machines (drop the flag: serve makes a token)"
            )
        if args.allowed_hosts:
            hosts = tuple(h.strip() for h in args.allowed_hosts.split(",") if h.strip())
            if "*" in hosts and token is None:
                raise ServeArgsError(
                    f"--allowed-hosts '*' accepts any Host header: it needs a token of your "
                    f"own (--token or {TOKEN_ENV})"
                )
        elif is_loopback(args.host):
            hosts = LOOPBACK_HOSTS
        elif args.host in WILDCARDS:
            raise ServeArgsError(
                f"--host {args.host!r} answers on every interface: name the Host headers "
                "clients use with --allowed-hosts (e.g. router.example.com,10.0.0.5)"
            )
        else:
            hosts = (args.host,)
        if not 0 <= args.port <= 65535:
            raise ServeArgsError(f"--port must be in 0..65535, got {args.port}")
        limits = _limits(args)
    trusted = trusted_prefixes(getattr(args, "trust", None))
    folder = RunFolder(run_dir, trusted)  # opened once: the trust check is done here
    learner = folder.learner_name(args.learner, "--learner")
    rho, seed, trial = folder.trial_of(args.rho, args.seed, flags=True)
    if args.state is not None:
        state = Path(args.state)
        if state.is_dir():
            raise ServeArgsError(
                f"--state {state} is a folder; give a file path such as {state / 'router.pt'}"
            )
    else:
        state = folder.state_path(learner, rho, seed)
    if export:
        if not log_path(state).is_file():
            raise ServeArgsError(f"no decision log {log_path(state)} to export (see --state)")
        return ServePlan(learner, rho, seed, state, None, (), trusted=trusted, folder=folder)
    existing = state_files(state)
    if args.fresh and existing and not args.overwrite_state:
        raise ServeArgsError(
            f"--fresh but {existing[0]} exists (the router's state and decision log); add "
            "--overwrite-state to discard them, or drop --fresh to resume"
        )
    sock = bind(args.host, args.port)
    try:
        _writable(state.parent)
    except ServeArgsError:
        sock.close()
        raise
    fresh = bool(args.fresh)
    if not fresh and log_path(state).is_file():  # resuming: started fresh or from the run?
        try:
            fresh = _origin(log_path(state)) == "fresh"
        except ServeArgsError:
            sock.close()
            raise
    if not fresh:  # the checkpoint of the trial (shard plan), read once and checked
        try:
            folder.checkpoint(learner, trial)
        except BaseException:
            sock.close()
            raise
    if args.fresh and args.overwrite_state:
        for path in existing:
            path.unlink()
    clean_temp_files(state)
    token_file = None
    if token is None and not insecure:  # a token by default, kept beside the state
        token_file = token_path(state)
        try:
            token = read_token(token_file) or secrets.token_urlsafe(32)
        except ServeArgsError:
            sock.close()
            raise
    return ServePlan(
        learner,
        rho,
        seed,
        state,
        token,
        hosts,
        fresh,
        sock,
        limits,
        trusted,
        token_file,
        insecure,
        folder,
    )


def token_path(state_path: Path) -> Path:
    """The file of the token serve made for the router of ``state_path``: ``<state>.token``."""
    return state_path.with_name(state_path.name + ".token")


def read_token(path: Path) -> str | None:
    """The token a previous start wrote to ``path`` (``None``: no such file)."""
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


def _limits(args: Any) -> Limits:
    for flag, value, low in (
        ("--max-body-bytes", args.max_body_bytes, 1),
        ("--max-batch", args.max_batch, 1),
        ("--max-prompt-chars", args.max_prompt_chars, 1),
        ("--max-pending", args.max_pending, 1),
        ("--checkpoint-every", args.checkpoint_every, 1),
        ("--propensity-draws", args.propensity_draws, 1),
    ):
        if value < low:
            raise ServeArgsError(f"{flag} must be an integer >= {low}, got {value}")
    if args.pending_ttl is not None and not args.pending_ttl > 0:
        raise ServeArgsError(
            f"--pending-ttl must be a number of seconds > 0, got {args.pending_ttl}"
        )
    if args.max_pending < args.max_batch:
        raise ServeArgsError(
            f"--max-pending {args.max_pending} is below --max-batch {args.max_batch}"
        )
    return Limits(args.max_body_bytes, args.max_batch, args.max_prompt_chars)


def _origin(path: Path) -> str | None:
    try:
        log = RouterLog.read(path)
    except LogError as exc:
        raise ServeArgsError(str(exc)) from None
    try:
        return log.info().get("origin")
    finally:
        log.close()
