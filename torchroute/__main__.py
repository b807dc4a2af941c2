"""``python -m torchroute`` (and ``torchrun -m torchroute``): the ``torchroute`` command."""

import sys

from torchroute.cli import main

sys.exit(main())
