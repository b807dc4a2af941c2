"""Check every learner config and env on a device against the CPU, its device discipline and
its throughput, in one unattended run (sized for under 5 minutes on one CUDA GPU).

The check is :mod:`torchroute.devicecheck` (its :mod:`~torchroute.devicecheck.main` module
describes every step: the CPU-vs-device comparison of each case with the CPU's random
draws, the placement of each learner's state, the device throughput); this script runs it.

    .venv/bin/python benchmarks/gpu_check.py [--device cuda] [--rounds 300] [--only linucb]
    .venv/bin/python benchmarks/gpu_check.py --device cpu --config-dir my_configs
"""

from __future__ import annotations

import sys

from torchroute.devicecheck.main import main

if __name__ == "__main__":
    sys.exit(main())
