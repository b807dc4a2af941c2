"""What each ``torchroute`` command does once its arguments are parsed (the parser is
:mod:`torchroute.cli.parser`; each function takes the parsed ``argparse.Namespace``)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from torchroute.cli.conventions import NO_HYDRA_CONFIG, MultirunError, info_text, multirun_answer
from torchroute.configs_path import compose_config, config_dirs
from torchroute.errors import one_line

if TYPE_CHECKING:
    from torchroute.run import RunOptions

log = logging.getLogger("torchroute")


def compose(args: argparse.Namespace, overrides: Sequence[str] | None = None) -> DictConfig | None:
    """The command's config from its overrides; ``None`` when ``--cfg`` printed it.

    An override naming no group option or key fails with the closest name
    ("did you mean ...").
    """
    from omegaconf import OmegaConf

    from torchroute.cli.help import diagnose, primary_config
    from torchroute.errors import ConfigError

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


def simulate(args: argparse.Namespace) -> None:
    """``torchroute simulate``: run the experiment of the composed config (writes results.csv)."""
    from torchroute.cli.finish import finish
    from torchroute.run import RunOptions, run
    from torchroute.run.companions import companion_overrides, companion_presets
    from torchroute.run.options import check_no_repeats
    from torchroute.run.outdir import check_out_dir

    cfg = compose(args)
    if cfg is None:
        return
    opts = RunOptions.from_config(cfg)
    check_no_repeats(opts.config)
    _check_reference(args, opts)
    companions = []  # composed and validated before the first run writes anything
    for preset in companion_presets(cfg, args.config_dir or []):
        overrides = companion_overrides(args.overrides, preset, opts.out_dir)
        companion = compose(args, overrides)
        if companion is not None:
            companions.append(RunOptions.from_config(companion))
    for companion in companions:
        check_out_dir(companion.out_dir, companion.digest(), companion.overwrite)
    started: list[bool] = []  # set once the run has passed its checks and written its inputs
    try:
        results = run(opts, on_start=lambda: started.append(True))
    except (Exception, KeyboardInterrupt):
        if started:  # a refused run writes nothing: the folder still holds the earlier run
            _report_what_finished(opts)
        raise
    for companion in companions:
        run(companion)
    if os.environ.get("RANK", "0") != "0":  # a torchrun rank other than 0 writes nothing
        return
    print(finish(opts, results, companions))


def _check_reference(args: argparse.Namespace, opts: RunOptions) -> None:
    """A ``reference=`` given on the command line names a learner the run runs."""
    from torchroute.errors import ConfigError

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
        text = write_report(
            [opts.out_dir], sections=opts.report_sections, regimes=opts.report_regimes
        )
    except Exception as exc:  # the run's own error is the one to show
        log.warning("no report of the finished learners: %s", one_line(exc))
        return
    print(text)
    log.warning("the run stopped; the report above covers the learners that finished")


def gap(args: argparse.Namespace) -> None:
    """``torchroute gap``: the policy-class gap table of the composed config (writes gap.csv)."""
    from torchroute.gap import relative_improvements, run_gap

    cfg = compose(args)
    if cfg is None:
        return
    frame = run_gap(cfg, args.config_dir or [])
    print(f"wrote {Path(cfg.out_dir) / 'gap.csv'}")
    print(relative_improvements(frame).to_string(index=False))


def sweep(args: argparse.Namespace) -> None:
    """``torchroute sweep``: choose hyper-parameters on val, evaluate the choice once on test."""
    from torchroute.sweep import chosen_markdown, run_sweep

    cfg = compose(args)
    if cfg is None:
        return
    frame = run_sweep(cfg)
    print(f"wrote {Path(cfg.out_dir) / 'sweep_results.csv'} and chosen.md")
    print(chosen_markdown(frame))


def report(args: argparse.Namespace) -> None:
    """``torchroute report``: tables and plots of a finished run folder."""
    from torchroute.report import write_report
    from torchroute.report.sections import choose_sections, run_sections
    from torchroute.run.report_regimes import check_regime_rule
    from torchroute.serve.startup import trusted_prefixes

    trusted = trusted_prefixes(args.trust)
    if args.section:
        sections = choose_sections(args.section, args.dirs, trusted)
    else:  # the sections the run's own report had
        sections, skipped = run_sections(args.dirs, trusted)
        for line in skipped:
            log.warning("report: a section the run declares is left out: %s", line)
    regimes = None if args.regimes is None else check_regime_rule(args.regimes, "--regimes")
    text = write_report(
        args.dirs, out_dir=args.out, reference=args.reference, sections=sections, regimes=regimes
    )
    print(text)


#: overrides that turn pretrain's tracking off (``logger`` is also a config group name, so
#: Hydra would read them as a group choice)
_NO_LOGGER = ("logger=null", "logger=false", "logger=none", "~logger")


def pretrain(args: argparse.Namespace) -> None:
    """``torchroute pretrain``: pre-train oracle heads with Lightning."""
    from omegaconf import open_dict

    from torchroute.trainers.pretrain import run_pretrain

    no_logger = [o for o in args.overrides if o.strip().lower() in _NO_LOGGER]
    overrides = [o for o in args.overrides if o not in no_logger]
    cfg = compose(args, overrides)
    if cfg is None:
        return
    if no_logger:
        with open_dict(cfg):
            cfg.logger = None
    metrics = run_pretrain(cfg)
    for key, value in metrics.items():
        print(f"{key}: {value}")


def data(args: argparse.Namespace) -> None:
    """``torchroute data``: inspect or convert a routing table."""
    from torchroute.data.inspect import data_command

    data_command(args.args)


def serve(args: argparse.Namespace) -> None:
    """``torchroute serve``: serve a run's learner over HTTP until stopped."""
    from torchroute.serve.startup import export_state, plan_serve

    if args.export_log is not None:  # no server: the log as a table
        from torchroute.serve.export import export_log

        rows = export_log(export_state(args), args.export_log)
        print(f"wrote {args.export_log} ({rows} decisions)")
        return
    plan = plan_serve(args)  # every flag checked, the port bound: before the encoder loads
    import uvicorn

    from torchroute.serve.app import create_app
    from torchroute.serve.startup import write_token
    from torchroute.serve.trial import open_trials

    try:
        paced = None if plan.pacing is None else "--budget"
        trials = open_trials([plan.trial], plan.options, encoder=not args.no_encoder, paced=paced)
    except BaseException:
        plan.sock.close()
        raise
    (router,) = trials.routers
    if plan.pacing is not None:
        try:
            router.pace(*plan.pacing)
        except BaseException:
            trials.close()
            plan.sock.close()
            raise
        rho_now = router.status()["pacer"]["rho"]
        log.info("pacing to a mean cost of %g per request from rho=%g", plan.pacing[0], rho_now)
    if plan.token_file is not None:  # written once the run is read: a refused run gets none
        try:
            write_token(plan.token_file, plan.token)
        except BaseException:
            trials.close()
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
        trials.close()
        plan.sock.close()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def evaluate(args: argparse.Namespace) -> None:
    """``torchroute evaluate``: off-policy evaluation of targets on a decision log."""
    from torchroute.ope.evaluate import run
    from torchroute.serve.startup import trusted_prefixes

    config_dirs(args.config_dir or [])  # a missing or clashing folder: one line
    frame = run(args.overrides, args.config_dir or [], trusted_prefixes(args.trust))
    print(f"wrote ope.csv, report.md and ope.png ({len(frame)} estimates)")
