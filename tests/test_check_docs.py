"""tools/check_docs.py: finds the marked blocks of the README and runs blocks in order."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_docs", ROOT / "tools" / "check_docs.py")
check_docs = importlib.util.module_from_spec(_spec)
sys.modules["check_docs"] = check_docs  # dataclasses look their module up
_spec.loader.exec_module(check_docs)


def test_readme_commands_are_all_marked() -> None:
    """Every torchroute command and python block of the README runs in the docs check,
    except the long-running server and the make targets (run by CI itself)."""
    text = (ROOT / "README.md").read_text()
    checked = "".join(b.code for b in check_docs.marked_blocks(ROOT / "README.md"))
    fenced = text.split("```")[1::2]  # the contents of every fenced block
    for block in fenced:
        lang, _, code = block.partition("\n")
        for line in code.splitlines():
            if line.startswith("torchroute ") and not line.startswith("torchroute serve"):
                assert line in checked, line
        if lang == "python":
            assert code in checked
    assert "torchroute simulate" in checked and "torchroute report" in checked


def test_blocks_run_in_order_in_one_folder_and_a_failure_fails(tmp_path, capsys) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n<!-- check -->\n```bash\necho hi > made.txt\n```\n"
        "```bash\nnot checked: no marker\n```\n"
        "<!-- check -->\n```python\nassert open('made.txt').read() == 'hi\\n'\n```\n"
    )
    blocks = check_docs.marked_blocks(page)
    assert [(b.line, b.lang) for b in blocks] == [(3, "bash"), (10, "python")]
    assert check_docs.run_blocks(blocks) == 0
    page.write_text("<!-- check -->\n```bash\ntrue\nfalse\necho after\n```\n")
    assert check_docs.main([str(page)]) == 1
    err = capsys.readouterr().err
    assert "page.md:2 failed (exit 1)" in err and "after" not in err


def test_a_marker_without_a_block_is_an_error(tmp_path) -> None:
    page = tmp_path / "bad.md"
    page.write_text("<!-- check -->\nno block\n")
    with pytest.raises(ValueError, match=r"bad.md:1: <!-- check --> must precede"):
        check_docs.marked_blocks(page)
