"""Pure batched math: utilities, ridge statistics, sampling, SquareCB, MLPs, oracle math."""

from torchroute.functional.graph_program import graph_squarecb_probs, graph_squarecb_value
from torchroute.functional.mlp import mlp_forward, mlp_init, z_inverse_update, z_inverse_update_
from torchroute.functional.oracle import (
    affinity_from_accuracy,
    edge_probability,
    iqr_keep_mask,
    sample_graph,
    surrogate_utility,
)
from torchroute.functional.projections import (
    project_capped_simplex,
    project_capped_simplex_halfspace,
    safe_box,
    support_function,
    support_maximiser,
)
from torchroute.functional.random import TrialRNG, trial_keys
from torchroute.functional.ridge import (
    ridge_init,
    ridge_predict,
    ridge_width,
    sherman_morrison,
    woodbury,
)
from torchroute.functional.sampling import (
    argmax_random_ties,
    one_hot_probs,
    probability_floor,
    sample_categorical,
    sample_multinomial,
)
from torchroute.functional.squarecb import squarecb_probs
from torchroute.functional.utility import utility

__all__ = [
    "TrialRNG",
    "affinity_from_accuracy",
    "argmax_random_ties",
    "edge_probability",
    "graph_squarecb_probs",
    "graph_squarecb_value",
    "iqr_keep_mask",
    "mlp_forward",
    "mlp_init",
    "one_hot_probs",
    "probability_floor",
    "project_capped_simplex",
    "project_capped_simplex_halfspace",
    "ridge_init",
    "ridge_predict",
    "ridge_width",
    "safe_box",
    "sample_categorical",
    "sample_graph",
    "sample_multinomial",
    "sherman_morrison",
    "squarecb_probs",
    "support_function",
    "support_maximiser",
    "surrogate_utility",
    "trial_keys",
    "utility",
    "woodbury",
    "z_inverse_update",
    "z_inverse_update_",
]
