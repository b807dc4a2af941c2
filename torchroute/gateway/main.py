"""``torchroute gateway``: the flags, the checks before start-up, and the server.

Every rho served (``--rho``, then each of ``--also-rho``) is one trial of the run, checked
and opened through the serve API as ``torchroute serve`` does
(:func:`~torchroute.serve.trial.plan_trial`, :func:`~torchroute.serve.trial.open_trials`);
its state and decision log are ``<state-dir>/<learner>_rho<rho>.pt`` / ``.sqlite`` (default
``state-dir``: ``run_dir/gateway``). The flags it shares with ``serve`` are declared once
(:mod:`torchroute.serve.flags`) and follow the same host policy
(:func:`~torchroute.serve.security.host_policy`). Every flag, file and trial is checked, and
the port bound, before any state is locked, written or discarded. A generated gateway key is
kept in ``<state-dir>/gateway.token`` (``0600``), never printed. A request cut short by a
stop of the gateway (its routed model never finished answering) is withdrawn at the next
start, with an ``interrupted`` attempt row (:class:`~torchroute.gateway.app.Gateway` does
it when it is built).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import logging
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Any

from torchroute.errors import GatewayArgsError as GatewayArgsError
from torchroute.serve.flags import add_access_flags, add_router_flags, add_trial_flags

log = logging.getLogger(__name__)

TOKEN_ENV = "TORCHROUTE_GATEWAY_TOKEN"
#: the file of a generated gateway key, in the state folder
KEY_FILE = "gateway.token"
#: the request limit of one ``/v1/`` call's batch (one conversation)
MAX_BATCH = 256


def add_parser(sub: Any) -> None:
    """The ``gateway`` subcommand's flags."""
    p = sub.add_parser("gateway", help="an OpenAI-compatible gateway routing LLM calls live")
    add_trial_flags(p, rho_help="rho of model 'router' (default: first)")
    p.add_argument("--backends", required=True, help="YAML file: one backend per model")
    p.add_argument(
        "--also-rho",
        type=float,
        action="append",
        default=None,
        metavar="RHO",
        help="another of the run's rhos, served as model 'router-<rho>'; repeatable",
    )
    p.add_argument("--state-dir", default=None, help="router states (default: run_dir/gateway)")
    add_access_flags(
        p,
        port=8100,
        token_help=f"one gateway key (default: ${TOKEN_ENV}; without keys one is generated "
        f"and kept in <state-dir>/{KEY_FILE}, readable by you only)",
    )
    p.add_argument("--keys", default=None, help="YAML file of hashed gateway keys and caps")
    p.add_argument("--cap", type=float, default=None, help="spend cap of --token")
    add_router_flags(
        p,
        budget_help="a spend target of model 'router' without a rho: the mean cost per "
        "request (the backends' unit); a pacer sets each such request's rho from the spend "
        "so far (the learner must take each request's rho: objective: quality_cost)",
    )
    p.add_argument("--max-fallbacks", type=int, default=2, help="models tried after the routed")
    p.add_argument(
        "--session-ttl", type=float, default=600.0, help="seconds a conversation keeps its model"
    )
    p.add_argument(
        "--prompt",
        choices=["last", "conversation"],
        default="last",
        help="what the router reads: the last user message or the whole conversation",
    )
    p.add_argument(
        "--max-response-bytes", type=int, default=8 << 20, help="bytes of one backend answer"
    )
    p.add_argument(
        "--inline-route-ms",
        type=float,
        default=2.0,
        help="route on the event loop while a decision takes less CPU time than this on "
        "average, in a worker thread otherwise (0: always in a thread)",
    )
    p.set_defaults(func=run)


def _file(flag: str, path: str) -> Path:
    """``path`` of ``flag``, an existing file (one line naming the flag otherwise)."""
    file = Path(path)
    if file.is_dir():
        raise GatewayArgsError(f"{flag} {file} is a folder; expected a YAML file")
    if not file.is_file():
        raise GatewayArgsError(f"{flag} {file}: no such file; expected a YAML file")
    return file


