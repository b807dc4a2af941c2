"""The eigen-learners (HPG, PF-HPG, the Euclidean and flattened-NPG baselines on the nuclear
ball) are invariant to the conventions of their eigendecompositions: eigenvector signs and
the order of the slots are the solver's choice (they differ between CPU and CUDA ``eigh``),
so two learners whose states differ only by those choices must follow the same trajectory
and represent the same matrices, which is what the device check compares."""

from __future__ import annotations

import pytest
import torch

from tests.learners.helpers import F64, feedback_for
from torchroute.devicecheck.compare import comparable_state
from torchroute.learners import HPG, EuclideanQuadPG, FlattenedNPG, ParameterFreeHPG
from torchroute.types import Context

R, K, D, T = 3, 3, 6, 40

BUILDERS = {
    "hpg": lambda: HPG(R, K, D, tau=1.5, beta=0.3, eta=0.8, capacity=4),
    "pf_hpg": lambda: ParameterFreeHPG(R, K, D, horizon=T, capacity=4),
    "euclidean_quad_pg": lambda: EuclideanQuadPG(R, K, D, tau=1.0, eta=0.6, capacity=4),
    "flattened_npg": lambda: FlattenedNPG(R, K, D, tau=1.0, eta=0.3, capacity=4),
}


def _values_name(learner) -> str:
    return "theta" if hasattr(learner, "theta") else "lam"


def _scramble(learner, gen: torch.Generator) -> None:
    """Flip the sign of random eigenvector columns and permute the slots of every model:
    the same matrices, another decomposition."""
    values = getattr(learner, _values_name(learner))
    basis = learner.basis
    signs = torch.randint(0, 2, values.shape, generator=gen).to(F64) * 2 - 1
    perm = torch.argsort(torch.rand(values.shape, generator=gen), dim=-1)
    new_values = values.gather(-1, perm)
    new_basis = (basis * signs[..., None, :]).gather(-1, perm[..., None, :].expand_as(basis))
    values.copy_(new_values)
    basis.copy_(new_basis)


def _flipping_eigh(gen: torch.Generator):
    """``torch.linalg.eigh`` with the sign of random eigenvectors flipped."""
    eigh = torch.linalg.eigh

    def flipped(a, *args, **kwargs):
        vals, vecs = eigh(a, *args, **kwargs)
        signs = torch.randint(0, 2, vals.shape, generator=gen).to(vecs.dtype) * 2 - 1
        return torch.return_types.linalg_eigh((vals, vecs * signs[..., None, :]))

    return flipped


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_same_trajectory_under_other_eigen_conventions(name, monkeypatch):
    plain, other = BUILDERS[name]().to(F64), BUILDERS[name]().to(F64)
    g = torch.Generator().manual_seed(0)
    xs = torch.nn.functional.normalize(torch.randn(T, R, 1, D, generator=g, dtype=F64), dim=-1)
    rewards = torch.rand(T, R, 1, K, generator=g, dtype=F64) * 2 - 0.5
    gen_a, gen_b = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    scramble_gen = torch.Generator().manual_seed(2)
    full = 0
    for t in range(T):
        context = Context(x=xs[t])
        decision = plain.act(context, gen_a)
        mirrored = other.act(context, gen_b)
        torch.testing.assert_close(mirrored.probs, decision.probs, rtol=0, atol=1e-10)
        feedback = feedback_for(plain, decision, rewards[t])
        plain.update(context, decision, feedback, gen_a)
        with monkeypatch.context() as patch:
            patch.setattr(torch.linalg, "eigh", _flipping_eigh(scramble_gen))
            other.update(context, decision, feedback, gen_b)
        _scramble(other, scramble_gen)
        values = getattr(plain, _values_name(plain))
        full += int(((values != 0).sum(-1) == values.shape[-1]).any())
    assert full > 0  # the capacity binds: compaction chose among the slots
    assert not torch.equal(plain.basis, other.basis)  # the decompositions do differ
    mine, theirs = comparable_state(other), comparable_state(plain)
    assert mine.keys() == theirs.keys()
    assert not any(key in ("basis", "theta", "lam") for key in mine)  # compared as matrices
    for key, value in theirs.items():
        if torch.is_tensor(value) and value.is_floating_point():
            torch.testing.assert_close(mine[key], value, rtol=0, atol=1e-10, msg=key)
        else:
            assert torch.equal(mine[key], value) if torch.is_tensor(value) else mine[key] == value
