"""The console of the ``torchroute`` command: one bare line per INFO message, the libraries
it drives quiet unless ``-v``."""

from __future__ import annotations

import logging
import os


class ConsoleFormatter(logging.Formatter):
    """INFO lines as their bare message (``linucb: 9 trials x 600 rounds, ...``); warnings,
    errors and every line under ``-v`` with their level and logger."""

    def __init__(self, verbose: bool) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")
        self.verbose = verbose

    def format(self, record: logging.LogRecord) -> str:
        """The record as a console line."""
        if record.levelno == logging.INFO and not self.verbose:
            return record.getMessage()
        return super().format(record)


#: loggers of the libraries torchroute drives whose INFO lines only ``-v`` shows
_CHATTY = (
    "lightning",
    "lightning.pytorch",
    "lightning.fabric",
    "lightning_fabric",
    "wandb",
    "matplotlib",
)


def quiet_console() -> None:
    """Lightning's and wandb's own INFO lines and Lightning's deprecation notices off (``-v``
    keeps them): the console holds one line per learner and the report."""
    import warnings

    for name in _CHATTY:
        logging.getLogger(name).setLevel(logging.WARNING)
    # transformers' "Loading weights" bar (read when transformers is first imported)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*")


__all__ = ["ConsoleFormatter", "quiet_console"]
