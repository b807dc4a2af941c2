"""The subset env's per-trial noise and the OMD projection run on one intra-op thread on the
CPU (many small operators: with torch's thread pool each one waits for a join, 20x the CPU
time on a busy machine), and the caller's thread count comes back afterwards."""

from __future__ import annotations

import torch

import torchroute.envs.subset.base as subset_base
import torchroute.functional.projections as projections
from torchroute.devicecheck.problems import subset
from torchroute.functional.random import gamma
from torchroute.learners import RandomSubset


def _recording(fn, seen):
    def wrapped(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return fn(*args, **kwargs)

    return wrapped


def test_noise_and_projection_on_one_thread(monkeypatch):
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen_noise, seen_qp = [], []
        monkeypatch.setattr(subset_base, "gamma", _recording(gamma, seen_noise))
        flat = projections._halfspace_flat
        monkeypatch.setattr(projections, "_halfspace_flat", _recording(flat, seen_qp))
        env = subset("cpu", 3)
        learner = RandomSubset.from_problem(env.problem())
        gen = torch.Generator().manual_seed(0)
        context = env.context(0)
        env.step(context, learner.act(context, gen), gen)
        y = torch.rand(4, 6, dtype=torch.float64)
        a = torch.rand(4, 6, dtype=torch.float64)
        projections.project_capped_simplex_halfspace(y, 0.01, a, torch.full((4,), 0.3))
        assert seen_noise == [1, 1] and seen_qp == [1]
        assert torch.get_num_threads() == 2  # restored
    finally:
        torch.set_num_threads(previous)
