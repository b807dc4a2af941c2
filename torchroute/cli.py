"""The ``torchroute`` command: simulate, sweep, gap, pretrain, report, data, serve, evaluate.

Configs are composed with Hydra from ``configs/`` (shipped inside the package as
``torchroute.configs``) and overridden from the command line::

    torchroute simulate experiment=default out_dir=outputs/default rhos=[0,500] seeds=[0]
    torchroute sweep experiment=default sweep=linucb_alpha out_dir=outputs/sweep
    torchroute report outputs/default
    torchroute pretrain experiment=routerbench_oracles out_dir=outputs/oracles
    torchroute data inspect my_table.csv score_pattern={arm} cost_pattern={arm}_cost
    torchroute serve outputs/default --learner linucb --rho 500 --port 8000
    torchroute evaluate logs=decisions.parquet targets=[squarecb,arm:gpt-4] replay=[linucb]

``torchroute <command> --help`` lists the config groups, presets and keys; ``--cfg`` prints
the composed config without running anything.

(Over 400 lines: the argument parsers of eight commands, until they become a package.)
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from torchroute.cli_conventions import NO_HYDRA_CONFIG, MultirunError, info_text, multirun_answer
from torchroute.configs_path import compose_config, config_dir, config_dirs
from torchroute.console import ConsoleFormatter, quiet_console
from torchroute.errors import is_user_error, one_line

if TYPE_CHECKING:
    from torchroute.run import RunOptions

log = logging.getLogger("torchroute")


def _compose(args: argparse.Namespace, overrides: Sequence[str] | None = None) -> DictConfig | None:
    """The command's config from its overrides; ``None`` when ``--cfg`` printed it.

    An override naming no group option or key fails with the closest name
    ("did you mean ...").
    """
    from omegaconf import OmegaConf

    from torchroute.cli_help import diagnose, primary_config
    from torchroute.run.options import ConfigError

    overrides = list(args.overrides if overrides is None else overrides)
    extra = args.config_dir or []
    directories = config_dirs(extra)  # an extra folder that is missing or clashes: one line
    if getattr(args, "multirun", False):
        raise MultirunError(multirun_answer(args.command, overrides))
    if getattr(args, "info", False):
        print(info_text(args.command, primary_config(args.command), directories), end="")
        return None
    if args.cfg == "hydra":
        print(NO_HYDRA_CONFIG)
        return None
    try:
        cfg = compose_config(primary_config(args.command), overrides, extra=extra)
    except Exception as exc:
        hint = diagnose(
            args.command,
            overrides,
            directories,
            lambda name, overrides: compose_config(name, overrides, extra=extra),
        )
        if hint is None:
            raise
        raise ConfigError(hint) from exc
    if args.cfg:
        if args.cfg == "all":  # Hydra's job + hydra configs: torchroute has no hydra part
            print(NO_HYDRA_CONFIG)
        print(OmegaConf.to_yaml(cfg), end="")
        return None
    return cfg


def _simulate(args: argparse.Namespace) -> None:
    from torchroute.run import RunOptions, run
    from torchroute.run.companions import companion_overrides, companion_presets, finish
    from torchroute.run.options import check_no_repeats
    from torchroute.run.outdir import check_out_dir

    cfg = _compose(args)
    if cfg is None:
        return
    opts = RunOptions.from_config(cfg)
    check_no_repeats(opts.config)
    _check_reference(args, opts)
    companions = []  # composed and validated before the first run writes anything
    for preset in companion_presets(cfg, args.config_dir or []):
        overrides = companion_overrides(args.overrides, preset, opts.out_dir)
        companion = _compose(args, overrides)
        if companion is not None:
            companions.append(RunOptions.from_config(companion))
    for companion in companions:
        check_out_dir(companion.out_dir, companion.digest(), companion.overwrite)
    try:
        results = run(opts)
    except (Exception, KeyboardInterrupt):
        _report_what_finished(opts)
        raise
    for companion in companions:
        run(companion)
    if os.environ.get("RANK", "0") != "0":  # a torchrun rank other than 0 writes nothing
        return
    print(finish(opts, results, companions))


def _check_reference(args: argparse.Namespace, opts: RunOptions) -> None:
    """A ``reference=`` given on the command line names a learner the run runs."""
    from torchroute.run.options import ConfigError

    given = [o for o in args.overrides if o.split("=", 1)[0].lstrip("+") == "reference"]
    if given and opts.reference not in opts.run_learners:
        raise ConfigError(
            f"reference={opts.reference!r} is not a learner of this run; expected one of "
            f"{list(opts.run_learners)}"
        )


def _report_what_finished(opts) -> None:
    """After a stopped or failed run: the report of the learners that finished (their
    ``runs/<learner>/summary.csv``), when the run asked for a report and one finished."""
    from torchroute.report import write_report
    from torchroute.report.partial import finished_learners

    if not opts.report or os.environ.get("RANK", "0") != "0":
        return
    if not finished_learners(opts.out_dir):
        return
    try:
        text = write_report([opts.out_dir], sections=opts.report_sections)
    except Exception as exc:  # the run's own error is the one to show
        log.warning("no report of the finished learners: %s", one_line(exc))
        return
    print(text)
    log.warning("the run stopped; the report above covers the learners that finished")


def _gap(args: argparse.Namespace) -> None:
    from torchroute.gap import relative_improvements, run_gap

    cfg = _compose(args)
    if cfg is None:
        return
    frame = run_gap(cfg, args.config_dir or [])
    print(f"wrote {Path(cfg.out_dir) / 'gap.csv'}")
    print(relative_improvements(frame).to_string(index=False))


def _sweep(args: argparse.Namespace) -> None:
    from torchroute.sweep import chosen_markdown, run_sweep

    cfg = _compose(args)
    if cfg is None:
        return
    frame = run_sweep(cfg)
    print(f"wrote {Path(cfg.out_dir) / 'sweep_results.csv'} and chosen.md")
    print(chosen_markdown(frame))


def _report(args: argparse.Namespace) -> None:
    from torchroute.report import write_report
    from torchroute.report.sections import choose_sections
    from torchroute.serve.startup import trusted_prefixes

    trusted = trusted_prefixes(args.trust)
    sections = choose_sections(args.section, args.dirs, trusted) if args.section else None
    print(write_report(args.dirs, out_dir=args.out, reference=args.reference, sections=sections))


#: overrides that turn pretrain's tracking off (``logger`` is also a config group name, so
#: Hydra would read them as a group choice)
_NO_LOGGER = ("logger=null", "logger=false", "logger=none", "~logger")


def _pretrain(args: argparse.Namespace) -> None:
    from omegaconf import open_dict

    from torchroute.trainers.pretrain import run_pretrain

    no_logger = [o for o in args.overrides if o.strip().lower() in _NO_LOGGER]
    overrides = [o for o in args.overrides if o not in no_logger]
    cfg = _compose(args, overrides)
    if cfg is None:
        return
    if no_logger:
        with open_dict(cfg):
            cfg.logger = None
    metrics = run_pretrain(cfg)
    for key, value in metrics.items():
        print(f"{key}: {value}")


def _data(args: argparse.Namespace) -> None:
    from torchroute.data.inspect import data_command

    data_command(args.args)


def _serve(args: argparse.Namespace) -> None:
    from torchroute.serve.startup import plan_serve

    if args.export_log is not None:  # no server: the log as a table
        from torchroute.serve.export import export_log
        from torchroute.serve.router import log_path

        plan = plan_serve(args, export=True)
        rows = export_log(log_path(plan.state_path), args.export_log)
        print(f"wrote {args.export_log} ({rows} decisions)")
        return
    from torchroute.serve.exploration import check_epsilon

    check_epsilon(args.explore)  # before the port is bound or a state file is opened
    plan = plan_serve(args)  # every flag checked, the port bound: before the encoder loads
    import uvicorn

    from torchroute.serve import load_router
    from torchroute.serve.app import create_app

    try:
        router = load_router(
            plan.folder,
            plan.learner,
            plan.rho,
            plan.seed,
            state_path=plan.state_path,
            fresh=plan.fresh,
            encoder=not args.no_encoder,
        )
        router.configure(
            max_pending=args.max_pending,
            pending_ttl=args.pending_ttl,
            checkpoint_every=args.checkpoint_every,
            propensity_draws=args.propensity_draws,
            explore=args.explore,
        )
        if plan.fresh:
            router.log.set_info("origin", "fresh")
    except BaseException:
        plan.sock.close()
        raise
    if plan.token_file is not None:  # written once the run is read: a refused run gets none
        from torchroute.serve.startup import write_token

        try:
            write_token(plan.token_file, plan.token)
        except BaseException:
            router.close()
            plan.sock.close()
            raise
        print(f"POSTs need 'Authorization: Bearer <token>'; the token is in {plan.token_file}")
    if plan.insecure:
        log.warning("--insecure-no-auth: any local process may add models and send feedback")
    status = router.status()
    host, port = plan.sock.getsockname()[:2]
    log.info(
        "serving %s (rho=%g) for %s on http://%s:%d (%s); decision log %s",
        status["learner"],
        status["rho"],
        status["models"],
        host,
        port,
        "POSTs need the bearer token" if plan.token else "no token: loopback only",
        router.log.path,
    )
    app = create_app(
        router,
        token=plan.token,
        allowed_hosts=plan.allowed_hosts,
        limits=plan.limits,
        docs=args.docs,
    )
    server = uvicorn.Server(uvicorn.Config(app, log_level="info"))
    # uvicorn re-raises SIGTERM after its graceful shutdown; as an exception it lets the
    # final checkpoint below run
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        server.run(sockets=[plan.sock])
    finally:
        router.close()
        plan.sock.close()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _evaluate(args: argparse.Namespace) -> None:
    from torchroute.ope.evaluate import run
    from torchroute.serve.startup import trusted_prefixes

    config_dirs(args.config_dir or [])  # a missing or clashing folder: one line
    frame = run(args.overrides, args.config_dir or [], trusted_prefixes(args.trust))
    print(f"wrote ope.csv, report.md and ope.png ({len(frame)} estimates)")


class _ConfigParser(argparse.ArgumentParser):
    """A subcommand's parser whose help ends with the config groups, presets and keys."""

    config_command: str | None = None
    #: the ``--config-dir`` folders given before ``--help``
    extra_config_dirs: tuple[str, ...] = ()

    def format_help(self) -> str:
        """The usage and options, then (read from the config folders) the configs."""
        if self.config_command and self.epilog is None:
            from torchroute.cli_help import config_help

            try:
                extra = config_dirs(self.extra_config_dirs)[1:]
            except ValueError as exc:  # a missing or clashing folder
                self.error(str(exc))
            self.epilog = config_help(self.config_command, config_dir(), extra)
        return super().format_help()


