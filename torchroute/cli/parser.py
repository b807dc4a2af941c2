"""The argument parser of the ``torchroute`` command: one subparser per command, each
with its ``--help`` listing the config groups, presets and keys."""

from __future__ import annotations

import argparse

from torchroute.cli import commands
from torchroute.configs_path import config_dir, config_dirs
from torchroute.serve.flags import add_access_flags, add_router_flags, add_trial_flags


class _ConfigParser(argparse.ArgumentParser):
    """A subcommand's parser whose help ends with the config groups, presets and keys."""

    config_command: str | None = None
    #: the ``--config-dir`` folders given before ``--help``
    extra_config_dirs: tuple[str, ...] = ()

    def format_help(self) -> str:
        """The usage and options, then (read from the config folders) the configs."""
        if self.config_command and self.epilog is None:
            from torchroute.cli.help import config_help

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
        ("simulate", commands.simulate, "run an online routing experiment (writes results.csv)"),
        ("sweep", commands.sweep, "choose hyper-parameters on val, evaluate once on test"),
        ("gap", commands.gap, "policy-class gap table (const/lin/quad) on a routing table"),
        ("pretrain", commands.pretrain, "pre-train oracle heads offline with Lightning"),
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
        help="a report section by name (subset, cabs, hpg, routing, budgets, or one the "
        "run's report_sections declares), repeatable (default: the sections the run's own "
        "report had: those its report_sections declare that are torchroute's or of a "
        "--trust package, else the built-in ones)",
    )
    p.add_argument(
        "--trust",
        action="append",
        default=None,
        metavar="MODULE",
        help="a plug-in package whose report sections the run may declare; repeatable",
    )
    p.add_argument(
        "--regimes",
        default=None,
        metavar="RULE",
        help="the cost regimes: auto, cabs (rho <= 300 / >= 800), tertiles (of the run's "
        "rhos) or LOW_MAX,HIGH_MIN (default: the run's report_regimes, else auto)",
    )
    p.set_defaults(func=commands.report)
    p = sub.add_parser(
        "data", help="inspect a table, or convert it to the generic format", add_help=False
    )
    p.add_argument("-h", "--help", action=_DataHelp, help="the actions and loader keys")
    p.add_argument("args", nargs=argparse.REMAINDER, help="inspect|convert <path> ... (-h)")
    p.set_defaults(func=commands.data)
    p = sub.add_parser("serve", help="a live router behind HTTP, from a simulate out_dir")
    add_trial_flags(p, rho_help="the trial's rho (default: first)")
    p.add_argument(
        "--state",
        default=None,
        help="router state file; its log is <state>.sqlite "
        "(default: run_dir/serve/<learner>_rho<rho>_seed<seed>.pt)",
    )
    p.add_argument("--no-encoder", action="store_true", help="accept embeddings only")
    add_access_flags(
        p,
        port=8000,
        token_help="bearer token of every POST (default: $TORCHROUTE_SERVE_TOKEN, else a token "
        "serve makes and writes beside the state, readable by you only)",
    )
    add_router_flags(
        p,
        budget_help="a spend target: the mean cost per request (the unit of the costs fed "
        "back); a pacer sets each request's rho from the spend so far (the learner must "
        "take each request's rho: objective: quality_cost)",
    )
    p.add_argument("--max-batch", type=int, default=256, help="queries or ids per call")
    p.add_argument(
        "--export-log",
        default=None,
        metavar="OUT",
        help="write the decision log to OUT (.parquet or .csv) and exit",
    )
    p.set_defaults(func=commands.serve)
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
    p.set_defaults(func=commands.evaluate)
    return parser


__all__ = ["build_parser"]
