"""``python -m torchroute.devicecheck``: the device check of the installed package
(:mod:`torchroute.devicecheck.main`)."""

from __future__ import annotations

import sys

from torchroute.devicecheck.main import main

if __name__ == "__main__":
    sys.exit(main())
