"""Progress lines of a long step: none for a short one, then one every so often, never a
bar on a stream that is not a terminal."""

from __future__ import annotations

import io

from torchroute.heartbeat import Heartbeat, show_bar


class _Clock:
    """A clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_short_step_prints_nothing():
    clock, out = _Clock(), io.StringIO()
    beat = Heartbeat("encode", 10, "texts", delay=5, every=20, stream=out, clock=clock)
    for done in range(1, 11):
        clock.now += 0.4  # 4 s in all
        beat.update(done)
    beat.close()
    assert out.getvalue() == ""


def test_a_long_step_prints_a_line_after_the_delay_then_every_interval():
    clock, out = _Clock(), io.StringIO()
    beat = Heartbeat("encode", 100, "texts", delay=5, every=20, stream=out, clock=clock)
    for done in range(1, 101):
        clock.now += 1.0  # 100 s, one unit a second
        beat.update(done)
    beat.close()
    # lines at 5 s, then 25, 45, 65, 85 s (at most one per 20 s), and the closing line
    assert out.getvalue().splitlines() == [
        "encode: 5/100 texts (5%), 5 s, about 95 s left",
        "encode: 25/100 texts (25%), 25 s, about 75 s left",
        "encode: 45/100 texts (45%), 45 s, about 55 s left",
        "encode: 65/100 texts (65%), 65 s, about 35 s left",
        "encode: 85/100 texts (85%), 85 s, about 15 s left",
        "encode: 100 texts in 100 s",
    ]


def test_a_bar_only_when_asked_for_and_on_a_terminal():
    assert show_bar(True, _Terminal())
    assert not show_bar(False, _Terminal())
    assert not show_bar(True, io.StringIO())  # a log file: lines, not a bar


def test_a_long_simulation_reports_its_rounds_at_the_logging_marks(capsys, monkeypatch):
    """stderr is captured (not a terminal): lines at the logging marks past the delay (0 s
    here, a few seconds by default), named by the learner, whether or not a bar was asked."""
    import re

    import torch

    import torchroute.heartbeat as heartbeat
    from tests.conftest import make_table
    from torchroute.envs import SingleChoiceEnv
    from torchroute.learners import LinUCB
    from torchroute.loop import simulate

    monkeypatch.setattr(heartbeat, "DELAY_S", 0.0)
    monkeypatch.setattr(heartbeat, "EVERY_S", 0.0)
    env = SingleChoiceEnv(make_table(), rho=[0.0], seeds=[0], dtype=torch.float64)
    capsys.readouterr()
    simulate(LinUCB.from_problem(env.problem()), env, log_every=10, progress=True, desc="lin")
    lines = capsys.readouterr().err.splitlines()
    marks = [*range(10, env.horizon, 10), env.horizon]
    assert len(lines) == len(marks) + 1
    for line, done in zip(lines, marks, strict=False):
        assert re.fullmatch(rf"lin: {done}/{env.horizon} rounds \(\d+%\), \d+ s.*", line)
    assert re.fullmatch(rf"lin: {env.horizon} rounds in \d+ s", lines[-1])
