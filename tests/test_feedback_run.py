"""The ``feedback`` option through a ``simulate`` config: a bad value is refused before
anything is written; a good one changes what the learners see, not the true results."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.conftest import LINUCB_NODE, tiny_run_config
from torchroute.errors import ConfigError
from torchroute.run import run_config

BEST = {"_target_": "torchroute.learners.BestSingleArm.from_problem", "_partial_": True}


def test_a_bad_feedback_option_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "run"
    cfg = tiny_run_config(out, {"linucb": LINUCB_NODE}, "feedback={delay:-2}")
    with pytest.raises(ConfigError) as info:
        run_config(cfg)
    message = str(info.value)
    assert "feedback.delay must be a whole number of rounds >= 0" in message
    assert "\n" not in message and not out.exists()


def test_late_rare_noisy_feedback_moves_the_learner_not_a_static_router(tmp_path):
    learners = {"linucb": LINUCB_NODE, "best_single": BEST}
    plain = tiny_run_config(tmp_path / "a", learners)
    late = tiny_run_config(tmp_path / "b", learners, "feedback={delay:3,rate:0.5,noise:0.2}")
    run_config(plain)
    run_config(late)
    a, b = (pd.read_csv(tmp_path / x / "results.csv") for x in "ab")
    key = ["learner", "rho", "seed"]
    a, b = a.sort_values(key).reset_index(drop=True), b.sort_values(key).reset_index(drop=True)
    static = a["learner"] == "best_single"
    # the static router does not learn: its true utility is the same
    assert a.loc[static, "avg_utility"].tolist() == b.loc[static, "avg_utility"].tolist()
    assert a.loc[~static, "avg_utility"].tolist() != b.loc[~static, "avg_utility"].tolist()
