"""A new protocol plugs in without library changes: a two-arm graph-feedback env and a
learner that asks to observe its neighbour, both defined only here, run through
``simulate``, the experiment runner (results, curves, checkpoints, resume) and ``report``.

The plug-in tests write these classes as a user's package (``graph_ext``, in a temporary
folder put on ``sys.path``) with a config folder of its own (a learner, an env, a data
loader and presets), given to the command line with ``--config-dir``: nothing of the
library, its configs or the test helpers is edited or written.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from torchroute.cli import compose_config
from torchroute.envs import Env
from torchroute.functional.sampling import sample_categorical
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

    feedback = "graph"

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
        self._check_context(context)
        self._check_feedback(context, feedback)
        self.sums += torch.where(feedback.observed, feedback.reward, 0.0).sum(1).to(self.sums)
        self.counts += feedback.observed.sum(1).to(self.counts)
        self._tick(context)
        return {}


class SoftmaxMeans(Learner):
    """Samples arm ``k`` with probability ``softmax(mean / temperature)_k`` of the empirical
    means: it says so (``samples_from_probs``), and declares its device tolerance."""

    samples_from_probs = True
    device_tolerance = "neural"

    def __init__(self, num_trials, num_arms, temperature=0.5):
        super().__init__(num_trials, num_arms)
        self.temperature = float(temperature)
        self.register_buffer("sums", torch.zeros(num_trials, num_arms))
        self.register_buffer("counts", torch.zeros(num_trials, num_arms))

    def act(self, context, generator=None):
        self._check_context(context)
        mean = self.sums / self.counts.clamp_min(1)  # [R, K]
        probs = torch.softmax(mean / self.temperature, -1).to(context.x.dtype)
        probs = probs[:, None].expand(-1, context.x.shape[1], -1)  # [R, B, K]
        return Decision(probs, sample_categorical(probs, generator))

    def update(self, context, decision, feedback, generator=None):
        self._check_context(context)
        self._check_feedback(context, feedback)
        played = F.one_hot(decision.action, self.num_arms).to(self.sums)  # [R, B, K]
        self.sums += (feedback.reward.to(self.sums) * played).sum(1)
        self.counts += played.sum(1)
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
    from torchroute.run import RunOptions
    from torchroute.run.report_sections import DEFAULT_SECTIONS

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
        (["graph_section"], "dotted module.function paths or one of"),
        (["tests.no_such_module.section"], "cannot import 'tests.no_such_module'"),
        (["tests.test_extension.MEANS_MISSING"], "is not a function"),
    ],
)
def test_a_bad_report_section_is_refused_by_name(extension_cfg, value, message):
    from torchroute.errors import SectionError
    from torchroute.report.sections import load_sections
    from torchroute.run import ConfigError, RunOptions

    extension_cfg.report_sections = value
    with pytest.raises((ConfigError, SectionError), match=message):
        load_sections(RunOptions.from_config(extension_cfg).report_sections)


def test_report_command_takes_sections_by_name(extension_cfg, capsys):
    """``--section`` picks a section by name: a built-in one, or one the run declares
    (``report_sections`` of its config.yaml), the latter only from a ``--trust`` package."""
    from torchroute.cli import main

    extension_cfg.report_sections = ["cabs", "tests.test_extension.graph_section"]
    run_config(extension_cfg)
    out = str(extension_cfg.out_dir)
    args = ["report", out, "--reference", "observer", "--section", "graph_section"]
    assert main([*args, "--trust", "tests"]) == 0
    assert "## Side observations" in capsys.readouterr().out
    assert main(args) == 2  # declared by the run, but the plug-in is not trusted
    err = capsys.readouterr().err
    assert "'tests.test_extension.graph_section', which is not under torchroute" in err
    assert "--trust" in err
    assert main(["report", out, "--section", "nothing_here"]) == 2
    expected = "expected a section name, one of ['budgets', 'cabs', 'graph_section'"
    assert expected in capsys.readouterr().err


def test_report_command_defaults_to_the_run_s_own_sections(extension_cfg, caplog):
    """Without ``--section`` a re-rendered report has the sections the run declared: its
    torchroute ones, and a plug-in's only with ``--trust`` (else a warning names it)."""
    from torchroute.cli import main
    from torchroute.report.cabs import cabs_section
    from torchroute.report.sections import run_sections

    extension_cfg.report_sections = ["cabs", "tests.test_extension.graph_section"]
    run_config(extension_cfg)
    out = str(extension_cfg.out_dir)
    report = Path(out) / "report.md"
    assert run_sections([out], ["tests"]) == ([cabs_section, graph_section], [])
    sections, skipped = run_sections([out])
    assert sections == [cabs_section] and len(skipped) == 1
    assert main(["report", out, "--reference", "observer", "--trust", "tests"]) == 0
    assert "## Side observations" in report.read_text()
    caplog.clear()
    assert main(["report", out, "--reference", "observer"]) == 0
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "report: a section the run declares is left out: graph_section: the run declares "
        "'tests.test_extension.graph_section', which is not under torchroute; a plug-in's "
        "section is used only with --trust <its package>"
    ]
    assert "Side observations" not in report.read_text()
    # a run that declares none: the default sections
    extension_cfg.report_sections = None
    run_config(extension_cfg)
    assert run_sections([out]) == (None, [])
    # a hand-edited config.yaml naming no section: left out with a line, nothing raised
    config = Path(out) / "config.yaml"
    config.write_text(config.read_text() + "report_sections: [cabs, nonsense]\n")
    assert run_sections([out]) == (
        [cabs_section],
        ["'nonsense': not a section name or a dotted module.function path"],
    )


