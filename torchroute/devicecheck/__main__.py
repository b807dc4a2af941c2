"""``python -m torchroute.devicecheck [--device cuda] [--config-dir DIR] ...``: the device
check of every learner and env config (:mod:`torchroute.devicecheck.main`), from an install
as from a checkout (``benchmarks/gpu_check.py`` runs the same)."""

from __future__ import annotations

import sys

from torchroute.devicecheck.main import main

if __name__ == "__main__":
    sys.exit(main())
