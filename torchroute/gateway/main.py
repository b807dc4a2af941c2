"""``torchroute gateway``: the flags, the checks before start-up, and the server.

Every rho served (``--rho``, then each of ``--also-rho``) is one trial of the run, checked
and loaded as ``torchroute serve`` does (:func:`~torchroute.serve.startup.plan_serve`,
:func:`~torchroute.serve.from_run.load_router`); its state and decision log are
``<state-dir>/<learner>_rho<rho>.pt`` / ``.sqlite`` (default ``state-dir``:
``run_dir/gateway``). A request cut short by a stop of the gateway (its routed model never
finished answering) is withdrawn at the next start, with an ``interrupted`` attempt row
(:class:`~torchroute.gateway.app.Gateway` does it when it is built).
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
from types import SimpleNamespace
from typing import Any

from torchroute.errors import UserError

log = logging.getLogger(__name__)

TOKEN_ENV = "TORCHROUTE_GATEWAY_TOKEN"


class GatewayArgsError(UserError, ValueError):
    """A flag of ``torchroute gateway`` that cannot work; nothing was started."""


def add_parser(sub: Any) -> None:
    """The ``gateway`` subcommand's flags."""
    p = sub.add_parser("gateway", help="an OpenAI-compatible gateway routing LLM calls live")
    p.add_argument("run_dir", help="out_dir of a simulate run (config.yaml, checkpoints/)")
    p.add_argument("--backends", required=True, help="YAML file: one backend per model")
    p.add_argument("--learner", default=None, help="learner name (needed when several)")
    p.add_argument("--rho", type=float, default=None, help="rho of model 'router' (default: first)")
    p.add_argument(
        "--also-rho",
        type=float,
        action="append",
        default=None,
        metavar="RHO",
        help="another of the run's rhos, served as model 'router-<rho>'; repeatable",
    )
    p.add_argument("--seed", type=int, default=None, help="the trials' seed (default: first)")
    p.add_argument("--state-dir", default=None, help="router states (default: run_dir/gateway)")
    p.add_argument("--fresh", action="store_true", help="fresh learners, not the checkpoint")
    p.add_argument(
        "--overwrite-state", action="store_true", help="with --fresh: discard existing states"
    )
    p.add_argument(
        "--trust",
        action="append",
        default=None,
        metavar="MODULE",
        help="a plug-in package whose classes the run's config may name; repeatable",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--keys", default=None, help="YAML file of hashed gateway keys and caps")
    p.add_argument(
        "--token",
        default=None,
        help=f"one gateway key (default: ${TOKEN_ENV}; without keys a token is generated)",
    )
    p.add_argument("--cap", type=float, default=None, help="spend cap of --token")
    p.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="no key needed (loopback only)",
    )
    p.add_argument("--allowed-hosts", default=None, help="comma-separated Host headers accepted")
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
        "--docs", action="store_true", help="serve /docs and /openapi.json (off by default)"
    )
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="request body limit")
    p.add_argument("--max-prompt-chars", type=int, default=20_000, help="characters routed on")
    p.add_argument(
        "--max-response-bytes", type=int, default=8 << 20, help="bytes of one backend answer"
    )
    p.add_argument("--max-pending", type=int, default=100_000, help="requests awaiting feedback")
    p.add_argument("--pending-ttl", type=float, default=None, help="seconds awaiting feedback")
    p.add_argument("--checkpoint-every", type=int, default=1000, help="feedbacks per checkpoint")
    p.add_argument("--propensity-draws", type=int, default=200, help="Monte-Carlo draws")
    p.add_argument(
        "--inline-route-ms",
        type=float,
        default=2.0,
        help="route on the event loop while a decision takes less CPU time than this on "
        "average, in a worker thread otherwise (0: always in a thread)",
    )
    p.set_defaults(func=run)


def _keys(args: Any) -> tuple[list, str | None]:
    """The gateway keys and a generated token to show (``None``: none generated)."""
    from torchroute.gateway.keys import Key, digest, load_keys
    from torchroute.serve.security import check_token, is_loopback

    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    if args.keys is not None and token is not None:
        raise GatewayArgsError("give --keys or --token, not both")
    if args.cap is not None and (token is None or not args.cap >= 0):
        raise GatewayArgsError("--cap goes with --token and is a number >= 0")
    if args.insecure_no_auth:
        if args.keys is not None or token is not None:
            raise GatewayArgsError("--insecure-no-auth goes without --keys and --token")
        if not is_loopback(args.host):
            raise GatewayArgsError(
                f"--insecure-no-auth only on loopback; --host {args.host} is reachable from "
                "other machines"
            )
        return [], None
    if args.keys is not None:
        return load_keys(args.keys), None
    generated = None
    if token is None:
        token = generated = secrets.token_urlsafe(32)
    try:
        check_token(token, "--token" if args.token is not None else TOKEN_ENV)
    except ValueError as exc:
        raise GatewayArgsError(str(exc)) from None
    return [Key("token", digest(token), args.cap)], generated


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