# ------------------------------------------------------------------ a plug-in package
PLUGIN_HEADER = '''"""graph_ext: a plug-in of torchroute (a graph-feedback env, a learner, data)."""

import pandas as pd
import torch
import torch.nn.functional as F

from torchroute.data.table import RoutingTable
from torchroute.envs import Env
from torchroute.functional.sampling import sample_categorical
from torchroute.learners import Learner
from torchroute.types import Context, Decision, Feedback, Problem

MEANS = (0.3, 0.7)


def tiny_table(n=60, k=4, d=6, seed=0):
    """A random routing table: ``n`` queries, ``k`` models, ``d``-d embeddings."""
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(n, d, generator=g)
    scores = torch.sigmoid(emb @ torch.randn(d, k, generator=g))
    split = ["train"] * (n // 2) + ["val"] * (n // 6) + ["test"] * (n - n // 2 - n // 6)
    return RoutingTable(
        scores=scores, costs=torch.rand(n, k, generator=g) * 1e-3,
        arm_names=[f"arm{i}" for i in range(k)], query_ids=[f"q{i}" for i in range(n)],
        split=split, embeddings=emb,
    )

'''
#: the plug-in's own config folder: {relative path: text}
PLUGIN_CONFIGS = {
    "learner/observer.yaml": """\
        # Greedy on empirical means; asks to observe the arm it did not play.
        _target_: graph_ext.NeighbourLearner.from_problem
        _partial_: true
        """,
    "learner/sampler.yaml": """\
        # Samples each arm by a softmax of its empirical mean.
        _target_: graph_ext.SoftmaxMeans.from_problem
        _partial_: true
        temperature: 0.5
        """,
    "learner/subset_picker.yaml": """\
        # A packaged subset learner under a name of the plug-in's.
        _target_: torchroute.learners.RandomSubset.from_problem
        _partial_: true
        """,
    "env/two_arm_graph.yaml": """\
        # Two Bernoulli arms (0.3, 0.7); playing one may reveal the other.
        _target_: graph_ext.TwoArmGraphEnv
        horizon: 30
        """,
    "data/graph_table.yaml": """\
        # A small random routing table of the plug-in.
        _target_: graph_ext.tiny_table
        n: 60
        """,
    "experiment/graph_demo.yaml": """\
        # @package _global_
        # The observer and a packaged learner on the two-arm graph env.
        defaults:
          - /learner@learners.observer: observer
          - /learner@learners.random: random
          - override /env: two_arm_graph
        name: graph_demo
        data: null
        encoder: null
        rhos: [0.0]
        reference: observer
        """,
    "experiment/graph_table.yaml": """\
        # @package _global_
        # The observer on the packaged single-choice env over the plug-in's table.
        defaults:
          - /learner@learners.observer: observer
          - override /data: graph_table
        name: graph_table
        encoder: null
        features:
          pca_dim: 3
        rhos: [0.0]
        reference: observer
        """,
    "experiment/sampler_table.yaml": """\
        # @package _global_
        # The sampler on the packaged single-choice env over the plug-in's table.
        defaults:
          - /learner@learners.sampler: sampler
          - override /data: graph_table
        name: sampler_table
        encoder: null
        features:
          pca_dim: 3
        rhos: [0.0]
        reference: sampler
        """,
}


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The config folder of the plug-in package ``graph_ext`` (importable meanwhile)."""
    package = tmp_path / "site" / "graph_ext"
    package.mkdir(parents=True)
    source = [inspect.getsource(c) for c in (TwoArmGraphEnv, NeighbourLearner, SoftmaxMeans)]
    (package / "__init__.py").write_text(PLUGIN_HEADER + "\n\n".join(source))
    configs = tmp_path / "graph_configs"
    for name, text in PLUGIN_CONFIGS.items():
        (configs / name).parent.mkdir(parents=True, exist_ok=True)
        (configs / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield configs
    for name in [m for m in sys.modules if m == "graph_ext" or m.startswith("graph_ext.")]:
        del sys.modules[name]


def _package_files() -> list[Path]:
    from torchroute.configs_path import config_dir

    return sorted(config_dir().rglob("*"))


def test_a_plugin_runs_from_its_own_config_folder(plugin, tmp_path, capsys):
    """``torchroute simulate --config-dir`` finds the plug-in's preset, learner and env."""
    from torchroute.cli import main

    before = _package_files()
    out = tmp_path / "out"
    argv = ["simulate", "--config-dir", str(plugin), "experiment=graph_demo", f"out_dir={out}"]
    assert main([*argv, "seeds=[0,1]", "~logger", "progress=false", "log_every=10"]) == 0
    printed = capsys.readouterr().out
    results = pd.read_csv(out / "results.csv")
    assert sorted(set(results["learner"])) == ["observer", "random"]
    observer = results[results["learner"] == "observer"]
    assert (observer["observed_per_round"] == 2.0).all() and len(observer) == 2
    assert (results[results["learner"] == "random"]["observed_per_round"] == 1.0).all()
    assert (observer["avg_regret"].to_numpy() < 0.2).all()  # it learns both means
    assert "observer" in printed and "observed_per_round" in printed  # the report
    assert _package_files() == before  # nothing written into the library's configs


