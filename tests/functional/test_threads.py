"""The scoped single-thread region of the small-op solvers."""

from __future__ import annotations

import pytest
import torch

from torchroute.functional.graph_program import graph_squarecb_probs
from torchroute.functional.threads import single_threaded


@pytest.fixture
def two_threads():
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(previous)


def test_single_threaded_on_the_cpu_and_restored_after(two_threads):
    with single_threaded("cpu"):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with pytest.raises(KeyError), single_threaded(torch.device("cpu")):
        assert torch.get_num_threads() == 1
        raise KeyError("boom")
    assert torch.get_num_threads() == 2


def test_single_threaded_leaves_other_devices_alone(two_threads):
    with single_threaded("meta"):
        assert torch.get_num_threads() == 2


def test_eager_solver_runs_on_one_thread_and_restores_the_setting(two_threads, monkeypatch):
    seen = []
    real = torch.linalg.cholesky_ex

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.linalg, "cholesky_ex", spy)
    f = torch.tensor([[0.1, 0.5, 0.9], [0.3, 0.2, 0.8]])
    p = graph_squarecb_probs(f, torch.eye(3, dtype=torch.bool), 4.0, kernel="torch")
    torch.testing.assert_close(p.sum(-1), torch.ones(2))
    assert torch.get_num_threads() == 2
    assert seen and set(seen) == {1}