def _first_rho(run_dir: Path) -> float | None:
    """The run's first rho (``None``: no readable config; the plan's checks say why)."""
    from omegaconf import OmegaConf

    try:
        rhos = OmegaConf.load(run_dir / "config.yaml").get("rhos") or [0.0]
        return float(rhos[0])
    except Exception:
        return None


def _plans(args: Any) -> list:
    """One checked :class:`~torchroute.serve.startup.ServePlan` per rho (no port bound)."""
    from torchroute.serve.startup import plan_serve

    rhos = [_first_rho(Path(args.run_dir)) if args.rho is None else args.rho]
    rhos += args.also_rho or []
    state_dir = Path(args.state_dir) if args.state_dir else Path(args.run_dir) / "gateway"
    plans = []
    for rho in rhos:
        name = args.learner or "router"
        state = None if rho is None else state_dir / f"{name}_rho{rho:g}.pt"
        serve_args = SimpleNamespace(
            **{
                **vars(args),
                "rho": rho,
                "state": state,
                "host": "127.0.0.1",
                "port": 0,
                "token": None,
                "allowed_hosts": None,
                "max_batch": 1,
                "insecure_no_auth": True,
            }
        )
        plan = plan_serve(serve_args)
        plan.sock.close()
        plans.append(plan)
    if len({p.rho for p in plans}) != len(plans):
        raise GatewayArgsError("--also-rho repeats a rho served already")
    return plans


def run(args: argparse.Namespace) -> None:
    """``torchroute gateway``: check every flag, load the routers, serve until stopped."""
    from torchroute.gateway.backends import load_backends
    from torchroute.serve.app import LOOPBACK_HOSTS
    from torchroute.serve.limits import Limits
    from torchroute.serve.security import is_loopback
    from torchroute.serve.startup import WILDCARDS, bind

    _checks(args)
    backends = load_backends(args.backends)
    keys, generated = _keys(args)
    if args.allowed_hosts:
        hosts = tuple(h.strip() for h in args.allowed_hosts.split(",") if h.strip())
    elif is_loopback(args.host):
        hosts = LOOPBACK_HOSTS
    elif args.host in WILDCARDS:
        raise GatewayArgsError(f"--host {args.host!r}: name the Host headers with --allowed-hosts")
    else:
        hosts = (args.host,)
    try:
        limits = Limits(args.max_body_bytes, 256, args.max_prompt_chars)
    except ValueError as exc:
        raise GatewayArgsError(str(exc)) from None
    plans = _plans(args)
    sock = bind(args.host, args.port)
    try:
        routers = _load(args, plans, backends)
    except BaseException:
        sock.close()
        raise
    _serve(args, routers, backends, keys, generated, hosts, limits, sock)


def _load(args: Any, plans: list, backends: dict) -> dict:
    """The routers of the plans (each model of the run has a backend)."""
    from torchroute.serve import load_router

    routers: dict = {}
    try:
        for i, plan in enumerate(plans):
            router = load_router(
                args.run_dir,
                plan.learner,
                plan.rho,
                plan.seed,
                state_path=plan.state_path,
                fresh=plan.fresh,
                encoder=i == 0,
                trusted=plan.trusted,
            )
            routers[plan.rho] = router
            if i > 0:
                router.encode = routers[plans[0].rho].encode
            router.configure(
                max_pending=args.max_pending,
                pending_ttl=args.pending_ttl,
                checkpoint_every=args.checkpoint_every,
                propensity_draws=args.propensity_draws,
            )
            if plan.fresh:
                router.log.set_info("origin", "fresh")
            missing = [m for m in router.arm_names if m not in backends]
            if missing:
                raise GatewayArgsError(
                    f"{args.backends}: the run's model {missing[0]!r} has no backend; every "
                    f"model of the run needs one ({list(router.arm_names)})"
                )
    except BaseException:
        for router in routers.values():
            router.close()
        raise
    return routers


def _serve(args, routers, backends, keys, generated, hosts, limits, sock) -> None:
    import uvicorn

    from torchroute.gateway.app import Gateway, create_gateway_app
    from torchroute.gateway.keys import Keys

    try:
        gateway = Gateway(
            list(routers.values()),
            backends,
            keys=Keys(keys),
            session_ttl=args.session_ttl,
            max_fallbacks=args.max_fallbacks,
            prompt=args.prompt,
            limits=limits,
            max_response_bytes=args.max_response_bytes,
            inline_route_ms=args.inline_route_ms,
        )
    except BaseException:
        for router in routers.values():
            router.close()
        sock.close()
        raise
    host, port = sock.getsockname()[:2]
    if generated is not None:
        print(f"gateway key (generated; pass --token or ${TOKEN_ENV} to choose one): {generated}")
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
        for router in routers.values():
            router.close()
        sock.close()


def freeze_heap() -> None:
    """Collect the start-up's garbage, then leave what remains (torch, the app, the
    routers: a quarter of a million objects) out of the cyclic collector's scans; a full
    collection over them holds the event loop for about 60 ms."""
    gc.collect()
    gc.freeze()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)