def test_without_the_config_folder_the_plugin_preset_is_unknown(plugin, tmp_path, capsys):
    from torchroute.cli import main

    argv = ["simulate", "experiment=graph_demo", f"out_dir={tmp_path / 'o'}", "~logger"]
    assert main(argv) == 2
    assert "unknown option 'graph_demo' of config group 'experiment'" in capsys.readouterr().err
    assert main([*argv, "--config-dir", str(tmp_path / "nowhere")]) == 2
    assert "--config-dir" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_a_config_folder_may_not_shadow_a_packaged_config(tmp_path, capsys):
    from torchroute.cli import main

    (tmp_path / "configs" / "learner").mkdir(parents=True)
    (tmp_path / "configs" / "learner" / "linucb.yaml").write_text("alpha: 9.0\n")
    argv = ["simulate", "--config-dir", str(tmp_path / "configs"), f"out_dir={tmp_path / 'o'}"]
    assert main([*argv, "--cfg"]) == 2
    err = capsys.readouterr().err
    assert "learner/linucb.yaml is also in" in err and "give it another name" in err


def test_the_plugin_configs_are_cases_of_the_gpu_dry_run(plugin, capsys):
    """The device check's CPU dry run (``--device cpu``) with ``--config-dir`` finds the
    plug-in's learner (a case on the env of its protocol) and env (a case of the probe
    learner), and runs the learner on the plug-in's env when asked by ``learner@env``."""
    from torchroute.devicecheck.cases import DEFAULT_TOL, Case, find_cases
    from torchroute.devicecheck.compare import NEURAL
    from torchroute.devicecheck.main import main

    cases = find_cases([plugin])
    assert cases["observer"] == Case("observer", "single_choice", DEFAULT_TOL, plugin / "learner")
    # the tolerance the plug-in class declares (device_tolerance = "neural"), no list edited
    assert cases["sampler"] == Case("sampler", "single_choice", NEURAL, plugin / "learner")
    assert cases["random@two_arm_graph"] == Case(
        "random", "two_arm_graph", DEFAULT_TOL, None, plugin / "env"
    )
    assert "observer" not in find_cases()  # only with the folder
    only = ["observer", "sampler", "random@two_arm_graph", "observer@two_arm_graph"]
    argv = ["--device", "cpu", "--config-dir", str(plugin), "--only", *only, "--rounds", "6"]
    status = main([*argv, "--workers", "0", "--no-throughput"])
    out = capsys.readouterr().out
    assert status == 0, out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    envs = ["single_choice", "single_choice", "two_arm_graph", "two_arm_graph"]
    assert [lines[name][1] for name in only] == envs
    assert all(lines[name][-1] == "ok" for name in only)
    assert [float(v) for v in lines["sampler"][2:4]] == [NEURAL.rtol, NEURAL.atol]
    assert float(lines["observer"][2]) == DEFAULT_TOL.rtol
    assert int(lines["observer@two_arm_graph"][5]) > 0  # the env's draws came from the CPU
    assert main(["--device", "cpu", "--config-dir", str(plugin / "nowhere")]) == 2
    assert "--config-dir" in capsys.readouterr().out


