"""Context features from embeddings: optional PCA (fit on the train split) and a bias column.

Feature sources (``features.source`` of the simulate config): ``pca`` (the embeddings
projected with :func:`project_features`, the default), ``raw`` (the embeddings themselves)
and ``oracle`` (the pre-trained oracle's feature head applied to the embeddings,
:func:`oracle_features`; the bandit context of every online learner in the CABS paper).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

#: the values ``features.source`` accepts
FEATURE_SOURCES = ("pca", "raw", "oracle")


def project_features(
    embeddings: Tensor,
    fit_rows: np.ndarray | Tensor,
    pca_dim: int | None = None,
    bias: bool = True,
    normalize: bool = True,
) -> Tensor:
    """Turn ``[n, D]`` embeddings into bandit features ``[n, d]``.

    With ``pca_dim``, the embeddings are centred and projected on the top ``pca_dim``
    principal directions of the rows ``fit_rows`` (the train split, so no test
    information leaks); rows are then rescaled to unit norm (``normalize``) and a constant
    1 is appended (``bias``) so each linear arm model has an intercept.

    Args:
        embeddings: ``[n, D]``.
        fit_rows: indices of the rows the projection is fitted on.
        pca_dim: target dimension (``None`` keeps all ``D``).
        bias: append a constant feature.
        normalize: rescale each row to unit norm (before the bias).

    Returns:
        ``[n, d]`` float32 with ``d = (pca_dim or D) + bias``.
    """
    x = embeddings.double()
    if pca_dim is not None:
        mean, components = fit_pca(x, fit_rows, pca_dim)
        x = (x - mean) @ components.T
    return finish_features(x, bias, normalize)


def fit_pca(
    embeddings: Tensor, fit_rows: np.ndarray | Tensor, pca_dim: int
) -> tuple[Tensor, Tensor]:
    """``(mean [1, D], components [pca_dim, D])`` (float64) of the rows ``fit_rows``."""
    x = embeddings.double()
    if not 1 <= pca_dim <= x.shape[1]:
        raise ValueError(f"features.pca_dim must be in 1..{x.shape[1]}, got {pca_dim}")
    fit = x[torch.as_tensor(fit_rows, dtype=torch.long)]
    mean = fit.mean(0, keepdim=True)
    # Exact SVD of the (n_fit x D) train block: D is a few hundred, this is instant.
    _, _, vh = torch.linalg.svd(fit - mean, full_matrices=False)
    return mean, vh[:pca_dim]


def finish_features(x: Tensor, bias: bool = True, normalize: bool = True) -> Tensor:
    """Unit rows (``normalize``) and a constant column (``bias``): ``[n, d] -> [n, d + bias]``
    float32."""
    if normalize:
        x = x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)
    if bias:
        x = torch.cat([x, x.new_ones(x.shape[0], 1)], dim=1)
    return x.float()


def oracle_features(
    embeddings: Tensor,
    oracle: nn.Module,
    bias: bool = True,
    normalize: bool = True,
    chunk: int = 4096,
) -> Tensor:
    """Bandit features from a pre-trained oracle's feature head (CABS paper, section 5).

    ``phi = oracle.features(e)`` (``d_phi = 128`` for the CABS oracle) in eval mode and
    without gradients, then the row normalisation and bias column of
    :func:`finish_features`.

    Args:
        embeddings: ``[n, e]`` encoder embeddings.
        oracle: a module with ``features(e [m, e]) -> [m, d_phi]`` (a ``MultiHeadOracle``).
        bias: append a constant feature.
        normalize: rescale each row to unit norm (before the bias).
        chunk: rows per forward pass.

    Returns:
        ``[n, d_phi + bias]`` float32.
    """
    if not hasattr(oracle, "features"):
        raise ValueError(
            f"features.source=oracle needs a module with features(e), got {type(oracle).__name__}"
        )
    was_training = oracle.training
    oracle.eval()
    dtype = next(oracle.parameters()).dtype
    with torch.no_grad():
        parts = [oracle.features(e.to(dtype)) for e in embeddings.split(chunk)]
    oracle.train(was_training)
    return finish_features(torch.cat(parts).double(), bias, normalize)