def _keys(args: Any) -> tuple[list, str | None]:
    """The gateway keys and the flag or variable of the user's own secret (``None``: none;
    a key is generated unless ``--insecure-no-auth``)."""
    from torchroute.gateway.keys import Key, digest, load_keys
    from torchroute.serve.security import check_token

    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    where = "--token" if args.token is not None else TOKEN_ENV
    if args.keys is not None and token is not None:
        raise GatewayArgsError("give --keys or --token, not both")
    if args.cap is not None and (token is None or not args.cap >= 0):
        raise GatewayArgsError("--cap goes with --token and is a number >= 0")
    if args.keys is not None:
        return load_keys(_file("--keys", args.keys)), "--keys"
    if token is None:
        return [], None
    try:
        check_token(token, where)
    except ValueError as exc:
        raise GatewayArgsError(str(exc)) from None
    return [Key("token", digest(token), args.cap)], where


def _checks(args: Any) -> None:
    for flag, value, low in (
        ("--max-fallbacks", args.max_fallbacks, 0),
        ("--max-response-bytes", args.max_response_bytes, 1),
    ):
        if value < low:
            raise GatewayArgsError(f"{flag} must be an integer >= {low}, got {value}")
    if not args.session_ttl >= 0:
        raise GatewayArgsError(f"--session-ttl must be seconds >= 0, got {args.session_ttl}")
    if not args.inline_route_ms >= 0:
        raise GatewayArgsError(f"--inline-route-ms must be >= 0, got {args.inline_route_ms}")


def _pacing(args: Any, keys: list) -> tuple[str | None, float]:
    """``(paced, eta)``: what asks a pacer to set some requests' rho (``--budget``, else the
    first key with a ``budget``; ``None``: nothing) and the pacers' step (``--budget-eta``),
    checked."""
    from torchroute.serve.pacer import DEFAULT_ETA, check_budget

    eta = DEFAULT_ETA if args.budget_eta is None else args.budget_eta
    budgeted = [f"the budget of key {k.name!r}" for k in keys if k.budget is not None]
    paced = "--budget" if args.budget is not None else next(iter(budgeted), None)
    if args.budget_eta is not None and paced is None:
        raise GatewayArgsError("--budget-eta goes with --budget or a key's budget (--keys)")
    try:
        check_budget(1.0 if args.budget is None else args.budget, eta)
    except ValueError as exc:
        raise GatewayArgsError(str(exc)) from None
    return paced, float(eta)


def state_dir(args: Any) -> Path:
    """The folder of the routers' states (``--state-dir``, default ``run_dir/gateway``)."""
    return Path(args.state_dir) if args.state_dir else Path(args.run_dir) / "gateway"


def _plans(args: Any, folder: Any) -> list:
    """One checked :class:`~torchroute.serve.trial.TrialPlan` per rho (nothing written)."""
    from torchroute.serve.trial import plan_trial

    first = folder.options.rhos[0] if args.rho is None else args.rho
    rhos = [(first, "--rho"), *((rho, "--also-rho") for rho in args.also_rho or [])]
    served = [rho for rho, _ in rhos]
    if len(set(served)) != len(served):
        raise GatewayArgsError("--also-rho repeats a rho served already")
    name = args.learner or "router"
    return [
        plan_trial(
            folder,
            args.learner,
            rho,
            args.seed,
            state_path=state_dir(args) / f"{name}_rho{rho:g}.pt",
            fresh=args.fresh,
            overwrite_state=args.overwrite_state,
            rho_flag=flag,
            state_flag="--state-dir",
        )
        for rho, flag in rhos
    ]


def _check_backends(args: Any, arm_names: Any, backends: dict) -> None:
    """Every model of the run has a backend."""
    missing = [m for m in arm_names if m not in backends]
    if missing:
        raise GatewayArgsError(
            f"--backends {args.backends}: the run's model {missing[0]!r} has no backend; every "
            f"model of the run needs one ({list(arm_names)})"
        )