def test_the_plugin_configs_are_contract_cases(plugin):
    """The learner contract tests make a case of a plug-in config whose class no
    hand-written entry covers (built from the config alone on a tiny problem); the env and
    subset-learner contracts find the plug-in's env and subset configs."""
    from tests.learners.helpers import config_specs
    from tests.learners.test_subset_contract import _subset_configs

    specs = config_specs(plugin / "learner")
    assert list(specs) == ["config:observer", "config:sampler"]
    learner = specs["config:observer"].build(4, 3, 5, 0)
    assert type(learner).__name__ == "NeighbourLearner" and learner.sums.shape == (4, 3)
    decision = learner.act(Context(x=torch.ones(4, 1, 5)))
    assert decision.action.shape == (4, 1) and bool(decision.observe.sum(-1).eq(2).all())
    # the env contract's and the subset contract's discovery take the folder too
    from tests.envs.test_contract import config_env_specs

    env_specs = config_env_specs([plugin])
    assert set(env_specs) == {*config_env_specs(), "two_arm_graph"}
    env = env_specs["two_arm_graph"].build([2, 0], torch.float64)
    assert type(env).__name__ == "TwoArmGraphEnv" and env.seeds.tolist() == [2, 0]
    from torchroute.learners import RandomSubset

    assert _subset_configs([plugin]) == {**_subset_configs(), "subset_picker": RandomSubset}


CONTRACT = [
    "test_decision_shapes_and_distribution",
    "test_state_has_a_leading_trial_dimension",
    "test_trial_equivariance",
    "test_state_dict_round_trip",
    "test_cpu_float64_determinism",
    "test_to_float64",
    "test_wrong_number_of_trials_raises",
    "test_constructor_rejects_bad_sizes",
    "test_routing_probs_are_the_frequencies_of_act",
    "test_capabilities_are_declared",
]


@pytest.mark.parametrize("test", CONTRACT)
@pytest.mark.parametrize("stem", ["observer", "sampler"])
def test_the_plugin_learners_pass_the_contract_tests(plugin, monkeypatch, stem, test):
    """The learner contract tests, run on the plug-in's config cases as on the packaged
    ones (the case is put where they look it up only for this test)."""
    import tests.learners.test_contract as contract
    from tests.learners.helpers import LEARNERS, config_specs

    name = f"config:{stem}"
    monkeypatch.setitem(LEARNERS, name, config_specs(plugin / "learner")[name])
    function = getattr(contract, test)
    if test == "test_decision_shapes_and_distribution":
        function(name, 3)
    elif test == "test_routing_probs_are_the_frequencies_of_act":
        function(name, False)
    else:
        function(name)


