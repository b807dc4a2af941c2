"""The single-choice env's ``feedback: {delay, rate, noise}`` option, through the loop.

A recording learner plays a fixed rule and keeps, for every ``update`` call, the round it
came in and what it was given; the rows and rounds are checked against the env's stream
read on its own (``env.context(t).index``), the table and binomial bounds.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from tests.conftest import make_table
from torchroute.envs import SingleChoiceEnv
from torchroute.envs.delivery import FeedbackOptionError
from torchroute.learners import EXP3
from torchroute.learners.base import Learner
from torchroute.loop import simulate
from torchroute.types import Context, Decision, Problem


class Recorder(Learner):
    """Plays arm ``(t + shift) % K`` at round ``t``; records every update it is given.

    ``played [R]`` sums the played arm's reward over its updates without looking at
    ``observed``: a learner that would learn from a decision never rated.
    """

    def __init__(self, num_trials: int, num_arms: int, shift: int = 0) -> None:
        super().__init__(num_trials, num_arms)
        self.shift, self.acts, self.calls = shift, 0, []
        self.register_buffer("played", torch.zeros(num_trials, dtype=torch.float64))

    @classmethod
    def from_problem(cls, problem: Problem, shift: int = 0) -> Recorder:
        """A recorder for ``problem``'s trials and arms."""
        return cls(problem.num_trials, problem.num_arms, shift)

    def act(self, context: Context, generator=None) -> Decision:
        """Arm ``(t + shift) % K`` for every trial."""
        action = torch.full(context.x.shape[:2], (self.acts + self.shift) % self.num_arms)
        self.acts += 1
        probs = torch.nn.functional.one_hot(action, self.num_arms).to(context.x.dtype)
        return Decision(probs, action)

    def update(self, context, decision, feedback, generator=None):
        """Record ``(round, rows [R], action [R], observed [R, K], score [R, K])``."""
        self.calls.append(
            (
                self.acts - 1,
                context.index[:, 0].clone(),
                decision.action[:, 0].clone(),
                feedback.observed[:, 0].clone(),
                feedback.score[:, 0].clone(),
            )
        )
        self.played += feedback.reward.gather(-1, decision.action[..., None])[:, 0, 0]
        self._tick(context)
        return {}


def _env(table, feedback, rho=(0.0, 0.0, 300.0), seeds=(0, 1, 0), **kw):
    return SingleChoiceEnv(
        table, rho=list(rho), seeds=list(seeds), feedback=feedback, dtype=torch.float64, **kw
    )


def _run(env, shift=0):
    learner = Recorder.from_problem(env.problem(), shift)
    result = simulate(learner, env, progress=False)
    return learner, result


def _stream(env) -> torch.Tensor:
    """``[R, T]`` the table row of every round, read from the env's contexts."""
    return torch.stack([env.context(t).index[:, 0] for t in range(env.horizon)], 1)


@pytest.fixture(scope="module")
def table():
    return make_table(n=900, k=4)


def test_a_delayed_decision_is_learned_from_delay_rounds_later(table):
    delay = 7
    env = _env(table, {"delay": delay})
    learner, _ = _run(env)
    stream = _stream(_env(table, "bandit"))
    horizon = stream.shape[1]
    rounds = [call[0] for call in learner.calls]
    assert rounds == list(range(delay, horizon))  # no update before round `delay`
    for t, rows, action, observed, _ in learner.calls:
        assert torch.equal(rows, stream[:, t - delay])  # the row of round t - delay
        assert torch.equal(action, torch.full_like(action, (t - delay) % 4))
        assert observed.sum().item() == 3 and observed[torch.arange(3), action].all()
    assert learner.rounds.tolist() == [horizon - delay] * 3


