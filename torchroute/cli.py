"""The ``torchroute`` command: simulate, sweep, gap, pretrain, report, data and serve.

Configs are composed with Hydra from ``configs/`` (shipped inside the package as
``torchroute.configs``) and overridden from the command line::

    torchroute simulate experiment=default out_dir=outputs/default rhos=[0,500] seeds=[0]
    torchroute sweep experiment=default sweep=linucb_alpha out_dir=outputs/sweep
    torchroute report outputs/default
    torchroute pretrain experiment=routerbench_oracles out_dir=outputs/oracles
    torchroute data inspect my_table.csv score_pattern={arm} cost_pattern={arm}_cost
    torchroute serve outputs/default --learner linucb --rho 500 --port 8000

``torchroute <command> --help`` lists the config groups, presets and keys; ``--cfg`` prints
the composed config without running anything.
"""

from __future__ import annotations

import argparse
import importlib.resources
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

log = logging.getLogger("torchroute")


def config_dir() -> Path:
    """The folder holding ``simulate.yaml`` and the config groups.

    The configs are the package data of ``torchroute.configs`` (the repository's
    ``configs/`` folder), found the same way in an editable and in a regular install.
    """
    return Path(str(importlib.resources.files("torchroute.configs")))


def compose_config(
    name: str, overrides: Sequence[str], directory: str | Path | None = None
) -> DictConfig:
    """Compose ``<name>.yaml`` with Hydra-style ``key=value`` overrides."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(
        config_dir=str(Path(directory or config_dir()).resolve()), version_base="1.3"
    ):
        return compose(config_name=name, overrides=list(overrides))


def _compose(args: argparse.Namespace) -> DictConfig | None:
    """The command's config from its overrides; ``None`` when ``--cfg`` printed it.

    An override naming no group option or key fails with the closest name
    ("did you mean ...").
    """
    from omegaconf import OmegaConf

    from torchroute.cli_help import diagnose, primary_config

    directory = Path(args.config_dir) if args.config_dir else config_dir()
    try:
        cfg = compose_config(primary_config(args.command), args.overrides, directory)
    except Exception as exc:
        hint = diagnose(
            args.command,
            args.overrides,
            directory,
            lambda name, overrides: compose_config(name, overrides, directory),
        )
        if hint is None:
            raise
        raise ValueError(hint) from exc
    if args.cfg:
        print(OmegaConf.to_yaml(cfg), end="")
        return None
    return cfg


def _simulate(args: argparse.Namespace) -> None:
    from torchroute.experiment import run_config
    from torchroute.report import write_report

    cfg = _compose(args)
    if cfg is None:
        return
    results = run_config(cfg)
    if os.environ.get("RANK", "0") != "0":  # a torchrun rank other than 0 writes nothing
        return
    print(f"wrote {Path(cfg.out_dir) / 'results.csv'} ({len(results)} rows)")
    if cfg.get("report", True):
        print(write_report([cfg.out_dir], reference=cfg.get("reference", "linucb")))


def _gap(args: argparse.Namespace) -> None:
    from torchroute.gap import relative_improvements, run_gap

    cfg = _compose(args)
    if cfg is None:
        return
    frame = run_gap(cfg)
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

    print(write_report(args.dirs, out_dir=args.out, reference=args.reference))


def _pretrain(args: argparse.Namespace) -> None:
    from torchroute.trainers.pretrain import run_pretrain

    cfg = _compose(args)
    if cfg is None:
        return
    metrics = run_pretrain(cfg)
    for key, value in metrics.items():
        print(f"{key}: {value}")


def _data(args: argparse.Namespace) -> None:
    from torchroute.data.inspect import data_command

    data_command(args.args)


def _serve(args: argparse.Namespace) -> None:
    import uvicorn

    from torchroute.serve import load_router
    from torchroute.serve.app import create_app

    router = load_router(
        args.run_dir,
        args.learner,
        args.rho,
        args.seed,
        state_path=args.state,
        fresh=args.fresh,
        encoder=not args.no_encoder,
    )
    status = router.status()
    log.info("serving %s (rho=%g) for %s", status["learner"], status["rho"], status["models"])
    uvicorn.run(create_app(router), host=args.host, port=args.port, log_level="info")


class _ConfigParser(argparse.ArgumentParser):
    """A subcommand's parser whose help ends with the config groups, presets and keys."""

    config_command: str | None = None

    def format_help(self) -> str:
        """The usage and options, then (read from the config folder) the configs."""
        if self.config_command and self.epilog is None:
            from torchroute.cli_help import config_help

            self.epilog = config_help(self.config_command, config_dir())
        return super().format_help()


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
        )
        p.config_command = name
        p.add_argument(
            "overrides", nargs="*", help="key=value and group=option overrides (see below)"
        )
        p.add_argument("--config-dir", default=None, help="folder of YAML configs")
        p.add_argument(
            "--cfg",
            nargs="?",
            const="job",
            choices=["job"],
            default=None,
            help="print the composed config and exit",
        )
        p.set_defaults(func=func)
    p = sub.add_parser("report", help="tables and plots from simulate outputs")
    p.add_argument("dirs", nargs="+", help="out_dir folders of simulate runs")
    p.add_argument("--out", default=None, help="where to write (default: the first folder)")
    p.add_argument("--reference", default="linucb", help="learner for relative regret")
    p.set_defaults(func=_report)
    p = sub.add_parser("data", help="inspect a table, or convert it to the generic format")
    p.add_argument("args", nargs=argparse.REMAINDER, help="inspect|convert <path> ... (-h)")
    p.set_defaults(func=_data)
    p = sub.add_parser("serve", help="a live router behind HTTP, from a simulate out_dir")
    p.add_argument("run_dir", help="out_dir of a simulate run (config.yaml, checkpoints/)")
    p.add_argument("--learner", default=None, help="learner name (needed when several)")
    p.add_argument("--rho", type=float, default=None, help="the trial's rho (default: first)")
    p.add_argument("--seed", type=int, default=None, help="the trial's seed (default: first)")
    p.add_argument("--state", default=None, help="router state file (default: run_dir/serve/)")
    p.add_argument("--fresh", action="store_true", help="a fresh learner, not the checkpoint")
    p.add_argument("--no-encoder", action="store_true", help="accept embeddings only")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.set_defaults(func=_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for configuration and input errors).

    Errors in the configuration or the input print one line (``torchroute <command>:
    error: ...``) and return 2; ``--debug`` or ``HYDRA_FULL_ERROR=1`` show the traceback.
    """
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    expected = (
        HydraException,
        OmegaConfBaseException,
        ValueError,  # ConfigError, TableError, CheckpointError, OracleArtifactError, ...
        ArithmeticError,  # NonFiniteError: NaN/inf in a learner's state
        FileNotFoundError,
        NotADirectoryError,
        IsADirectoryError,
    )
    try:
        args.func(args)
    except expected as exc:
        if args.debug or os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        message = " ".join(str(exc).split("\n")[0:1]) or type(exc).__name__
        print(f"torchroute {args.command}: error: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