def run(args: argparse.Namespace) -> None:
    """``torchroute gateway``: check every flag, load the routers, serve until stopped."""
    from torchroute.gateway.backends import load_backends
    from torchroute.run.folder import RunFolder
    from torchroute.serve.flags import router_options, server_limits
    from torchroute.serve.security import host_policy
    from torchroute.serve.startup import bind, check_port, read_token, trusted_prefixes
    from torchroute.serve.trial import check_checkpoint, open_trials

    _checks(args)
    options = router_options(args)
    limits = server_limits(args, max_batch=MAX_BATCH)
    backends = load_backends(_file("--backends", args.backends))
    keys, secret = _keys(args)
    paced, eta = _pacing(args, keys)
    hosts = host_policy(
        args.host,
        args.allowed_hosts,
        insecure=args.insecure_no_auth,
        secret=secret,
        secrets=f"--keys, --token or {TOKEN_ENV}",
    )
    check_port(args.port)
    folder = RunFolder(Path(args.run_dir), trusted_prefixes(args.trust))  # the trust check
    plans = _plans(args, folder)
    key_file, generated = None, None
    if secret is None and not args.insecure_no_auth:  # a key by default, kept in the state
        key_file = state_dir(args) / KEY_FILE
        generated = read_token(key_file, "--state-dir") or secrets.token_urlsafe(32)
        keys = _generated_key(generated)
    sock = bind(args.host, args.port)
    try:
        for plan in plans:
            check_checkpoint(plan)
        _check_backends(args, folder.problem.arm_names, backends)
        trials = open_trials(plans, options, paced=paced)
    except BaseException:
        sock.close()
        raise
    try:
        for router in trials.routers:  # a resumed state may hold models the run has not
            _check_backends(args, router.arm_names, backends)
        if key_file is not None:  # written once the routers opened: a refused start has none
            from torchroute.serve.startup import write_token

            write_token(key_file, generated)
    except BaseException:
        trials.close()
        sock.close()
        raise
    _serve(args, trials, backends, keys, key_file, hosts, limits, sock, eta)


def _generated_key(token: str) -> list:
    """The one key of a generated token (no cap)."""
    from torchroute.gateway.keys import Key, digest

    return [Key("token", digest(token))]


def _serve(args, trials, backends, keys, key_file, hosts, limits, sock, eta) -> None:
    import uvicorn

    from torchroute.gateway.app import Gateway, create_gateway_app
    from torchroute.gateway.keys import Keys

    routers = {router.rho: router for router in trials.routers}
    try:
        gateway = Gateway(
            trials.routers,
            backends,
            keys=Keys(keys),
            session_ttl=args.session_ttl,
            max_fallbacks=args.max_fallbacks,
            prompt=args.prompt,
            limits=limits,
            max_response_bytes=args.max_response_bytes,
            inline_route_ms=args.inline_route_ms,
            budget=args.budget,
            budget_eta=eta,
        )
    except BaseException:
        trials.close()
        sock.close()
        raise
    host, port = sock.getsockname()[:2]
    if key_file is not None:
        print(
            f"the gateway key is in {key_file} (readable by you only; pass --token or "
            f"${TOKEN_ENV} to choose one)"
        )
        sys.stdout.flush()
    log.info(
        "gateway on http://%s:%d/v1 for %s (rho %s); %s",
        host,
        port,
        list(backends),
        ", ".join(f"{r:g}" for r in routers),
        "keys required" if keys else "no key needed: loopback only",
    )
    app = create_gateway_app(gateway, allowed_hosts=hosts, docs=args.docs)
    missing = [name for name in ("uvloop", "httptools") if importlib.util.find_spec(name) is None]
    if missing:
        log.info(
            "%s not installed: the gateway runs on Python's event loop and HTTP parser "
            "(pip install 'torchroute[gateway]' takes up to a fifth off its CPU time per call)",
            " and ".join(missing),
        )
    # uvicorn takes uvloop and httptools when installed ("auto"); no access log line per call
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    freeze_heap()
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        server.run(sockets=[sock])
    finally:
        trials.close()
        sock.close()


def freeze_heap() -> None:
    """Collect the start-up's garbage, then leave what remains (torch, the app, the
    routers: a quarter of a million objects) out of the cyclic collector's scans; a full
    collection over them holds the event loop for about 60 ms."""
    gc.collect()
    gc.freeze()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)
