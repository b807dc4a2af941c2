"""``python -m torchroute.cli``: the ``torchroute`` command."""

import sys

from torchroute.cli import main

if __name__ == "__main__":
    sys.exit(main())
