"""The map from encoder embeddings to the bandit features a served learner was trained on."""

from __future__ import annotations

import numpy as np
from torch import Tensor, nn

from torchroute.features import finish_features, fit_pca, oracle_features


class FeatureMap:
    """Embeddings ``[B, e]`` -> bandit features ``[B, d]``, as the simulation built them.

    The three ``features.source`` values of the simulate config (``torchroute.features``):
    ``raw`` (row normalisation and bias only), ``pca`` (centred and projected on the
    principal directions fitted on the train split, then normalised, plus a bias) and
    ``oracle`` (a pre-trained feature head). A ``pca`` map is fitted once with
    :meth:`fit`, with the same operations as :func:`~torchroute.features.project_features`,
    so the features of the table's queries are the ones the learner saw.

    Args:
        mean: ``[1, e]`` float64 centre of the fit rows (``pca`` only).
        components: ``[p, e]`` float64 principal directions (``pca`` only).
        oracle: a module with ``features(e [m, e]) -> [m, d_phi]`` (``oracle`` only).
        bias: append a constant feature.
        normalize: rescale each row to unit norm (before the bias).
    """

    def __init__(
        self,
        mean: Tensor | None = None,
        components: Tensor | None = None,
        oracle: nn.Module | None = None,
        bias: bool = True,
        normalize: bool = True,
    ) -> None:
        if (mean is None) != (components is None):
            raise ValueError("FeatureMap needs both mean and components, or neither")
        if oracle is not None and components is not None:
            raise ValueError("FeatureMap takes a PCA projection or an oracle, not both")
        self.mean, self.components, self.oracle = mean, components, oracle
        self.bias, self.normalize = bias, normalize

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
