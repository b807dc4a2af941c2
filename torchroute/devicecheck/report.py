"""The rows of a device check as JSON (``--json``): one per case, one per throughput figure.

The file is rewritten (atomically: a temporary file renamed over it) after every case, so a
run stopped by a time limit leaves the rows of the cases it finished.
"""

from __future__ import annotations

import json
import math
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

import torch

from torchroute.devicecheck.cases import Case
from torchroute.devicecheck.check import CaseResult


def _number(value: float) -> float | None:
    """A finite float, or ``None`` (JSON has no NaN)."""
    return float(value) if math.isfinite(value) else None


class Report:
    """Collects the rows of one run and writes them to ``path`` (nothing when ``None``).

    The file is ``{"device", "device_name", "torch", "python", "rounds", "seed", "cases":
    [...], "throughput": [...], "seconds", "failures", "passed"}``; a case row is ``{"case",
    "env", "rtol", "atol", "max_rel_err", "draws", "seconds", "trial_rounds_per_s",
    "status", "failures"}``, a throughput row ``{"name", "trial_rounds_per_s"}``.
    """

    def __init__(self, path: str | Path | None, device: torch.device, rounds: int, seed: int):
        self.path = None if path is None else Path(path)
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
        self.data: dict[str, Any] = {
            "device": str(device),
            "device_name": name,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "rounds": rounds,
            "seed": seed,
            "cases": [],
            "throughput": [],
            "seconds": None,
            "failures": [],
            "passed": None,
        }

    def case(self, name: str, case: Case, result: CaseResult) -> None:
        """Add the row of case ``name`` and write the file."""
        self.data["cases"].append(
            {
                "case": name,
                "env": case.env,
                "rtol": case.tol.rtol,
                "atol": case.tol.atol,
                "max_rel_err": _number(result.max_err),
                "draws": result.draws,
                "seconds": round(result.seconds, 3),
                "trial_rounds_per_s": _number(result.rate),
                "status": "ok" if not result.failures else "FAIL",
                "failures": list(result.failures),
            }
        )
        self.write()

    def throughput(self, name: str, rate: float) -> None:
        """Add a throughput row (trial-rounds per second) and write the file."""
        self.data["throughput"].append({"name": name, "trial_rounds_per_s": _number(rate)})
        self.write()

    def finish(self, seconds: float, failures: list[str]) -> None:
        """Close the run: its time, every failure, whether it passed; write the file."""
        self.data.update(seconds=round(seconds, 3), failures=failures, passed=not failures)
        self.write()

    def write(self) -> None:
        """Write the rows to ``path`` atomically (no-op without a path)."""
        if self.path is None:
            return
        fd, tmp = tempfile.mkstemp(dir=self.path.resolve().parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(self.data, handle, indent=1)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
