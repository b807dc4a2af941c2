"""A new protocol plugs in without library changes: a two-arm graph-feedback env and a
learner that asks to observe its neighbour, both defined only here, run through
``simulate``, the experiment runner (results, curves, checkpoints, resume) and ``report``."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from torchroute.cli import compose_config
from torchroute.envs import Env
from torchroute.learners import Learner
from torchroute.loop import simulate
from torchroute.report import write_report
from torchroute.run import run_config
from torchroute.types import Context, Decision, Feedback, Problem

MEANS = (0.3, 0.7)


class TwoArmGraphEnv(Env):
    """Bernoulli arms with means 0.3 and 0.7; playing an arm may reveal the other one.

    The env is stateful: it counts the side observations it granted (restored on resume).
    It needs no table (``data: null``): the runner passes ``seeds``, ``device``, ``dtype``.
    """

    curve_keys = ("regret", "reward")

    def __init__(self, seeds, horizon=40, dtype=torch.float64, device="cpu"):
        self.seeds = torch.as_tensor(seeds, dtype=torch.long)
        self.num_trials, self.num_arms, self.horizon = len(self.seeds), 2, horizon
        self.means = torch.tensor(MEANS, dtype=dtype, device=device)
        self.granted = torch.zeros(self.num_trials, dtype=torch.long, device=device)

    @property
    def device(self):
        return self.means.device

    def trials(self):
        return pd.DataFrame({"seed": self.seeds.numpy()})

    def problem(self):
        r = self.num_trials
        rho = torch.zeros(r, dtype=self.means.dtype)
        return Problem(r, 2, 1, rho=rho, arm_names=("weak", "strong"), horizon=self.horizon)

    def context(self, t):
        return Context(x=self.means.new_ones(self.num_trials, 1, 1))

    def step(self, context, decision, generator=None):
        r = self.num_trials
        draw = torch.rand(r, 1, 2, generator=generator, device=self.device, dtype=self.means.dtype)
        reward = (draw < self.means).to(self.means.dtype)  # [R, 1, 2]
        observed = F.one_hot(decision.action, 2).bool()
        if decision.observe is not None:
            self.granted += (decision.observe & ~observed).sum((1, 2))
            observed = observed | decision.observe
        chosen_mean = self.means[decision.action]  # [R, 1]
        feedback = Feedback(torch.where(observed, reward, 0.0), observed)
        outcome = {
            "reward": reward.gather(-1, decision.action[..., None])[..., 0],
            "regret": self.means.max() - chosen_mean,
            "observed": observed.sum(-1).to(self.means.dtype),
        }
        return feedback, outcome

    def summarize(self, sums, rounds):
        return {
            "avg_reward": sums["reward"] / rounds,
            "avg_regret": sums["regret"] / rounds,
            "observed_per_round": sums["observed"] / rounds,
        }

    def state_dict(self):
        return {"granted": self.granted.clone()}

    def load_state_dict(self, state):
        self.granted.copy_(state["granted"])

    def fingerprint(self):
        return {"env": "TwoArmGraphEnv", "seeds": self.seeds.tolist(), "horizon": self.horizon}


class NeighbourLearner(Learner):
    """Greedy on empirical means; asks to observe the arm it did not play."""

    def __init__(self, num_trials, num_arms):
        super().__init__(num_trials, num_arms)
        self.register_buffer("sums", torch.zeros(num_trials, num_arms))
        self.register_buffer("counts", torch.zeros(num_trials, num_arms))

    def act(self, context, generator=None):
        self._check_context(context)
        mean = self.sums / self.counts.clamp_min(1)  # [R, K]
        action = mean.argmax(-1)[:, None].expand(-1, context.x.shape[1])  # [R, B]
        probs = F.one_hot(action, self.num_arms).to(context.x.dtype)
        return Decision(probs, action, observe=~probs.bool())

    def update(self, context, decision, feedback, generator=None):
        self.sums += torch.where(feedback.observed, feedback.reward, 0.0).sum(1).to(self.sums)
        self.counts += feedback.observed.sum(1).to(self.counts)
        self._tick(context)
        return {}


def test_graph_env_runs_through_simulate_with_side_observations():
    env = TwoArmGraphEnv(seeds=[0, 1, 2])
    learner = NeighbourLearner.from_problem(env.problem()).double()
    result = simulate(learner, env, seed=0, log_every=10, progress=False)
    # both arms revealed every round: the learner knows both means and plays the strong arm
    torch.testing.assert_close(learner.counts, torch.full((3, 2), 40.0, dtype=torch.float64))
    assert torch.equal(env.granted, torch.full((3,), 40))
    assert list(result.summary.columns) == [
        "seed", "rounds", "avg_reward", "avg_regret", "observed_per_round"
    ]  # fmt: skip
    assert (result.summary["observed_per_round"] == 2.0).all()
    assert {"cum_regret", "cum_reward"} <= set(result.curve.columns)
    assert (result.summary["avg_regret"] < 0.2).all()


@pytest.fixture
def extension_cfg(tmp_path):
    cfg = compose_config(
        "simulate",
        [
            f"out_dir={tmp_path / 'out'}",
            "seeds=[0,1]",
            "rhos=[0]",
            "log_every=5",
            "progress=false",
            "~logger",
            "ckpt_every=10",
        ],
    )
    OmegaConf.set_struct(cfg, False)
    cfg.env = OmegaConf.create({"_target_": "tests.test_extension.TwoArmGraphEnv", "horizon": 30})
    cfg.data = None
    cfg.encoder = None
    cfg.learners = OmegaConf.create(
        {
            "observer": {
                "_target_": "tests.test_extension.NeighbourLearner.from_problem",
                "_partial_": True,
            }
        }
    )
    return cfg


def test_graph_env_runs_through_the_experiment_runner_and_report(extension_cfg):
    results = run_config(extension_cfg)
    out = extension_cfg.out_dir
    assert list(results["learner"]) == ["observer", "observer"]
    assert (results["observed_per_round"] == 2.0).all()
    curves = pd.read_csv(f"{out}/curves.csv")
    assert {"learner", "trial", "seed", "round", "cum_regret", "cum_reward"} <= set(curves)
    text = write_report([out], reference="observer")
    assert "observed_per_round" in text and "observer" in text
    assert "regime" not in text  # no rho: no cost-regime table


def test_graph_env_state_is_restored_on_resume(extension_cfg, tmp_path):
    full = run_config(extension_cfg)
    ckpt = load = f"{extension_cfg.out_dir}/checkpoints/observer.pt"
    from torchroute.checkpoint import load_checkpoint

    payload = load_checkpoint(load)
    assert torch.equal(payload["env"]["granted"], torch.full((2,), 30))
    extension_cfg.resume = ckpt
    resumed = run_config(extension_cfg)
    pd.testing.assert_frame_equal(resumed, full)


def graph_section(results, curves, out_dir):
    """A report section defined only here: named by ``_target_`` in ``report_sections``."""
    if "observed_per_round" not in results:
        return []
    mean = results["observed_per_round"].mean()
    return ["## Side observations", "", f"arms observed per round: {mean:.2f}", ""]


def test_a_report_section_named_in_the_config_joins_the_report(extension_cfg):
    from torchroute.report.sections import DEFAULT_SECTIONS
    from torchroute.run import RunOptions

    extension_cfg.report_sections = [*DEFAULT_SECTIONS, "tests.test_extension.graph_section"]
    run_config(extension_cfg)
    opts = RunOptions.from_config(extension_cfg)
    text = write_report([opts.out_dir], reference="observer", sections=opts.report_sections)
    assert "## Side observations\n\narms observed per round: 2.00" in text
    # without the key the report has the built-in sections only
    assert "Side observations" not in write_report([opts.out_dir], reference="observer")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("tests.test_extension.graph_section", "must be a list"),
        (["graph_section"], "dotted module.function"),
        (["tests.no_such_module.section"], "cannot import 'tests.no_such_module'"),
        (["tests.test_extension.MEANS_MISSING"], "is not a function"),
    ],
)
def test_a_bad_report_section_is_refused_by_name(extension_cfg, value, message):
    from torchroute.report.sections import SectionError, load_sections
    from torchroute.run import ConfigError, RunOptions

    extension_cfg.report_sections = value
    with pytest.raises((ConfigError, SectionError), match=message):
        load_sections(RunOptions.from_config(extension_cfg).report_sections)


def test_a_learner_config_in_another_folder_is_a_gpu_check_case(tmp_path, capsys):
    """The GPU dry run (``--device cpu``) checks a learner config it finds in
    ``--learner-dir``, on the tiny env of its protocol with the default tolerance."""
    from benchmarks import gpu_check

    learners = tmp_path / "learner"
    learners.mkdir()
    (learners / "observer.yaml").write_text(
        "_target_: tests.test_extension.NeighbourLearner.from_problem\n_partial_: true\n"
    )
    cases = gpu_check.find_cases(learners)
    assert cases == {
        "observer": gpu_check.Case("observer", "single_choice", gpu_check.DEFAULT_TOL, learners)
    }
    argv = ["--device", "cpu", "--learner-dir", str(learners), "--only", "observer"]
    status = gpu_check.main([*argv, "--rounds", "6", "--workers", "0", "--no-throughput"])
    out = capsys.readouterr().out
    assert status == 0, out
    line = next(x for x in out.splitlines() if x.startswith("observer "))
    assert line.split()[1] == "single_choice" and line.endswith("ok")


def test_a_learner_config_is_a_learner_contract_case(tmp_path):
    """The learner contract tests make a case of a config whose class no hand-written
    entry covers: built from the config alone on a tiny problem of the test's sizes."""
    from tests.learners.helpers import config_specs

    (tmp_path / "observer.yaml").write_text(
        "_target_: tests.test_extension.NeighbourLearner.from_problem\n_partial_: true\n"
    )
    specs = config_specs(tmp_path)
    assert list(specs) == ["config:observer"]
    learner = specs["config:observer"].build(4, 3, 5, 0)
    assert isinstance(learner, NeighbourLearner) and learner.sums.shape == (4, 3)
    decision = learner.act(Context(x=torch.ones(4, 1, 5)))
    assert decision.action.shape == (4, 1) and bool(decision.observe.sum(-1).eq(2).all())


