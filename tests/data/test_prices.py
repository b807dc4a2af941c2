"""Per-token prices -> per-query dollars (issue 10, item 2); costs worked out by hand."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from torchroute.data import TableError, load_table

PRICES = {
    "gpt-4o": {"input_per_mtok": 2.5, "output_per_mtok": 10.0},
    "org/llama-8b": {"input_per_mtok": 0.2, "output_per_mtok": 0.2},
}


def _frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "query_id": ["a", "b"],
            "text": ["x" * 8, "y" * 400],  # 2 and 100 tokens at chars / 4
            "gpt-4o": [1, 0],
            "llama-8b": [0, 1],
            "prompt_tokens": [1000, 3000],
            "gpt-4o|out": [500, 100],
            "llama-8b|out": [200, 0],
        }
    )


def test_token_columns(caplog):
    with caplog.at_level(logging.INFO, logger="torchroute.data"):
        t = load_table(
            _frame(),
            score_pattern="{arm}",
            prices=PRICES,
            input_tokens="prompt_tokens",
            output_tokens="{arm}|out",
        )
    assert t.arm_names == ("gpt-4o", "llama-8b")  # priced by the last '/' part too
    expected = [
        [1000 * 2.5e-6 + 500 * 10e-6, 1000 * 0.2e-6 + 200 * 0.2e-6],
        [3000 * 2.5e-6 + 100 * 10e-6, 3000 * 0.2e-6 + 0.0],
    ]
    np.testing.assert_allclose(t.costs.numpy(), expected, rtol=1e-12)
    assert "input tokens 'prompt_tokens', output tokens '{arm}|out'" in caplog.text


def test_input_tokens_estimated_from_text_chars_over_4(caplog):
    with caplog.at_level(logging.INFO, logger="torchroute.data"):
        t = load_table(_frame(), score_pattern="{arm}", prices=PRICES, output_tokens=50)
    expected = [
        [2 * 2.5e-6 + 50 * 10e-6, 2 * 0.2e-6 + 50 * 0.2e-6],
        [100 * 2.5e-6 + 50 * 10e-6, 100 * 0.2e-6 + 50 * 0.2e-6],
    ]
    np.testing.assert_allclose(t.costs.numpy(), expected, rtol=1e-12)
    assert "estimated from the text (chars / 4)" in caplog.text


def test_input_tokens_from_a_tokenizer_and_no_output_tokens_warns(caplog):
    class Words:
        """A tokenizer stand-in: one token per whitespace-separated word."""

        name_or_path = "words"

        def encode(self, text, add_special_tokens=False):
            return text.split()

    frame = _frame().assign(text=["one two three", "four"])
    with caplog.at_level(logging.INFO, logger="torchroute.data"):
        t = load_table(frame, score_pattern="{arm}", prices=PRICES, tokenizer=Words())
    np.testing.assert_allclose(t.costs.numpy()[:, 0], [3 * 2.5e-6, 1 * 2.5e-6], rtol=1e-12)
    assert "tokenizer words" in caplog.text
    assert "no output token counts" in caplog.text


def test_prices_from_csv_and_long_layout(tmp_path: Path):
    csv = tmp_path / "prices.csv"
    csv.write_text("model,input_per_mtok,output_per_mtok\ngpt-4o,2.5,10\nllama-8b,0.2,0.2\n")
    long = pd.DataFrame(
        {
            "query_id": ["a", "a", "b", "b"],
            "arm": ["gpt-4o", "llama-8b"] * 2,
            "score": [1.0, 0.0, 0.0, 1.0],
            "in_tok": [1000, 1100, 3000, 3100],
            "out_tok": [500, 200, 100, 0],
        }
    )
    t = load_table(long, prices=csv, input_tokens="in_tok", output_tokens="out_tok")
    expected = [
        [1000 * 2.5e-6 + 500 * 10e-6, 1100 * 0.2e-6 + 200 * 0.2e-6],
        [3000 * 2.5e-6 + 100 * 10e-6, 3100 * 0.2e-6],
    ]
    np.testing.assert_allclose(t.costs.numpy(), expected, rtol=1e-12)


def test_price_errors():
    kw = dict(score_pattern="{arm}", input_tokens="prompt_tokens")
    with pytest.raises(TableError, match=r"no price for models \['llama-8b'\]"):
        load_table(_frame(), prices={"gpt-4o": PRICES["gpt-4o"]}, models=["gpt-4o", "llama-8b"],
                   **kw)  # fmt: skip
    with pytest.raises(TableError, match=r"'gpt-4o' must be \{input_per_mtok, output_per_mtok\}"):
        load_table(_frame(), prices={"gpt-4o": 2.5}, models=["gpt-4o"], **kw)
    with pytest.raises(TableError, match="output_per_mtok must be a number >= 0"):
        bad = {"gpt-4o": {"input_per_mtok": 1, "output_per_mtok": -1}}
        load_table(_frame(), prices=bad, models=["gpt-4o"], **kw)
    with pytest.raises(TableError, match="not both"):
        load_table(_frame(), prices=PRICES, costs={"gpt-4o": 1.0}, **kw)
    with pytest.raises(TableError, match="read only with prices"):
        load_table(_frame(), input_tokens="prompt_tokens")
    with pytest.raises(TableError, match=r"input_tokens='\{arm\}\|in' but there is no column"):
        load_table(_frame(), score_pattern="{arm}", prices=PRICES, input_tokens="{arm}|in")
    with pytest.raises(TableError, match="text column to estimate"):
        load_table(_frame().drop(columns=["text"]), score_pattern="{arm}", prices=PRICES)
