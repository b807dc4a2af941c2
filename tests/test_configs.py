"""Every config composes, and every learner config instantiates with tiny sizes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from torchroute.configs_path import compose_config, config_dir
from torchroute.envs import SingleChoiceEnv
from torchroute.learners import Learner
from torchroute.report.verdicts import PAPER_RELATIONS, SURROGATE_RELATIONS
from torchroute.run import RunOptions, build_learner

PRESETS = sorted((config_dir() / "experiment").glob("*.yaml"))
#: presets whose header names the pretrain command compose with pretrain.yaml
PRETRAIN = sorted(p.stem for p in PRESETS if "torchroute pretrain" in p.read_text())
#: presets of `torchroute gap` (policy-class gap tables; composed in tests/test_gap.py)
GAP = sorted(p.stem for p in PRESETS if re.search(r"^gap:", p.read_text(), re.M))
EXPERIMENTS = sorted(p.stem for p in PRESETS if p.stem not in {*PRETRAIN, *GAP})
_LEARNER_ENTRY = re.compile(r"^\s*-\s*/learner@learners\.\w+:\s*(\w+)\s*$", re.M)


def _other_protocol_learners() -> set[str]:
    """Learner configs used by presets whose env is not single-choice routing.

    They are built on their own env in their family's tests (subset routing, simulators).
    """
    names: set[str] = set()
    for preset in PRESETS:
        text = preset.read_text()
        if "override /env:" in text and "override /env: single_choice" not in text:
            names |= set(_LEARNER_ENTRY.findall(text))
    return names


#: single-choice learner configs (those needing a pre-trained oracle: tests/trainers)
LEARNERS = sorted(
    p.stem
    for p in (config_dir() / "learner").glob("*.yaml")
    if "oracle" not in p.read_text() and p.stem not in _other_protocol_learners()
)


def test_config_dir_ships_the_presets():
    assert {"default", "routerbench_baselines", "routerbench_static"} <= set(EXPERIMENTS)
    assert PRETRAIN == ["routerbench_oracles"]
    assert Path(config_dir(), "simulate.yaml").is_file()


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_presets_compose(experiment):
    cfg = compose_config("simulate", [f"experiment={experiment}", "out_dir=x"])
    assert cfg.learners and cfg.env._target_ and cfg.seeds
    if cfg.data is not None:  # a table env; a self-contained env has data: null
        assert cfg.data._target_ and cfg.rhos


@pytest.mark.parametrize("experiment", PRETRAIN)
def test_pretrain_presets_compose(experiment):
    cfg = compose_config("pretrain", [f"experiment={experiment}", "out_dir=x"])
    assert cfg.data._target_ and cfg.trainer.max_epochs > 0 and cfg.module.lr > 0


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("gamma=-1", "SquareCB: gamma must be a finite number > 0, got -1"),
        ("gamma=nan", "SquareCB: gamma must be a finite number > 0, got nan"),
        ("lam=0", "SquareCB: lam must be a finite number > 0"),
        ("mu=2", "SquareCB: mu must be a finite number >= 4"),
        ("+gamma_typo=1", "learners.squarecb"),
    ],
)
def test_bad_hyper_parameters_are_named_when_built(tiny_table, override, message):
    from torchroute.run import ConfigError

    cfg = OmegaConf.load(config_dir() / "learner" / "squarecb.yaml")
    key, value = override.lstrip("+").split("=")
    cfg[key] = float(value)
    env = SingleChoiceEnv(tiny_table, rho=[0.0], seeds=[0])
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        build_learner(cfg, env.problem(), "squarecb")


def test_routerbench_preset_is_the_210_trial_grid():
    cfg = compose_config("simulate", ["experiment=routerbench_baselines"])
    assert len(cfg.seeds) == 10 and list(cfg.rhos) == list(range(0, 1001, 50))


def test_open_llm_preset_runs_every_paper_relation_and_null_runs_every_learner():
    opts = RunOptions.from_config(compose_config("simulate", ["experiment=cabs_table2_openllm"]))
    defined = set(opts.learners)
    identity = next(r for r in SURROGATE_RELATIONS if r.b == "cabs_d_identity")
    for rel in (*PAPER_RELATIONS, identity):
        if {rel.a, rel.b} <= defined:
            assert {rel.a, rel.b} <= set(opts.run_learners), rel
    assert {"cabs_d", "linucb", "lints", "epsilon_greedy", "cabs_c", "linucb_full"} <= set(
        opts.run_learners
    )
    assert defined - set(opts.run_learners) == {"cabs_d_paper", "cabs_d_nosurrogates"}
    everything = compose_config("simulate", ["experiment=cabs_table2_openllm", "run_learners=null"])
    assert set(RunOptions.from_config(everything).run_learners) == defined


@pytest.mark.parametrize("name", LEARNERS)
def test_learner_configs_instantiate_and_act(name, tiny_table):
    learner_cfg = OmegaConf.load(config_dir() / "learner" / f"{name}.yaml")
    env = SingleChoiceEnv(tiny_table, rho=[0.0, 800.0], seeds=[0, 1])
    learner = build_learner(learner_cfg, env.problem(), name)
    assert isinstance(learner, Learner)
    decision = learner.act(env.context(0), torch.Generator().manual_seed(0))
    assert decision.probs.shape == (2, 1, tiny_table.num_arms)
    torch.testing.assert_close(decision.probs.sum(-1), torch.ones(2, 1))


def test_initial_weights_follow_the_loop_seed_and_leave_the_global_rng_alone(tiny_table):
    learner_cfg = OmegaConf.load(config_dir() / "learner" / "neural_ucb.yaml")
    env = SingleChoiceEnv(tiny_table, rho=[0.0], seeds=[0])

    def weights(seed: int) -> dict[str, torch.Tensor]:
        learner = build_learner(learner_cfg, env.problem(), "neural_ucb", init_seed=seed)
        return {k: v.detach().clone() for k, v in learner.named_parameters()}

    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    first, again, other = weights(0), weights(0), weights(1)
    torch.testing.assert_close(torch.rand(3), expected_next)  # global stream untouched
    assert first.keys() == again.keys() and len(first) > 0
    for key in first:
        torch.testing.assert_close(first[key], again[key], rtol=0, atol=0)
    assert any(not torch.equal(first[k], other[k]) for k in first)


@pytest.mark.parametrize(
    "preset", ["routerbench_leaderboard", "openllm_leaderboard", "routerdc_leaderboard"]
)
def test_leaderboard_bases_are_the_regimes_baseline_with_the_mean_router_listed(preset):
    """The learners built on a static router start from the regime's baseline (``base``
    chosen as the report chooses it), and the mean router is among the routers they may
    build on: where the baseline is the best single model, it is the one that plays it."""
    cfg = compose_config("simulate", [f"experiment={preset}", "out_dir=x"])
    assert list(cfg.choose_on_validation.as_baseline) == ["base"]
    mean = OmegaConf.to_container(cfg.learners.mean, resolve=True)
    assert mean["_target_"].endswith("MeanScoreRouter.from_problem")
    for name in ("residual_linucb", "residual_lints", "residual_squarecb", "static_refit"):
        bases = OmegaConf.to_container(cfg.learners[name].base, resolve=True)
        assert mean in bases, f"{preset}: learners.{name}.base lacks the mean router"
