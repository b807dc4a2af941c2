"""LinUCB's ``act`` and bandit ``update`` on the fused CPU kernels.

``kernel="fused"``: the scores and the played arm's Sherman–Morrison step in one call each
(:mod:`torchroute.functional.ridge_kernel`), arms still at their prior scored without
reading ``A^{-1}``; the same decisions and state as the eager path up to rounding (the
kernels sum in another order), and the tie-break draws the same random numbers. Untried
arms tie exactly here and the tie-break picks one at random (``docs/reference/learners.md``);
the eager ``bmm`` may give some of them a width an ulp smaller (float32, ``d = 128``: the last
3 of 11 arms), which then decides the first rounds instead.
``kernel="fused_fp16"`` also keeps a float16 copy of ``lambda A^{-1}`` for the widths (float32
learners only): widths within ``2^-11 |x|^T |A^{-1}| |x|`` of the float32 ones in ``x^T A^{-1}
x``, so near-tied arms may be ordered differently; the state is updated in float32 as with
``"fused"``.

The shortcuts live outside the buffers (``state_dict`` is unchanged) and are rebuilt from
``a_inv`` and ``theta`` whenever those were replaced or changed by a torch operation (their
``data_ptr`` or ``_version`` moved: ``load_state_dict``, ``.to()``, an eager update).
Everything but a bandit round with one context (``only_played``, ``B = 1``) takes the
eager update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor

from torchroute.functional.random import Source, uniform
from torchroute.functional.ridge_kernel import (
    check_tensor,
    half_copy,
    kernel_available,
    kernel_library,
    linucb_act,
    prior_scales,
)
from torchroute.functional.ridge_kernel import sherman_morrison_played_ as _played_update_
from torchroute.learners.ridge_base import RidgeLearner
from torchroute.types import Context, Decision, Feedback

if TYPE_CHECKING:
    from torchroute.learners.linear import LinUCB

Kernel = Literal["torch", "fused", "fused_fp16", "auto"]
KERNELS = ("torch", "fused", "fused_fp16", "auto")


def check_kernel(owner: str, kernel: str) -> Kernel:
    """The kernel to run: ``kernel`` if known, the fused ones built (or loaded) now.

    ``"fused"``/``"fused_fp16"`` asked for explicitly raise
    :class:`~torchroute.functional.ridge_kernel.KernelUnavailableError` (one line) when the
    kernel cannot be had; ``"auto"`` is ``"fused"`` when it can and ``"torch"`` (with one
    warning per process) when it cannot.
    """
    if kernel not in KERNELS:
        raise ValueError(f"{owner}: kernel must be one of {KERNELS}, got {kernel!r}")
    if kernel == "auto":
        return "fused" if kernel_available() else "torch"
    if kernel != "torch":
        kernel_library()
    return kernel  # type: ignore[return-value]


@dataclass
class _Shortcuts:
    """The kernels' ``prior``/``half`` tensors and the state they were built from."""

    stamp: tuple
    prior: Tensor
    half: Tensor | None = None
    half_scale: Tensor | None = None


def _stamp(a_inv: Tensor, theta: Tensor) -> tuple:
    return (a_inv.data_ptr(), a_inv._version, theta.data_ptr(), theta._version, a_inv.dtype)


def _shortcuts(learner: LinUCB) -> tuple[Tensor, Tensor, _Shortcuts]:
    """``(a_inv, theta, shortcuts)``, rebuilding the shortcuts if the state moved."""
    a_inv, theta = learner.a_inv, learner.theta
    if a_inv.device.type != "cpu":
        raise ValueError(f"{type(learner).__name__}: kernel={learner.kernel!r} runs on the CPU")
    if not a_inv.is_contiguous():
        a_inv = learner.a_inv = a_inv.contiguous()
    if not theta.is_contiguous():
        theta = learner.theta = theta.contiguous()
    cached = learner.__dict__.get("_fused_shortcuts")
    if cached is None or cached.stamp != _stamp(a_inv, theta):
        # the state's checks run here, when it was replaced or changed, not every round
        r, k, d = learner.num_trials, learner.num_arms, a_inv.shape[-1]
        check_tensor("a_inv", a_inv, a_inv.dtype, (r, k, d, d))
        check_tensor("theta", theta, a_inv.dtype, (r, k, d))
        cached = _Shortcuts(_stamp(a_inv, theta), prior_scales(a_inv, theta))
        if learner.kernel == "fused_fp16":
            if a_inv.dtype != torch.float32:
                raise ValueError(
                    f"{type(learner).__name__}: kernel='fused_fp16' needs float32, "
                    f"got {a_inv.dtype}"
                )
            lam = torch.as_tensor(learner.lam, dtype=a_inv.dtype).expand(learner.num_trials)
            cached.half_scale = lam.contiguous()
            cached.half = half_copy(a_inv, cached.half_scale)
        learner.__dict__["_fused_shortcuts"] = cached
    return a_inv, theta, cached


def fused_act(learner: LinUCB, context: Context, generator: Source = None) -> Decision:
    """:meth:`LinUCB.act` in one kernel call (scores, tie-broken argmax, one-hot)."""
    learner._check_context(context)
    a_inv, theta, cut = _shortcuts(learner)
    x = context.x.to(theta.dtype).contiguous()
    # the draws of argmax_random_ties, the scores, the argmax and the one-hot in one call
    noise = uniform(generator, (*x.shape[:2], learner.num_arms), device=x.device)
    action, probs = linucb_act(
        a_inv,
        theta,
        x,
        learner.alpha,
        noise,
        cut.prior,
        cut.half,
        cut.half_scale,
        state_checked=True,
    )
    return Decision(probs=probs, action=action)


def fused_update(
    learner: LinUCB,
    context: Context,
    decision: Decision,
    feedback: Feedback,
    generator: Source = None,
) -> dict[str, Tensor]:
    """:meth:`RidgeLearner.update` with the played arm's Sherman–Morrison step in one call."""
    if not feedback.only_played or context.x.shape[1] != 1:
        return RidgeLearner.update(learner, context, decision, feedback, generator)
    learner._check_context(context)
    learner._check_feedback(context, feedback)
    a_inv, theta, cut = _shortcuts(learner)
    dtype = theta.dtype
    _played_update_(
        a_inv,
        theta,
        context.x[:, 0].to(dtype).contiguous(),  # [R, d]
        decision.action[:, 0].contiguous(),  # [R]
        feedback.reward[:, 0].to(dtype).contiguous(),  # [R, K]
        feedback.observed[:, 0].contiguous(),  # [R, K]
        cut.prior,
        cut.half,
        cut.half_scale,
        state_checked=True,
    )
    learner._tick(context)
    return {}
