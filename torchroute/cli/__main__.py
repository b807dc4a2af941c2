"""``python -m torchroute.cli``: the ``torchroute`` command."""

import sys

from torchroute.cli import main

sys.exit(main())
