"""The CABS report section: paper numbers beside measured ones, relations, Figure 3."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from torchroute.paper_results import paper_table
from torchroute.report.arms import attach_arm_names
from torchroute.report.cabs import cabs_section, paper_comparison

#: RouterBench's models, as its table names them (the paper's Table 1 and Table 8)
ROUTERBENCH = ["WizardLM/WizardLM-13B-V1.2", "claude-instant-v1", "claude-v1", "claude-v2",
               "gpt-3.5-turbo-1106", "gpt-4-1106-preview", "meta/code-llama-instruct-34b-chat",
               "meta/llama-2-70b-chat", "mistralai/mistral-7b-chat",
               "mistralai/mixtral-8x7b-chat", "zero-one-ai/Yi-34B-Chat"]  # fmt: skip


def _results(arms=ROUTERBENCH):
    rows = []
    for learner, base in [("linucb", 0.5), ("cabs_d", 0.6), ("cabs_c", 0.55), ("linucb_full", 0.7)]:
        for rho in (0.0, 500.0, 900.0):
            rows.append({"learner": learner, "rho": rho, "seed": 0, "avg_utility": base - rho / 1e4,
                         "avg_regret": 1 - base})  # fmt: skip
    return attach_arm_names(pd.DataFrame(rows), arms)


def _curves():
    rows = []
    for learner, slope in [("linucb", 0.3), ("cabs_d", 0.2)]:
        for rho in (0.0, 500.0, 900.0):
            rows += [{"learner": learner, "rho": rho, "seed": 0, "round": t,
                      "cum_regret": slope * t} for t in (1, 2, 3)]  # fmt: skip
    return pd.DataFrame(rows)


def test_paper_table_is_transcribed():
    paper = paper_table("cabs")
    row = paper[(paper.table == "table8") & (paper.learner == "cabs_d") & (paper.regime == "low")]
    assert row["value"].item() == 0.6539  # Table 8, RouterBench, CABS-D (Linear), low
    assert len(paper) == 48


def test_section_compares_and_checks_relations(tmp_path):
    comparison = paper_comparison(_results())
    assert comparison.loc["cabs_d", "low"] == 0.6
    assert comparison.loc["cabs_d", "low_paper"] == 0.6539
    lines = cabs_section(_results(), _curves(), tmp_path)
    text = "\n".join(lines)
    assert "`cabs_d` > `linucb`: low: holds" in text
    assert "`linucb_full` >= `cabs_d`: low: holds" in text
    assert (tmp_path / "cabs_relative_regret.png").is_file()
    row = r"\| cabs_d +\| +-0\.3000 +\| +-0\.3000 +\| +-0\.3000 +\|"
    assert re.search(row, text)  # (0.2 - 0.3) * 3 per regime
    assert cabs_section(_results().assign(learner="linucb"), _curves(), tmp_path) == []


@pytest.mark.parametrize(
    "arms",
    [
        ["gpt-4", "gpt-3.5", "claude-3", "llama-70b", "mixtral", "mistral", "yi", "qwen"],
        ROUTERBENCH[:-1],  # a RouterBench subset is not the paper's table either
        None,  # no problem.pt: the models are unknown
    ],
)
def test_no_paper_comparison_on_another_table(tmp_path, arms):
    text = "\n".join(cabs_section(_results(arms), _curves(), tmp_path))
    assert "paper" in text and "not compared" in text
    assert "measured vs paper" not in text and "0.6539" not in text
    assert "holds" not in text and "PASS" not in text and "FAIL" not in text
    assert re.search(r"\| cabs_d +\| +-0\.3000 +\| +-0\.3000 +\| +-0\.3000 +\|", text)
