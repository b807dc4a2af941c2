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

The package: :mod:`~torchroute.cli.commands` runs each command, :mod:`~torchroute.cli.parser`
builds the argument parser, :mod:`~torchroute.cli.help` writes the config help and the
"did you mean" diagnostics, :mod:`~torchroute.cli.conventions` answers Hydra's own flags.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from torchroute.cli.parser import build_parser
from torchroute.configs_path import compose_config, config_dir
from torchroute.console import ConsoleFormatter, quiet_console
from torchroute.errors import is_user_error, one_line


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


__all__ = ["build_parser", "compose_config", "config_dir", "main"]
