"""Learner names as ``report.md`` shows them: text, never markup.

A learner's name comes from a config key; one holding HTML or markdown (``<img src=x>``,
``**x**``, ``a|b``) would otherwise be written into the report as markup or break a
table's columns. :func:`markdown_name` escapes the characters that make markup; a plain
name (letters, digits, ``_ - .``) is left as it is.
"""

from __future__ import annotations

import pandas as pd

_MARKUP = {
    "&": "&amp;",
    "<": "&lt;",
    ">": "&gt;",
    "|": "\\|",
    "*": "\\*",
    "[": "\\[",
    "]": "\\]",
    "`": "\\`",
    "#": "\\#",
    "\\": "\\\\",
}


def markdown_name(name: str) -> str:
    """``name`` with its markup characters escaped (``<b>`` -> ``&lt;b&gt;``)."""
    return "".join(_MARKUP.get(c, c) for c in str(name))


def escape_learners(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its ``learner`` column passed through :func:`markdown_name`."""
    if "learner" not in frame.columns:
        return frame
    return frame.assign(learner=frame["learner"].astype(str).map(markdown_name))


__all__ = ["escape_learners", "markdown_name"]
