"""Progress of a long step on stderr without a progress bar: a line now and then.

A :class:`Heartbeat` says nothing for a step that ends within :data:`DELAY_S` seconds; a
longer one gets a line (``encode: 640/3559 texts (18%), 42 s, about 3 min left``) once the
delay has passed and then at most one every :data:`EVERY_S` seconds, and a closing line
when it ends. So a log file (stderr not a terminal) gets a handful of lines, not the
hundreds of carriage-return updates a bar writes. :func:`show_bar` says when a bar is
wanted instead: asked for, and stderr a terminal.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

#: seconds a step runs before its first line
DELAY_S = 5.0
#: seconds between two lines of one step
EVERY_S = 20.0


def show_bar(progress: bool, stream: TextIO | None = None) -> bool:
    """Whether to draw a progress bar: ``progress`` asked for it and ``stream`` (default:
    stderr) is a terminal. Otherwise a :class:`Heartbeat` reports the step."""
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    return bool(progress) and callable(isatty) and bool(isatty())


def _duration(seconds: float) -> str:
    """``42 s``, ``3 min``, ``1.5 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Heartbeat:
    """Lines on ``stream`` about a step of ``total`` units while it runs longer than ``delay``.

    Args:
        label: what the step is (``encode``), the start of each line.
        total: the units of the whole step (``3559``).
        unit: their name (``texts``).
        delay: seconds before the first line (default :data:`DELAY_S`).
        every: seconds between lines (default :data:`EVERY_S`).
        stream: where the lines go (default: stderr at each line).
        clock: seconds, monotonic (default :func:`time.monotonic`).
    """

    def __init__(
        self,
        label: str,
        total: int,
        unit: str,
        *,
        delay: float | None = None,
        every: float | None = None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.total, self.unit = label, int(total), unit
        self.delay = DELAY_S if delay is None else float(delay)
        self.every = EVERY_S if every is None else float(every)
        self.stream = stream
        self.clock = clock
        self.start = clock()
        self.next_at = self.start + self.delay
        self.done = 0
        self.lines = 0

    def update(self, done: int) -> None:
        """``done`` units of ``total`` are finished; a line when one is due."""
        self.done = int(done)
        now = self.clock()
        if now < self.next_at:
            return
        elapsed = now - self.start
        line = f"{self.label}: {self.done}/{self.total} {self.unit}"
        if self.total > 0:
            line += f" ({100 * self.done / self.total:.0f}%)"
        line += f", {_duration(elapsed)}"
        if 0 < self.done < self.total:
            line += f", about {_duration(elapsed * (self.total - self.done) / self.done)} left"
        self._write(line)
        self.next_at = now + self.every

    def close(self) -> None:
        """The closing line (``encode: 3559 texts in 3 min``), when the step had any line."""
        if self.lines:
            elapsed = _duration(self.clock() - self.start)
            self._write(f"{self.label}: {self.done} {self.unit} in {elapsed}")

    def _write(self, line: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        print(line, file=stream, flush=True)
        self.lines += 1


__all__ = ["DELAY_S", "EVERY_S", "Heartbeat", "show_bar"]
