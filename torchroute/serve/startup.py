"""Checks of ``torchroute serve`` that run before anything heavy loads (the encoder, the run).

Every problem is a one-line :class:`ServeArgsError` naming the flag: the port's range and
whether it is free (the socket is bound here and handed to the server, so nobody takes it
in between), the token rules, the bind address without a token, the learner, rho and seed
of the run, the state file (a file, not a folder; ``--fresh`` over an existing state only
with ``--overwrite-state``) and a writable folder for it.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from torchroute.errors import UserError
from torchroute.run.trust import check_trusted
from torchroute.serve.limits import Limits
from torchroute.serve.log import DecisionLog, LogError, clean_temp_files, log_path
from torchroute.serve.security import TOKEN_ENV, check_token, is_loopback

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
WILDCARDS = ("0.0.0.0", "::", "")


class ServeArgsError(UserError, ValueError):
    """A flag of ``torchroute serve`` that cannot work; nothing was started or written."""


@dataclass
class ServePlan:
    """What the checks resolved: the trial, the state file, the token, the bound socket."""

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


def _run_config(run_dir: Path, trusted: tuple[str, ...] = ()) -> Any:
    config = run_dir / "config.yaml"
    if not config.is_file():
        raise ServeArgsError(f"{config} not found: give the out_dir of a simulate run")
    try:
        cfg = OmegaConf.load(config)  # plain YAML: nothing is resolved or instantiated
    except Exception as exc:
        raise ServeArgsError(f"{config} cannot be read: {exc}") from exc
    # a run folder is data: refuse a _target_ that is not torchroute's before anything else
    plain = OmegaConf.to_container(cfg, resolve=False)
    for name, node in (plain.get("learners") or {}).items():
        check_trusted(node, f"learners.{name}", str(config), trusted)
    if plain.get("encoder") is not None:
        check_trusted(plain["encoder"], "encoder", str(config), trusted)
    return cfg


def _choose(cfg: Any, learner: str | None, rho: float | None, seed: int | None, where: Path):
    learners = cfg.get("learners") or {}
    names = list(cfg.get("run_learners") or learners)
    if not names:
        raise ServeArgsError(f"{where}/config.yaml has no learners")
    if learner is None:
        if len(names) != 1:
            raise ServeArgsError(f"the run has learners {names}; choose one with --learner")
        learner = names[0]
    elif learner not in learners:
        raise ServeArgsError(f"--learner {learner!r} is not in the run; its learners: {names}")
    rhos = [float(r) for r in cfg.get("rhos") or [0.0]]
    seeds = [int(s) for s in cfg.get("seeds") or [0]]
    rho = rhos[0] if rho is None else float(rho)
    seed = seeds[0] if seed is None else int(seed)
    if rho not in rhos:
        raise ServeArgsError(f"--rho {rho:g} is not in the run's rhos {rhos}")
    if seed not in seeds:
        raise ServeArgsError(f"--seed {seed} is not in the run's seeds {seeds}")
    return learner, rho, seed


def default_state_path(run_dir: Path, learner: str, rho: float, seed: int) -> Path:
    """``run_dir/serve/<learner>_rho<rho>_seed<seed>.pt``."""
    return run_dir / "serve" / f"{learner}_rho{rho:g}_seed{seed}.pt"


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
    cfg = _run_config(run_dir, trusted)
    learner, rho, seed = _choose(cfg, args.learner, args.rho, args.seed, run_dir)
    if args.state is not None:
        state = Path(args.state)
        if state.is_dir():
            raise ServeArgsError(
                f"--state {state} is a folder; give a file path such as {state / 'router.pt'}"
            )
    else:
        state = default_state_path(run_dir, learner, rho, seed)
    if export:
        if not log_path(state).is_file():
            raise ServeArgsError(f"no decision log {log_path(state)} to export (see --state)")
        return ServePlan(learner, rho, seed, state, None, (), trusted=trusted)
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
    checkpoint = run_dir / "checkpoints" / f"{learner}.pt"
    if not fresh and not checkpoint.is_file():
        sock.close()
        raise ServeArgsError(
            f"checkpoint {checkpoint} does not exist; serve with --fresh for a new learner"
        )
    if not fresh:
        try:
            _check_run_checkpoint(cfg, checkpoint, learner)
        except ValueError:
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
        learner, rho, seed, state, token, hosts, fresh, sock, limits, trusted, token_file, insecure
    )


def token_path(state_path: Path) -> Path:
    """The file of the token serve made for the router of ``state_path``: ``<state>.token``."""
    return state_path.with_name(state_path.name + ".token")


def read_token(path: Path) -> str | None:
    """The token a previous start wrote to ``path`` (``None``: no such file)."""
    if not path.is_file():
        return None
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


def _check_run_checkpoint(cfg: Any, checkpoint: Path, learner: str) -> None:
    """The run's checkpoint was written by the run's configuration (its stored fingerprint)."""
    from torchroute.checkpoint import load_checkpoint

    payload = load_checkpoint(checkpoint)  # weights only
    stored = dict(payload.get("config") or {})
    stored.pop("layout", None)
    if stored.pop("learner", learner) != learner:
        raise ServeArgsError(f"checkpoint {checkpoint} holds another learner than {learner!r}")
    plain = OmegaConf.to_container(cfg, resolve=True)
    runtime = set(plain.get("runtime_keys") or ()) | {"runtime_keys"}
    expected = {k: v for k, v in plain.items() if k not in runtime}
    differ = sorted(k for k in set(stored) | set(expected) if stored.get(k) != expected.get(k))
    if differ:
        raise ServeArgsError(
            f"checkpoint {checkpoint} was written by another configuration than the run's "
            f"config.yaml ({', '.join(differ[:3])} differ); serve the run that wrote it"
        )


def _origin(path: Path) -> str | None:
    try:
        log = DecisionLog.read(path)
    except LogError as exc:
        raise ServeArgsError(str(exc)) from None
    try:
        return log.info().get("origin")
    finally:
        log.close()