def test_report_command_takes_sections_by_dotted_path(extension_cfg, capsys):
    from torchroute.cli import main

    run_config(extension_cfg)
    out = str(extension_cfg.out_dir)
    section = "tests.test_extension.graph_section"
    assert main(["report", out, "--reference", "observer", "--section", section]) == 0
    assert "## Side observations" in capsys.readouterr().out
    assert main(["report", out, "--section", "tests.test_extension.nothing_here"]) == 2
    assert "is not a function" in capsys.readouterr().err


def test_the_test_only_learner_is_served_from_its_run(tmp_path):
    """A plug-in learner is served like a shipped one once its package is trusted
    (``trusted=``); without it the run folder's ``_target_`` is refused, not imported."""
    from tests.conftest import make_table, tiny_run_config
    from torchroute.run import ConfigError
    from torchroute.serve import load_router

    node = {"_target_": "tests.test_extension.NeighbourLearner.from_problem", "_partial_": True}
    run_config(tiny_run_config(tmp_path / "run", {"observer": node}, "rhos=[0]"))
    with pytest.raises(ConfigError, match="is not one of torchroute's own classes"):
        load_router(tmp_path / "run", state_path=tmp_path / "r.pt")
    router = load_router(tmp_path / "run", state_path=tmp_path / "r.pt", trusted=("tests.",))
    assert isinstance(router.learner, NeighbourLearner)
    before = router.learner.counts.clone()
    (decision,) = router.route(embeddings=make_table().embeddings[:1])
    router.feedback([decision["request_id"]], [0.7], [0.0])
    arm = router.arm_names.index(decision["model"])
    assert router.learner.counts[0, arm] == before[0, arm] + 1  # the routed arm's reward
    assert router.learner.counts.sum() == before.sum() + 1
