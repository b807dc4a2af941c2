"""Context features from embeddings: optional PCA (fit on the train split) and a bias column.

Feature sources (``features.source`` of the simulate config): ``pca`` (the embeddings
projected with :func:`project_features`, the default), ``raw`` (the embeddings themselves)
and ``oracle`` (the pre-trained oracle's feature head applied to the embeddings,
:func:`oracle_features`; the bandit context of every online learner in the CABS paper).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from torchroute.buildable import buildable
from torchroute.errors import OptionError

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
        raise OptionError(f"features.pca_dim must be in 1..{x.shape[1]}, got {pca_dim}")
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
        raise OptionError(
            f"features.source=oracle needs a module with features(e), got {type(oracle).__name__}"
        )
    was_training = oracle.training
    oracle.eval()
    dtype = next(oracle.parameters()).dtype
    with torch.no_grad():
        parts = [oracle.features(e.to(dtype)) for e in embeddings.split(chunk)]
    oracle.train(was_training)
    return finish_features(torch.cat(parts).double(), bias, normalize)


#: the feature map's file in a run folder (``weights_only`` loadable)
FEATURES_FILE = "features.pt"
#: the oracle feature head of ``features.source=oracle`` (an oracle artifact)
FEATURE_ORACLE_FILE = "feature_oracle.pt"


@buildable
class FeatureMap:
    """Embeddings ``[B, e]`` -> bandit features ``[B, d]``, as the simulation built them.

    The three ``features.source`` values: ``raw`` (row normalisation and bias only),
    ``pca`` (centred and projected on the principal directions fitted on the train split,
    then normalised, plus a bias) and ``oracle`` (a pre-trained feature head). A ``pca``
    map is fitted once with :meth:`fit`, with the operations of :func:`project_features`,
    so the features of the table's queries are the ones the learner saw. A run saves its
    map (:meth:`save`) and serving loads it (:meth:`load`): nothing is refitted.

    Args:
        mean: ``[1, e]`` float64 centre of the fit rows (``pca`` only).
        components: ``[p, e]`` float64 principal directions (``pca`` only).
        oracle: a module with ``features(e [m, e]) -> [m, d_phi]`` (``oracle`` only).
        bias: append a constant feature.
        normalize: rescale each row to unit norm (before the bias).
        source: the ``features.source`` it implements (inferred when ``None``).
    """

    def __init__(
        self,
        mean: Tensor | None = None,
        components: Tensor | None = None,
        oracle: nn.Module | None = None,
        bias: bool = True,
        normalize: bool = True,
        source: str | None = None,
    ) -> None:
        if (mean is None) != (components is None):
            raise ValueError("FeatureMap needs both mean and components, or neither")
        if oracle is not None and components is not None:
            raise ValueError("FeatureMap takes a PCA projection or an oracle, not both")
        self.mean, self.components, self.oracle = mean, components, oracle
        self.bias, self.normalize = bias, normalize
        inferred = "oracle" if oracle is not None else "pca" if mean is not None else "raw"
        self.source = source or inferred

    @classmethod
    def fit(
        cls,
        embeddings: Tensor,
        fit_rows: np.ndarray | Tensor,
        pca_dim: int | None,
        bias: bool = True,
        normalize: bool = True,
    ) -> FeatureMap:
        """The map of ``project_features(embeddings, fit_rows, pca_dim, bias, normalize)``.

        Args:
            embeddings: ``[n, e]`` table embeddings.
            fit_rows: rows the projection is fitted on (the train split).
            pca_dim: number of principal directions ``p``; ``None`` keeps the embeddings.
            bias: append a constant feature.
            normalize: scale each feature row to unit norm.
        """
        if pca_dim is None:
            return cls(bias=bias, normalize=normalize)
        mean, components = fit_pca(embeddings, fit_rows, pca_dim)
        return cls(mean, components, bias=bias, normalize=normalize)

    def __call__(self, embeddings: Tensor) -> Tensor:
        """``[B, e]`` embeddings -> ``[B, d]`` float32 features."""
        if self.oracle is not None:
            return oracle_features(embeddings, self.oracle, self.bias, self.normalize)
        x = embeddings.double()
        if self.components is not None:
            x = (x - self.mean) @ self.components.T  # [B, p]
        return finish_features(x, self.bias, self.normalize)

    def state(self) -> dict[str, Any]:
        """Plain tensors and values (``weights_only`` loadable); the oracle is saved apart."""
        return {
            "source": self.source,
            "bias": self.bias,
            "normalize": self.normalize,
            "mean": self.mean,
            "components": self.components,
        }

    def save(self, folder: str | Path) -> Path:
        """Write ``features.pt`` (and ``feature_oracle.pt``) into ``folder`` atomically."""
        from torchroute.checkpoint import save_checkpoint

        folder = Path(folder)
        if self.oracle is not None:
            from torchroute.models.oracles import save_oracle

            save_oracle(self.oracle, folder / FEATURE_ORACLE_FILE)
        return save_checkpoint(folder / FEATURES_FILE, {"features": self.state()})

    @classmethod
    def load(cls, folder: str | Path) -> FeatureMap:
        """The map a run saved in ``folder`` (read with ``weights_only=True``)."""
        from torchroute.checkpoint import load_checkpoint

        folder = Path(folder)
        state = load_checkpoint(folder / FEATURES_FILE)["features"]
        oracle = None
        if state["source"] == "oracle":
            from torchroute.models.oracles import load_oracle

            oracle = load_oracle(folder / FEATURE_ORACLE_FILE)
        return cls(
            state["mean"],
            state["components"],
            oracle=oracle,
            bias=bool(state["bias"]),
            normalize=bool(state["normalize"]),
            source=str(state["source"]),
        )
