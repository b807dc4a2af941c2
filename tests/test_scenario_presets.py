"""The scenario config group composes with the leaderboard presets (``scenario=<name>``)."""

from __future__ import annotations

import pytest

from torchroute.configs_path import compose_config
from torchroute.envs.scenario import parse_scenario

LEADERBOARDS = ("routerbench_leaderboard", "openllm_leaderboard", "routerdc_leaderboard")
EVENTS = {
    "new_model": [{"kind": "new_model", "arm": "best", "at": 0.5}],
    "drift": [{"kind": "drift", "arm": "best", "at": 0.5, "score_shift": -0.3}],
    "price": [{"kind": "price", "arm": "priciest", "at": 0.5, "factor": 0.1}],
}


@pytest.mark.parametrize("preset", LEADERBOARDS)
@pytest.mark.parametrize("scenario", ["stationary", *EVENTS])
def test_each_leaderboard_composes_with_each_scenario(preset, scenario):
    cfg = compose_config("simulate", [f"experiment={preset}", f"scenario={scenario}"])
    events = cfg.env.get("scenario")
    if scenario == "stationary":
        assert events is None and cfg.out_dir == f"outputs/{preset}"
        return
    assert [dict(e) for e in events] == EVENTS[scenario]
    assert [e.kind for e in parse_scenario([dict(e) for e in events])] == [scenario]
    assert cfg.out_dir == f"outputs/{preset}_{scenario}"  # beside the stationary run
    # the run's static routers, the one refitted chosen as the regime's baseline
    bases = [cfg.learners[name] for name in ("mlp", "knn_val", "mf", "logistic", "mean")]
    assert list(cfg.learners.static_refit.base) == bases
    assert {"base", "static_refit.base"} & set(cfg.choose_on_validation.as_baseline)


def test_without_a_scenario_the_preset_is_unchanged():
    plain = compose_config("simulate", ["experiment=routerbench_leaderboard"])
    assert "scenario" not in plain.env
    assert plain.out_dir == "outputs/routerbench_leaderboard"


def test_the_routerbench_preset_leaves_a_first_listed_value_on_two_standard_errors():
    """Its 16 candidates per regime: a change option is taken only two standard errors
    ahead (``margin: 2``); the other presets keep the one-standard-error rule."""
    from torchroute.run.options import RunOptions

    margins = {
        preset: RunOptions.from_config(
            compose_config("simulate", [f"experiment={preset}"])
        ).choice_rule.margin
        for preset in LEADERBOARDS
    }
    assert margins == {
        "routerbench_leaderboard": 2.0,
        "openllm_leaderboard": 1.0,
        "routerdc_leaderboard": 1.0,
    }


@pytest.mark.parametrize("preset", LEADERBOARDS)
def test_each_leaderboards_lists_are_candidates_its_learners_accept(preset):
    """Every list-valued change option of a leaderboard is a product of candidates that each
    learner class accepts (``candidates_of`` checks them as a run does at its start): a
    preset that offered, say, the soft shift beside a forgetting ``gamma`` list would be
    refused here, not after minutes of a run."""
    from torchroute.run.choose_on_validation import all_candidates
    from torchroute.run.options import RunOptions

    opts = RunOptions.from_config(compose_config("simulate", [f"experiment={preset}"]))
    found = all_candidates(opts)
    assert {"residual_linucb", "residual_lints", "static_refit"} <= set(found)
    for cand in found.values():
        assert cand.points and all(set(p) == set(cand.keys) for p in cand.points)