def test_a_plugin_learner_that_samples_is_served_with_its_exact_propensity(plugin, tmp_path):
    """A plug-in learner that says it samples from its probabilities is served with them:
    the logged probabilities and propensities are the softmax of its means computed here,
    not a Monte-Carlo estimate (multiples of ``1 / 201``)."""
    from torchroute.cli import main
    from torchroute.serve import load_router

    out = tmp_path / "run"
    argv = ["simulate", "--config-dir", str(plugin), "experiment=sampler_table", f"out_dir={out}"]
    assert main([*argv, "seeds=[0]", "~logger", "progress=false", "report=false"]) == 0
    router = load_router(out, state_path=tmp_path / "r.pt", trusted=("graph_ext.",))
    learner = router.learner
    assert type(learner).__name__ == "SoftmaxMeans" and learner.counts.sum() > 0
    mean = (learner.sums / learner.counts.clamp_min(1)).double()[0]  # [K]
    exact = torch.exp(mean / 0.5) / torch.exp(mean / 0.5).sum()  # by hand
    assert exact.min() > 0.05 and not torch.allclose(exact, exact.mean())
    table = sys.modules["graph_ext"].tiny_table()
    decisions = router.route(embeddings=table.embeddings[:6])
    logged = router.log.table()["probabilities"][-6:]
    for decision, probs in zip(decisions, logged, strict=True):
        arm = router.arm_names.index(decision["model"])
        torch.testing.assert_close(torch.tensor(list(probs), dtype=torch.float64), exact)
        assert decision["propensity"] == pytest.approx(float(exact[arm]), rel=1e-6)  # float32 state
    router.close()


class Started(Exception):
    """Raised once the router is loaded: ``torchroute serve`` would start the server now."""


def test_the_plugin_learner_is_served_from_its_run(plugin, tmp_path, monkeypatch, capsys):
    """A plug-in learner is served like a shipped one once its package is trusted
    (``--trust``, ``trusted=``); without it the run folder's ``_target_`` is refused, not
    imported."""
    import torchroute.serve.trial
    from torchroute.cli import main
    from torchroute.run import ConfigError
    from torchroute.serve import load_router

    out = tmp_path / "run"
    argv = ["simulate", "--config-dir", str(plugin), "experiment=graph_table", f"out_dir={out}"]
    assert main([*argv, "seeds=[0]", "~logger", "progress=false", "report=false"]) == 0
    with pytest.raises(ConfigError, match="is not under torchroute"):
        load_router(out, state_path=tmp_path / "r.pt")
    router = load_router(out, state_path=tmp_path / "r.pt", trusted=("graph_ext.",))
    assert type(router.learner).__name__ == "NeighbourLearner"
    before = router.learner.counts.clone()
    table = sys.modules["graph_ext"].tiny_table()
    (decision,) = router.route(embeddings=table.embeddings[:1])
    router.feedback([decision["request_id"]], [0.7], [0.0])
    arm = router.arm_names.index(decision["model"])
    assert router.learner.counts[0, arm] == before[0, arm] + 1  # the routed arm's reward
    assert router.learner.counts.sum() == before.sum() + 1
    router.close()
    # the command line: refused without --trust, loaded with it (the server start is cut)
    serve = ["serve", str(out), "--port", "0", "--state", str(tmp_path / "cli.pt")]
    assert main(serve) == 2
    assert "is not under torchroute" in capsys.readouterr().err
    assert main([*serve, "--trust", "graph ext"]) == 2
    assert "--trust 'graph ext': expected a plug-in package's module path" in (
        capsys.readouterr().err
    )
    loaded = []
    open_trials = torchroute.serve.trial.open_trials

    def open_then_stop(*args, **kwargs):
        loaded.append(open_trials(*args, **kwargs))
        raise Started

    monkeypatch.setattr(torchroute.serve.trial, "open_trials", open_then_stop)
    with pytest.raises(Started):
        main([*serve, "--trust", "graph_ext"])
    assert type(loaded[0].routers[0].learner).__name__ == "NeighbourLearner"
    loaded[0].close()
