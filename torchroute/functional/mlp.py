"""Batched MLPs for ``R`` independent trials, and the last-layer ``Z^{-1}`` update.

Each trial owns an MLP ``f(x, k)``: a ReLU trunk of width ``h`` whose output is the last-layer
feature ``phi(x)``, then one linear output per arm. The weights of all ``R`` trials are stacked
(``w [R, d_in, d_out]``, ``b [R, d_out]``) and applied with :func:`torch.baddbmm`, so one
forward pass serves every trial without a Python loop, and the gradient of a loss summed over
trials gives each trial exactly its own gradient (``docs/reference/learners.md``).
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import Tensor

from torchroute.functional.random import Source, uniform
from torchroute.functional.ridge import sherman_morrison_, woodbury


def mlp_param_names(num_layers: int) -> list[str]:
    """Names of the stacked weights: ``w0, b0, ..., w{L-1}, b{L-1}, w_out, b_out``."""
    names = [f"{p}{i}" for i in range(num_layers) for p in ("w", "b")]
    return [*names, "w_out", "b_out"]


def mlp_init(
    num_trials: int,
    dim: int,
    num_arms: int,
    hidden: int = 64,
    num_layers: int = 1,
    generator: Source = None,
    dtype: torch.dtype = torch.float32,
) -> dict[str, Tensor]:
    """He-uniform weights for ``R`` independent MLPs, zero biases.

    Trunk layers draw ``U(-sqrt(6 / d_in), sqrt(6 / d_in))``, the output layer
    ``U(-1 / sqrt(h), 1 / sqrt(h))``, in the order ``w0, ..., w{L-1}, w_out``.

    Args:
        num_trials: ``R``.
        dim: ``d`` input features.
        num_arms: ``K`` outputs.
        hidden: trunk width ``h``.
        num_layers: trunk depth ``L``.
        generator: source of the weights (CPU): a generator, or per-trial streams that
            give each trial the weights it has in any other set of trials.
        dtype: dtype of the weights.

    Returns:
        ``{"w0": [R, d, h], "b0": [R, h], ..., "w_out": [R, h, K], "b_out": [R, K]}``.
    """
    sizes = [dim] + [hidden] * num_layers
    params: dict[str, Tensor] = {}
    for i, (d_in, d_out) in enumerate(itertools.pairwise(sizes)):
        bound = math.sqrt(6.0 / d_in)
        w = uniform(generator, (num_trials, d_in, d_out), dtype=dtype)
        params[f"w{i}"] = (2 * w - 1) * bound
        params[f"b{i}"] = torch.zeros(num_trials, d_out, dtype=dtype)
    bound = 1.0 / math.sqrt(hidden)
    w = uniform(generator, (num_trials, hidden, num_arms), dtype=dtype)
    params["w_out"] = (2 * w - 1) * bound
    params["b_out"] = torch.zeros(num_trials, num_arms, dtype=dtype)
    return params


def mlp_forward(params: dict[str, Tensor], x: Tensor) -> tuple[Tensor, Tensor]:
    """Apply ``R`` MLPs, each to its own trial's contexts.

    Args:
        params: the stacked weights of :func:`mlp_init` (names of :func:`mlp_param_names`).
        x: ``[R, B, d]`` contexts.

    Returns:
        ``(f [R, B, K], phi [R, B, h])``: the per-arm outputs and the trunk output.
    """
    h = x
    for i in range(len(params) // 2 - 1):
        h = torch.relu(torch.baddbmm(params[f"b{i}"][:, None, :], h, params[f"w{i}"]))
    f = torch.baddbmm(params["b_out"][:, None, :], h, params["w_out"])  # [R, B, K]
    return f, h


def z_inverse_update(z_inv: Tensor, phi: Tensor, weight: Tensor) -> Tensor:
    """``Z_k <- Z_k + sum_b w[b, k] phi_b phi_b^T``, on the inverse (Sherman–Morrison/Woodbury).

    Args:
        z_inv: ``[R, K, h, h]`` inverses of ``Z_k``.
        phi: ``[R, B, h]`` last-layer features.
        weight: ``[R, B, K]``, bool or non-negative (0 leaves arm ``k`` unchanged, 1 adds the
            observation).

    Returns:
        The updated ``[R, K, h, h]``.
    """
    r, k, h, _ = z_inv.shape
    phis = phi[:, None].expand(r, k, phi.shape[1], h)  # [R, K, B, h]
    w = weight.transpose(1, 2).to(z_inv.dtype)  # [R, K, B]
    dummy = z_inv.new_zeros(r, k, h)  # theta is not tracked
    return woodbury(z_inv, dummy, phis, torch.zeros_like(w), w)[0]


def z_inverse_update_(z_inv: Tensor, phi: Tensor, weight: Tensor) -> None:
    """In-place :func:`z_inverse_update`: overwrites ``z_inv [R, K, h, h]``.

    Same arguments and numbers. With one context per trial (``B = 1``) on the CPU and at
    most half the arms observed (bandit feedback: the played arm), only the observed arms'
    matrices are read and written: one gathered Sherman–Morrison step per slot, the
    ``j``-th observed arm of every trial (an arm with weight 0 is left as it is, as in the
    dense update, which adds exactly 0 to it); otherwise the dense update is copied in.
    """
    r, k, h, _ = z_inv.shape
    if phi.shape[1] != 1 or z_inv.device.type != "cpu" or not z_inv.is_contiguous():
        z_inv.copy_(z_inverse_update(z_inv, phi, weight))
        return
    w = weight[:, 0].to(z_inv.dtype)  # [R, K]
    slots = int((w != 0).sum(-1).amax())  # a host read, free on the CPU
    if 2 * slots > k:
        z_inv.copy_(z_inverse_update(z_inv, phi, weight))
        return
    order = (w != 0).to(torch.int8).argsort(-1, descending=True)  # observed arms first
    flat = z_inv.view(r * k, h, h)
    rows = torch.arange(r, device=z_inv.device) * k
    x = phi[:, 0].to(z_inv.dtype)  # [R, h]
    zeros = x.new_zeros(r)
    for slot in range(slots):
        arm = order[:, slot]  # [R]
        index = rows + arm
        z_sel = flat.index_select(0, index)  # [R, h, h], a copy
        sherman_morrison_(z_sel, x.new_zeros(r, h), x, zeros, w.gather(1, arm[:, None])[:, 0])
        flat.index_copy_(0, index, z_sel)