def test_rated_requests_are_the_same_for_every_learner_and_rho(table):
    rate = 0.3
    env = _env(table, {"rate": rate, "delay": 2})
    first, _ = _run(env, shift=0)
    second, _ = _run(env, shift=1)
    stream = _stream(env)
    horizon = stream.shape[1]

    def rated(learner) -> torch.Tensor:  # [R, T]: round t's decision was rated
        out = torch.zeros(3, horizon, dtype=torch.bool)
        for t, rows, _, observed, _ in learner.calls:
            assert torch.equal(rows, stream[:, t - 2])
            out[:, t - 2] = observed.any(-1)
        return out

    mask = rated(first)
    assert torch.equal(mask, rated(second))  # whatever the learner
    assert torch.equal(mask[0], mask[2])  # trials of one seed: the same requests, any rho
    assert not torch.equal(mask[0], mask[1])
    assert not mask[:, horizon - 2 :].any()  # arriving after the end: never
    n = 2 * (horizon - 2)
    count = int(mask[:2, : horizon - 2].sum())
    sd = math.sqrt(n * rate * (1 - rate))
    assert abs(count - n * rate) < 4 * sd
    # a rated decision observes the played arm; an unrated one nothing
    for _, _, action, observed, _ in first.calls:
        assert torch.equal(observed.any(-1), observed[torch.arange(3), action])
    # the rounds with a rated arrival, and nothing else, move the learner's state
    assert first.rounds.tolist() == mask.sum(1).tolist()
    rho = torch.tensor([0.0, 0.0, 300.0], dtype=torch.float64)
    played = torch.zeros(3, dtype=torch.float64)
    for t in range(horizon - 2):
        rows, arm = stream[:, t], t % 4
        u = (table.scores[rows, arm].double() - rho * table.costs[rows, arm].double()).clamp(0, 1)
        played += torch.where(mask[:, t], u, 0.0)
    torch.testing.assert_close(first.played, played)


def test_a_learner_that_ignores_observed_learns_nothing_from_unrated_decisions(table):
    env = _env(table, {"rate": 0.4}, rho=(0.0, 0.0), seeds=(0, 1))
    learner = EXP3.from_problem(env.problem())
    simulate(learner, env, progress=False, rng="per_trial")
    recorder, _ = _run(env)
    rated = torch.stack([c[3].any(-1) for c in recorder.calls], 1)  # [R, updates]
    assert learner.rounds.tolist() == rated.sum(1).tolist()
    # EXP3 reads the played arm's reward without `observed`: its state (its update count
    # included) moves only in the rounds a rated decision arrives, batched or alone
    for r in range(2):
        alone = _env(table, {"rate": 0.4}, rho=(0.0,), seeds=(r,))
        single = EXP3.from_problem(alone.problem())
        simulate(single, alone, progress=False, rng="per_trial")
        assert single.rounds.item() == learner.rounds[r].item()


def test_noise_flips_binary_scores_and_the_results_stay_on_the_true_scores(table):
    binary = replace(table, scores=(table.scores > 0.5).to(table.scores.dtype))
    p = 0.1
    env = _env(binary, {"mode": "full", "noise": p})
    learner, result = _run(env)
    stream = _stream(env)
    flips = n = 0
    for _, rows, _, observed, score in learner.calls:
        assert observed.all()
        true = binary.scores[rows].double()
        flips += int((score != true).sum())
        n += true.numel()
        assert ((score == 0) | (score == 1)).all()
    sd = math.sqrt(n * p * (1 - p))
    assert abs(flips - n * p) < 4 * sd and flips > 0
    # the reported utility is the true one of the played arms
    horizon = stream.shape[1]
    rho = torch.tensor([0.0, 0.0, 300.0], dtype=torch.float64)
    arms = torch.arange(horizon) % 4
    rows = stream
    y = binary.scores[rows, arms[None].expand_as(rows)].double()
    c = binary.costs[rows, arms[None].expand_as(rows)].double()
    want = (y - rho[:, None] * c).clamp(0, 1).mean(1)
    torch.testing.assert_close(
        torch.as_tensor(result.summary["avg_utility"].to_numpy().copy()), want
    )
    torch.testing.assert_close(
        torch.as_tensor(result.summary["accuracy"].to_numpy().copy()), y.mean(1)
    )
    # a second learner sees the same noise
    again, _ = _run(env)
    assert all(torch.equal(a[4], b[4]) for a, b in zip(learner.calls, again.calls))


