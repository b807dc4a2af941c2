"""Context features from embeddings: optional PCA (fit on the train split) and a bias column."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


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
        if not 1 <= pca_dim <= x.shape[1]:
            raise ValueError(f"features.pca_dim must be in 1..{x.shape[1]}, got {pca_dim}")
        fit = x[torch.as_tensor(fit_rows, dtype=torch.long)]
        mean = fit.mean(0, keepdim=True)
        # Exact SVD of the (n_fit x D) train block: D is a few hundred, this is instant.
        _, _, vh = torch.linalg.svd(fit - mean, full_matrices=False)
        x = (x - mean) @ vh[:pca_dim].T
    if normalize:
        x = x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)
    if bias:
        x = torch.cat([x, x.new_ones(x.shape[0], 1)], dim=1)
    return x.float()
