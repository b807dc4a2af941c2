"""Torch modules that may need transformers: text encoders, the embedding cache, oracle heads."""

from torchroute.models.embedding_cache import (
    EmbeddingCache,
    default_cache_root,
    embed_table,
)
from torchroute.models.encoders import (
    MINILM_NAME,
    EncoderNotFoundError,
    TextEncoder,
    load_encoder,
    minilm_encoder,
)
from torchroute.models.heads import (
    AccuracyHead,
    CostHead,
    FeatureHead,
    MultiHeadOracle,
    PropagationHead,
)
from torchroute.models.oracles import (
    AffinityOracle,
    OracleArtifactError,
    RewardOracle,
    affinity_from_accuracy,
    iqr_keep_mask,
    load_oracle,
    sample_graph,
    save_oracle,
    surrogate_utility,
)

__all__ = [
    "MINILM_NAME",
    "AccuracyHead",
    "AffinityOracle",
    "CostHead",
    "EmbeddingCache",
    "EncoderNotFoundError",
    "FeatureHead",
    "MultiHeadOracle",
    "OracleArtifactError",
    "PropagationHead",
    "RewardOracle",
    "TextEncoder",
    "affinity_from_accuracy",
    "default_cache_root",
    "embed_table",
    "iqr_keep_mask",
    "load_encoder",
    "load_oracle",
    "minilm_encoder",
    "sample_graph",
    "save_oracle",
    "surrogate_utility",
]