def test_gaussian_noise_on_continuous_scores_is_clipped_and_centred(table):
    env = _env(table, {"mode": "full", "noise": 0.05})
    learner, _ = _run(env)
    diffs = []
    for _, rows, _, _, score in learner.calls:
        assert ((score >= 0) & (score <= 1)).all()
        true = table.scores[rows].double()
        inside = (true > 0.2) & (true < 0.8)  # far from the clip
        diffs.append((score - true)[inside])
    diff = torch.cat(diffs)
    assert abs(float(diff.mean())) < 4 * 0.05 / math.sqrt(diff.numel())
    assert float(diff.std()) == pytest.approx(0.05, rel=0.1)


def test_without_the_option_the_env_is_as_before(table):
    plain, mapping = _env(table, "bandit"), _env(table, {"mode": "bandit"})
    assert plain.feedback_schedule is None and plain.feedback_arrives is None
    assert plain.feedback_delay == 0
    assert plain.fingerprint() == mapping.fingerprint()
    assert plain.fingerprint()["feedback"] == "bandit"
    assert _env(table, {"delay": 3}).fingerprint()["feedback"] != "bandit"


def test_selected_trials_keep_their_rated_rounds_and_noise(table):
    option = {"mode": "full", "rate": 0.5, "noise": 0.1}
    env = _env(table, option)
    part = env.select_trials([2, 1])
    assert torch.equal(part.feedback_arrives, env.feedback_arrives[[2, 1]])
    whole, _ = _run(env)
    piece, _ = _run(part)
    for a, b in zip(whole.calls, piece.calls):
        assert torch.equal(a[4][[2, 1]], b[4]) and torch.equal(a[3][[2, 1]], b[3])


def test_a_delayed_run_resumes_bit_for_bit(table, tmp_path):
    env = _env(table, {"delay": 5, "rate": 0.5, "noise": 0.1})
    whole = EXP3.from_problem(env.problem())
    full = simulate(whole, env, progress=False, seed=3)
    ckpt, half = tmp_path / "ck.pt", tmp_path / "half.pt"

    def keep_round_50(t, *_):
        if t == 60:  # the checkpoint of round 50, with 5 rounds of decisions pending
            half.write_bytes(ckpt.read_bytes())

    part = EXP3.from_problem(env.problem())
    simulate(
        part, env, progress=False, seed=3, ckpt_every=50, ckpt_path=ckpt, on_round=keep_round_50
    )
    resumed = EXP3.from_problem(env.problem())
    out = simulate(resumed, env, progress=False, seed=3, resume_from=half)
    assert out.summary.equals(full.summary)
    assert torch.equal(resumed.log_weights, whole.log_weights)
    assert torch.equal(resumed.rounds, whole.rounds)


@pytest.mark.parametrize(
    ("feedback", "message"),
    [
        ({"delay": -1}, "feedback.delay must be a whole number of rounds >= 0"),
        ({"delay": 1.5}, "feedback.delay must be a whole number"),
        ({"rate": 0.0}, "feedback.rate must be in (0, 1]"),
        ({"rate": "half"}, "feedback.rate must be a number"),
        ({"noise": -0.1}, "feedback.noise must be finite and >= 0"),
        ({"noise": float("nan")}, "feedback.noise must be a number"),
        ({"lag": 3}, "feedback.lag is not a key"),
        ({"mode": "partial"}, "feedback.mode must be 'bandit' or 'full'"),
        (3, "feedback must be 'bandit', 'full' or a mapping"),
        ("partial", "feedback must be 'bandit', 'full' or a mapping"),
    ],
)
def test_a_bad_option_is_one_line_naming_the_key(table, feedback, message):
    with pytest.raises(FeedbackOptionError) as info:
        _env(table, feedback)
    assert message in str(info.value) and "\n" not in str(info.value)
