"""Routing tables: the container, loaders for real benchmarks, and synthetic generators."""

from torchroute.data.generic import model_costs, read_costs, save_table, to_frame
from torchroute.data.json_scores import load_json_scores
from torchroute.data.loader import load_table
from torchroute.data.openllm import load_openllm_leaderboard
from torchroute.data.routerbench import load_routerbench, parse_prompt
from torchroute.data.splits import carve_validation, random_split
from torchroute.data.synthetic import (
    ARMS,
    DOMAINS,
    linear_contextual_table,
    synthetic_text_benchmark,
)
from torchroute.data.table import SPLITS, RoutingTable, TableError

__all__ = [
    "ARMS",
    "DOMAINS",
    "SPLITS",
    "RoutingTable",
    "TableError",
    "carve_validation",
    "linear_contextual_table",
    "load_json_scores",
    "load_openllm_leaderboard",
    "load_routerbench",
    "load_table",
    "model_costs",
    "parse_prompt",
    "random_split",
    "read_costs",
    "save_table",
    "synthetic_text_benchmark",
    "to_frame",
]
