"""What ``torchroute simulate`` prints at the end of a run: the files written, then the
report of the run and its companions."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pandas as pd

from torchroute.report import write_report
from torchroute.run.options import RunOptions

log = logging.getLogger("torchroute")


def finish(opts: RunOptions, results: pd.DataFrame, companions: Sequence[RunOptions]) -> str:
    """What ``simulate`` prints at the end of a run: the files written, then (``report``)
    the report of the run and its companions.

    A ``reference`` learner that did not run is dropped from the report with a warning.
    """
    lines = [f"wrote {opts.out_dir / 'results.csv'} ({len(results)} rows)"]
    lines += [f"wrote {c.out_dir / 'results.csv'}" for c in companions]
    if opts.report:
        reference = opts.reference
        if reference is not None and reference not in set(results["learner"]):
            log.warning("reference=%s did not run; the report has no relative regret", reference)
            reference = None
        lines.append(
            write_report(
                [opts.out_dir],
                reference=reference,
                sections=opts.report_sections,
                companions=[c.out_dir for c in companions],
                regimes=opts.report_regimes,
            )
        )
    return "\n".join(lines)


__all__ = ["finish"]
