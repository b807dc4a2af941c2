"""No learner loops over trials: the torch operations one round records (``torch.profiler``,
CPU; the operations called from Python, not those torch runs inside them, whose
decomposition may depend on the sizes, and no pure views, which torch takes or not by the
sizes) are as many at ``R = 1`` as at ``R = 64``.

Every learner config is a case (found from the configs, on the small env of its protocol as
the device check builds it). The 64 trials are 64 copies of one trial (``select_trials``)
with per-trial random streams keyed by the trial's labels, so all 64 play exactly the round
the single trial plays: a data-dependent branch takes the same way at both sizes and only a
loop over trials (or over anything whose count grows with ``R``) changes the count.
"""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from torchroute.devicecheck.cases import CASES, case_learner, learner_configs
from torchroute.devicecheck.check import fresh_env
from torchroute.functional.random import TrialRNG, trial_keys

ROUNDS = 4  # rounds played; the last ROUNDS - 1 are counted (the first warms caches up)
#: metadata-only operations torch may or may not record depending on the sizes (a reshape
#: that is a view at one size and an alias at another); they do no work on the data
VIEWS = {"aten::view", "aten::view_as", "aten::_reshape_alias", "aten::as_strided"}
CONFIGS = sorted(stem for stem in learner_configs() if stem in CASES)


def _ops_per_round(config: str, trials: int, wrap=None) -> list[int]:
    """The number of top-level profiler events of each counted round (act, env step,
    update); ``wrap(learner)`` may replace the learner's ``update``."""
    case = CASES[config]
    env = fresh_env(case.env, "cpu", ROUNDS, case.env_directory).select_trials([0] * trials)
    torch.manual_seed(0)
    learner = case_learner(case.config, env, case.directory)
    if wrap is not None:
        learner.update = wrap(learner)
    source = TrialRNG(trial_keys(env.trials(), 0), device=env.device)
    counts = []
    for t in range(ROUNDS):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            context = env.context(t)
            decision = learner.act(context, source)
            feedback, _ = env.step(context, decision, source)
            learner.update(context, decision, feedback, source)
        if t > 0:
            top = [e for e in prof.events() if e.cpu_parent is None and e.name not in VIEWS]
            counts.append(len(top))
    return counts


def test_every_learner_config_is_counted():
    assert sorted(learner_configs()) == CONFIGS


def test_a_loop_over_trials_is_caught():
    def looping(learner):
        update = learner.update

        def update_per_trial(context, decision, feedback, generator=None):
            for r in range(context.num_trials):  # the pattern the test exists to catch
                context.x[r].sum()
            return update(context, decision, feedback, generator)

        return update_per_trial

    assert _ops_per_round("random", 64, looping) != _ops_per_round("random", 1, looping)


@pytest.mark.parametrize("config", CONFIGS)
def test_ops_per_round_do_not_grow_with_trials(config):
    one, many = _ops_per_round(config, 1), _ops_per_round(config, 64)
    assert min(one) > 0
    assert many == one, f"{config}: ops per round at R = 1 {one}, at R = 64 {many}"