class _HelpWithConfigs(argparse.Action):
    """``-h/--help`` of a config command: the configs listed include those of the
    ``--config-dir`` folders given before it."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs):
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        """Print the help (with the extra folders' configs) and exit."""
        parser.extra_config_dirs = tuple(getattr(namespace, "config_dir", None) or ())
        parser.print_help()
        parser.exit()


class _DataHelp(argparse.Action):
    """``torchroute data -h``: the data command's own help (actions and loader keys)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs):
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        """Print the data command's help and exit."""
        from torchroute.data.inspect import data_command

        data_command(["--help"])


_EXAMPLES = """\
examples:
  torchroute simulate rounds=200 seeds=[0] '~logger'      the built-in benchmark, no wandb
  torchroute simulate experiment=cabs_table2 --cfg        print a preset's config
  torchroute report outputs/simulate                      tables and plots of a run
  torchroute simulate --help                              groups, presets, keys, overrides
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``torchroute`` command."""
    parser = argparse.ArgumentParser(
        prog="torchroute",
        description="Online model routing with contextual bandits, batched over trials.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="<command>", parser_class=_ConfigParser
    )
    for name, func, help_ in [
        ("simulate", _simulate, "run an online routing experiment (writes results.csv)"),
        ("sweep", _sweep, "choose hyper-parameters on val, evaluate once on test"),
        ("gap", _gap, "policy-class gap table (const/lin/quad) on a routing table"),
        ("pretrain", _pretrain, "pre-train oracle heads offline with Lightning"),
    ]:
        p = sub.add_parser(
            name,
            help=help_,
            description=help_[0].upper() + help_[1:] + ".",
            formatter_class=argparse.RawDescriptionHelpFormatter,
            add_help=False,
        )
        p.add_argument(
            "-h",
            "--help",
            action=_HelpWithConfigs,
            help="show this help (with the configs of --config-dir folders given before it)",
        )
        p.config_command = name
        p.add_argument(
            "overrides", nargs="*", help="key=value and group=option overrides (see below)"
        )
        p.add_argument(
            "--config-dir",
            action="append",
            default=None,
            metavar="DIR",
            help="a folder of extra configs (learner/, env/, experiment/, ...) searched "
            "after the packaged ones; repeatable",
        )
        p.add_argument(
            "--cfg",
            nargs="?",
            const="job",
            choices=["job", "hydra", "all"],
            default=None,
            help="print the composed config and exit (job; hydra and all say why there is "
            "no hydra part)",
        )
        p.add_argument(
            "-m",
            "--multirun",
            action="store_true",
            help="(Hydra's multirun) answered with the torchroute sweep command that runs the grid",
        )
        p.add_argument("--info", action="store_true", help="print the config search path and exit")
        p.set_defaults(func=func)
    p = sub.add_parser("report", help="tables and plots from simulate outputs")
    p.add_argument("dirs", nargs="+", help="out_dir folders of simulate runs")
    p.add_argument("--out", default=None, help="where to write (default: the first folder)")
    p.add_argument(
        "--reference", default=None, help="learner for relative regret (default: linucb)"
    )
    p.add_argument(
        "--section",
        action="append",
        default=None,
        metavar="NAME",
        help="a report section by name (subset, cabs, hpg, routing, or one the run's "
        "report_sections declares), repeatable (default: the built-in four)",
    )
    p.add_argument(
        "--trust",
        action="append",
        default=None,
        metavar="MODULE",
        help="a plug-in package whose report sections the run may declare; repeatable",
    )
    p.set_defaults(func=_report)
    p = sub.add_parser(
        "data", help="inspect a table, or convert it to the generic format", add_help=False
    )
    p.add_argument("-h", "--help", action=_DataHelp, help="the actions and loader keys")
    p.add_argument("args", nargs=argparse.REMAINDER, help="inspect|convert <path> ... (-h)")
    p.set_defaults(func=_data)
    p = sub.add_parser("serve", help="a live router behind HTTP, from a simulate out_dir")
    p.add_argument("run_dir", help="out_dir of a simulate run (config.yaml, checkpoints/)")
    p.add_argument("--learner", default=None, help="learner name (needed when several)")
    p.add_argument("--rho", type=float, default=None, help="the trial's rho (default: first)")
    p.add_argument("--seed", type=int, default=None, help="the trial's seed (default: first)")
    p.add_argument(
        "--state",
        default=None,
        help="router state file; its log is <state>.sqlite "
        "(default: run_dir/serve/<learner>_rho<rho>_seed<seed>.pt)",
    )
    p.add_argument("--fresh", action="store_true", help="a fresh learner, not the checkpoint")
    p.add_argument(
        "--overwrite-state", action="store_true", help="with --fresh: discard an existing state"
    )
    p.add_argument("--no-encoder", action="store_true", help="accept embeddings only")
    p.add_argument(
        "--trust",
        action="append",
        default=None,
        metavar="MODULE",
        help="a plug-in package whose classes the run's config may name (e.g. my_routing); "
        "repeatable (default: torchroute's own classes only)",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--token",
        default=None,
        help="bearer token of every POST (default: $TORCHROUTE_SERVE_TOKEN, else a token "
        "serve makes and writes beside the state, readable by you only)",
    )
    p.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="no token: any local process may POST (loopback only; for local experiments)",
    )
    p.add_argument(
        "--docs", action="store_true", help="serve /docs and /openapi.json (off by default)"
    )
    p.add_argument(
        "--allowed-hosts",
        default=None,
        help="comma-separated Host headers accepted "
        "(default: localhost,127.0.0.1,::1 on loopback, else --host)",
    )
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="request body limit")
    p.add_argument("--max-batch", type=int, default=256, help="queries or ids per call")
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
    p.add_argument(
        "--export-log",
        default=None,
        metavar="OUT",
        help="write the decision log to OUT (.parquet or .csv) and exit",
    )
    p.set_defaults(func=_serve)
    from torchroute.gateway.main import add_parser as add_gateway

    add_gateway(sub)
    from torchroute.ope.keys import keys_help

    p = sub.add_parser(
        "evaluate",
        help="off-policy evaluation of routers on a decision log",
        description="Off-policy evaluation of routers on a decision log.",
        epilog=keys_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("overrides", nargs="*", help="key=value (logs=, targets=[...], rhos=[...])")
    p.add_argument(
        "--config-dir",
        action="append",
        default=None,
        metavar="DIR",
        help="a folder of extra learner configs (learner/<name>.yaml) searched after the "
        "packaged ones; repeatable",
    )
    p.add_argument(
        "--trust",
        action="append",
        default=None,
        metavar="MODULE",
        help="a plug-in package whose classes a target may name (e.g. my_routing); "
        "repeatable (default: torchroute's own classes only)",
    )
    p.set_defaults(func=_evaluate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for configuration and input errors).

    A user error (:func:`is_user_error`: bad config, flag, file, table, ...) prints one line
    (``torchroute <command>: error: ...``) and returns 2; ``--debug`` or
    ``HYDRA_FULL_ERROR=1`` show its traceback. Any other exception is a bug: it propagates
    with its traceback (exit 1).
    """
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(ConsoleFormatter(verbose=args.verbose))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, handlers=[handler])
    if not args.verbose:
        quiet_console()
    try:
        args.func(args)
    except Exception as exc:
        if not is_user_error(exc) or args.debug or os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        message = one_line(exc)
        print(f"torchroute {args.command}: error: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
