"""The environment contract (torchroute.envs.base.Env), parametrised over every env config.

Every ``configs/env/*.yaml`` is a case, built on a tiny problem of its protocol: a table env
(its factory takes ``table``) on a small random table with the ``rho`` x ``seed`` grid taken
in the trial order; a self-contained env with the seeds in that order. A new env is covered
by adding its config; :data:`SIZES` may shrink a self-contained env's defaults (optional).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hydra.utils import get_method
from omegaconf import OmegaConf

from tests.conftest import make_priced_table, make_table
from torchroute.configs_path import config_dir, group_configs
from torchroute.envs import Env, SingleChoiceEnv
from torchroute.functional.sampling import one_hot_probs, sample_categorical
from torchroute.run.build import env_takes_table
from torchroute.types import Context, Decision


@dataclass(frozen=True)
class EnvSpec:
    """``build(order, dtype) -> Env`` with the base trials taken in ``order``; ``decide(env,
    context, generator)`` a decision for the round of ``context``."""

    build: Callable[[list[int], torch.dtype], Env]
    decide: Callable[[Env, Context, torch.Generator], Decision]


def _single_choice(order, dtype, feedback="bandit", scenario=None):
    rho = [0.0, 200.0, 700.0, 0.0]
    seeds = [0, 1, 2, 3]
    return SingleChoiceEnv(
        make_table(),
        rho=[rho[i] for i in order],
        seeds=[seeds[i] for i in order],
        feedback=feedback,
        dtype=dtype,
        scenario=scenario,
    )


#: every event kind, changing within the first rounds the tests play (of 20)
SCENARIO = [
    {"kind": "new_model", "arm": "best", "at": 0.15},
    {"kind": "drift", "arm": "best", "at": 0.1, "score_shift": -0.3},
    {"kind": "price", "arm": "arm0", "at": 0.2, "factor": 3.0},
]


def _random_arm(env: Env, context: Context, gen: torch.Generator) -> Decision:
    """A uniform random arm per query (``draws`` arms for a subset env); ``context`` is the
    round's (asking the env for another context would move a subset env's round)."""
    batch = context.x.shape[1]
    probs = torch.full((env.num_trials, batch, env.num_arms), 1.0 / env.num_arms)
    draws = getattr(env, "draws", None)
    if draws is None:
        action = sample_categorical(probs, gen)
        return Decision(one_hot_probs(action, env.num_arms, probs.dtype), action)
    flat = probs.reshape(-1, env.num_arms)
    picks = torch.multinomial(flat, draws, replacement=True, generator=gen)
    return Decision(probs, picks.reshape(env.num_trials, batch, draws))


CONFIGS = config_dir() / "env"  # (importing the configs makes their ${data_root:...} resolvable)
#: optional smaller sizes for a self-contained env's defaults (keys of its config)
SIZES: dict[str, dict] = {
    "low_rank_experts": {"dims": [4], "num_experts": 3, "rank": 1, "latent_dim": 3,
                         "num_clusters": 4, "horizon": 20},
    "trec_subset": {"num_workers": 6, "draws": 2, "horizon": 20, "kinds": ["stochastic"],
                    "constraints": ["tight"]},
}  # fmt: skip
#: the table of a table env (default :func:`make_table`): best-of-M budgets need models
#: whose costs differ (the dearer, the better) to be reachable
TABLES: dict[str, Callable] = {"table_subset": make_priced_table}
#: values the configs interpolate from the simulate config
RUN_KEYS = {"split": "test", "rounds": None, "feedback": "bandit"}


def _from_config(name: str, path: Path | None = None) -> Callable[[list[int], torch.dtype], Env]:
    node = OmegaConf.merge(OmegaConf.load(path or CONFIGS / f"{name}.yaml"), SIZES.get(name, {}))
    resolved = OmegaConf.to_container(OmegaConf.merge(RUN_KEYS, {"env": node}), resolve=True)
    kwargs = dict(resolved["env"])
    table_env = env_takes_table(kwargs)
    factory = get_method(kwargs.pop("_target_"))

    def build(order: list[int], dtype: torch.dtype) -> Env:
        seeds = [[0, 1, 2, 3][i] for i in order]
        if not table_env:
            _skip_without_data(kwargs)
            return factory(seeds=seeds, dtype=dtype, **kwargs)
        rho = [[0.0, 200.0, 700.0, 0.0][i] for i in order]
        table = TABLES.get(name, make_table)()
        return factory(table, rho=rho, seeds=seeds, dtype=dtype, **kwargs)

    return build


def _skip_without_data(kwargs: dict) -> None:
    """Skip an env whose config reads a real data file that this checkout does not have (the
    shared data folder next to it, as the table envs' loaders are skipped)."""
    path = kwargs.get("path")
    if isinstance(path, str) and "shared/data" in path and not Path(path).exists():
        pytest.skip(f"real data file not found: {path}")


def config_env_specs(extra: Sequence[Path] = ()) -> dict[str, EnvSpec]:
    """A case per packaged env config and per ``env/*.yaml`` of each ``extra`` config
    folder (found, not listed)."""
    found = group_configs("env", extra)
    return {stem: EnvSpec(_from_config(stem, path), _random_arm) for stem, path in found.items()}


ENVS: dict[str, EnvSpec] = {
    **config_env_specs(),
    "SingleChoiceEnv(full)": EnvSpec(
        lambda order, dtype: _single_choice(order, dtype, feedback="full"), _random_arm
    ),
    "SingleChoiceEnv(scenario)": EnvSpec(
        lambda order, dtype: _single_choice(order, dtype, scenario=SCENARIO), _random_arm
    ),
}
NAMES = sorted(ENVS)
#: contract breaches the configs show: ``(test, case) -> reason`` (strict xfail, so a fix
#: makes the test fail until its entry is removed); none today
KNOWN: dict[tuple[str, str], str] = {}


def _case(test: str, name: str, *more) -> object:
    reason = KNOWN.get((test, name))
    if reason is None:
        return pytest.param(name, *more)
    return pytest.param(name, *more, marks=pytest.mark.xfail(strict=True, reason=reason))


def _cases(test: str) -> list:
    return [_case(test, n) for n in NAMES]


BASE = [0, 1, 2, 3]
PERM = [2, 0, 3, 1]


@pytest.mark.parametrize("name", _cases("describe"))
def test_problem_and_trials_describe_the_env(name):
    env = ENVS[name].build(BASE, torch.float64)
    problem, trials = env.problem(), env.trials()
    assert len(trials) == env.num_trials == problem.num_trials
    assert problem.num_arms == env.num_arms and len(problem.arm_names) == env.num_arms
    context = env.context(0)
    assert context.x.shape[:2] == (env.num_trials, 1) and context.x.shape[2] == problem.dim


@pytest.mark.parametrize("name", _cases("equivariance"))
def test_trial_equivariance(name):
    """Permuting the trials (their labels) permutes every context, feedback and outcome."""
    spec = ENVS[name]
    env, env_p = spec.build(BASE, torch.float64), spec.build(PERM, torch.float64)
    assert env.trials().iloc[PERM].reset_index(drop=True).equals(env_p.trials())
    gen = torch.Generator().manual_seed(1)
    for t in range(5):
        ctx, ctx_p = env.context(t), env_p.context(t)
        torch.testing.assert_close(ctx_p.x, ctx.x[PERM], rtol=0, atol=0)
        decision = spec.decide(env, ctx, gen)
        perm = torch.tensor(PERM)
        decision_p = Decision(
            decision.probs[perm],
            decision.action[perm],
            None if decision.observe is None else decision.observe[perm],
        )
        fb, out = env.step(ctx, decision, torch.Generator().manual_seed(t))
        fb_p, out_p = env_p.step(ctx_p, decision_p, torch.Generator().manual_seed(t))
        assert torch.equal(fb_p.observed, fb.observed[perm])
        torch.testing.assert_close(fb_p.reward, fb.reward[perm], rtol=0, atol=0)
        assert out.keys() == out_p.keys()
        for key in out:
            torch.testing.assert_close(out_p[key], out[key][perm], rtol=0, atol=0, msg=key)


@pytest.mark.parametrize("name", _cases("state"))
def test_state_dict_round_trip_and_fingerprint(name):
    """A fresh env loaded with the state after some rounds continues identically."""
    spec = ENVS[name]
    env, fresh = spec.build(BASE, torch.float64), spec.build(BASE, torch.float64)
    gen = torch.Generator().manual_seed(2)
    for t in range(3):
        ctx = env.context(t)
        env.step(ctx, spec.decide(env, ctx, gen), torch.Generator().manual_seed(t))
    fresh.load_state_dict(env.state_dict())
    assert fresh.fingerprint() == env.fingerprint()
    assert spec.build(PERM, torch.float64).fingerprint() != env.fingerprint()
    for t in range(3, 6):
        ctx = env.context(t)
        decision = spec.decide(env, ctx, torch.Generator().manual_seed(t))
        a = env.step(ctx, decision, torch.Generator().manual_seed(10 + t))
        b = fresh.step(fresh.context(t), decision, torch.Generator().manual_seed(10 + t))
        assert torch.equal(a[0].reward, b[0].reward)
        for key in a[1]:
            assert torch.equal(a[1][key], b[1][key]), key


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        _case(f"dtype-{str(d).removeprefix('torch.')}", n, d)
        for d in (torch.float32, torch.float64)
        for n in NAMES
    ],
)
def test_outputs_follow_the_env_device_and_dtype(name, dtype):
    spec = ENVS[name]
    env = spec.build(BASE, dtype)
    ctx = env.context(0)
    fb, out = env.step(ctx, spec.decide(env, ctx, torch.Generator().manual_seed(0)))
    for tensor in (ctx.x, fb.reward, *out.values()):
        assert tensor.device == env.device
        assert tensor.dtype in (dtype, torch.long, torch.bool)
    sums = {k: v.sum(1).double() for k, v in out.items()}
    for value in env.summarize(sums, 1).values():
        assert value.shape[0] == env.num_trials
