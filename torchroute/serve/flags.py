"""The flags ``torchroute serve`` and ``torchroute gateway`` share, declared once, and the
typed options they become (:func:`router_options`, :func:`server_limits`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the parser is built on every command: it imports nothing heavy
    from torchroute.serve.limits import Limits
    from torchroute.serve.trial import RouterOptions


def add_trial_flags(p: argparse.ArgumentParser, *, rho_help: str) -> None:
    """The run and the trial served: ``run_dir``, ``--learner``, ``--rho``, ``--seed``,
    ``--fresh``, ``--overwrite-state``, ``--trust``."""
    p.add_argument("run_dir", help="out_dir of a simulate run (config.yaml, checkpoints/)")
    p.add_argument("--learner", default=None, help="learner name (needed when several)")
    p.add_argument("--rho", type=float, default=None, help=rho_help)
    p.add_argument("--seed", type=int, default=None, help="the trial's seed (default: first)")
    p.add_argument("--fresh", action="store_true", help="a fresh learner, not the checkpoint")
    p.add_argument(
        "--overwrite-state", action="store_true", help="with --fresh: discard an existing state"
    )
    p.add_argument(
        "--trust",
        action="append",
        default=None,
        metavar="MODULE",
        help="a plug-in package whose classes the run's config may name (e.g. my_routing); "
        "repeatable (default: torchroute's own classes only)",
    )


def add_access_flags(p: argparse.ArgumentParser, *, port: int, token_help: str) -> None:
    """Where the server listens and who may call it: ``--host``, ``--port``, ``--token``,
    ``--insecure-no-auth``, ``--allowed-hosts``, ``--docs``."""
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
    p.add_argument("--port", type=int, default=port, help=f"TCP port (default: {port})")
    p.add_argument("--token", default=None, help=token_help)
    p.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="no token: any local process may call it (loopback only; for local experiments)",
    )
    p.add_argument(
        "--allowed-hosts",
        default=None,
        help="comma-separated Host headers accepted "
        "(default: localhost,127.0.0.1,::1 on loopback, else --host)",
    )
    p.add_argument(
        "--docs", action="store_true", help="serve /docs and /openapi.json (off by default)"
    )


def add_router_flags(p: argparse.ArgumentParser, *, budget_help: str) -> None:
    """A live router's bounds: ``--max-body-bytes``, ``--max-prompt-chars``,
    ``--max-pending``, ``--pending-ttl``, ``--checkpoint-every``, ``--propensity-draws``,
    ``--explore``, and its spend target ``--budget`` with the pacer's step
    ``--budget-eta``."""
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="request body limit")
    p.add_argument("--max-prompt-chars", type=int, default=20_000, help="characters per prompt")
    p.add_argument("--max-pending", type=int, default=100_000, help="requests awaiting feedback")
    p.add_argument(
        "--pending-ttl", type=float, default=None, help="seconds a request awaits feedback"
    )
    p.add_argument(
        "--checkpoint-every", type=int, default=1000, help="feedbacks between checkpoints"
    )
    p.add_argument(
        "--propensity-draws", type=int, default=200, help="Monte-Carlo draws of propensities"
    )
    p.add_argument(
        "--explore",
        type=float,
        default=0.0,
        metavar="EPS",
        help="exploration floor: route a query to a uniformly drawn model with probability "
        "EPS (the logged propensity is the mixture's), so the log can evaluate other "
        "routers (default 0)",
    )
    p.add_argument("--budget", type=float, default=None, metavar="COST", help=budget_help)
    p.add_argument(
        "--budget-eta",
        type=float,
        default=None,
        metavar="ETA",
        help="the pacer's unit-free step (default 0.03): larger holds the budget tighter, "
        "smaller moves rho less from request to request",
    )


def router_options(args: Any) -> RouterOptions:
    """The router options of the flags of :func:`add_router_flags` (checked, each error
    naming its flag)."""
    from torchroute.serve.trial import RouterOptions

    return RouterOptions(
        max_pending=args.max_pending,
        pending_ttl=args.pending_ttl,
        checkpoint_every=args.checkpoint_every,
        propensity_draws=args.propensity_draws,
        explore=args.explore,
    )


def pacing_options(args: Any) -> tuple[float, float] | None:
    """``(budget, eta)`` of ``--budget`` and ``--budget-eta`` (checked), or ``None``
    without a budget."""
    from torchroute.serve.pacer import DEFAULT_ETA, check_budget
    from torchroute.serve.trial import ServeArgsError

    eta = DEFAULT_ETA if args.budget_eta is None else args.budget_eta
    if args.budget is None:
        if args.budget_eta is not None:
            raise ServeArgsError("--budget-eta goes with --budget")
        return None
    try:
        check_budget(args.budget, eta)
    except ValueError as exc:
        raise ServeArgsError(str(exc)) from None
    return float(args.budget), float(eta)


def server_limits(args: Any, *, max_batch: int) -> Limits:
    """The request limits of ``--max-body-bytes``, ``--max-prompt-chars`` and ``max_batch``
    (``--max-batch`` of serve); errors name the flag."""
    from torchroute.serve.limits import Limits
    from torchroute.serve.trial import ServeArgsError

    for flag, value in (
        ("--max-body-bytes", args.max_body_bytes),
        ("--max-batch", max_batch),
        ("--max-prompt-chars", args.max_prompt_chars),
    ):
        if value < 1:
            raise ServeArgsError(f"{flag} must be an integer >= 1, got {value}")
    return Limits(args.max_body_bytes, max_batch, args.max_prompt_chars)
