"""Run every code block marked ``<!-- check -->`` in README.md and docs/ (a doctest for commands).

A block is checked when the line just before its opening fence is ``<!-- check -->``;
``bash`` blocks run with ``bash -eo pipefail``, ``python`` blocks with this interpreter.
The blocks of one file run in order in one fresh temporary folder (so a later block may
read what an earlier one wrote), with this interpreter's ``bin/`` first on ``PATH`` (the
``torchroute`` command), wandb offline and the Hugging Face hub offline. Exit status 1 and
the file, line and output of the first failing block otherwise.

Usage: ``python tools/check_docs.py [--list] [FILE.md ...]`` (default: README.md and
docs/**/*.md).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- check -->"
_FENCE = re.compile(r"^```(\w+)")


@dataclass
class Block:
    """One marked code block: its file, the line of its opening fence, language and code."""

    path: Path
    line: int
    lang: str
    code: str


def marked_blocks(path: Path) -> list[Block]:
    """The marked blocks of a Markdown file, in order.

    Raises:
        ValueError: a marker not followed by a fenced ``bash`` or ``python`` block.
    """
    lines = path.read_text().splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        match = _FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if not match or match.group(1) not in ("bash", "python"):
            raise ValueError(f"{path}:{i + 1}: {MARK} must precede a ```bash or ```python block")
        end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{path}:{i + 2}: unterminated code block")
        blocks.append(Block(path, i + 2, match.group(1), "\n".join(lines[i + 2 : end]) + "\n"))
    return blocks


def run_blocks(blocks: list[Block], timeout: float = 900) -> int:
    """Run the blocks of one file in one temporary folder; the exit status (0: all passed)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("WANDB_MODE", "offline")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("TORCHROUTE_REPO", str(ROOT))  # the blocks that run a helper of the clone
    with tempfile.TemporaryDirectory(prefix="torchroute-docs-") as work:
        for block in blocks:
            name = block.path.relative_to(ROOT) if block.path.is_relative_to(ROOT) else block.path
            where = f"{name}:{block.line}"
            print(f"check_docs: {where} ({block.lang})", flush=True)
            if block.lang == "bash":
                argv = ["bash", "-eo", "pipefail", "-c", block.code]
            else:
                argv = [sys.executable, "-c", block.code]
            done = subprocess.run(
                argv, cwd=work, env=env, capture_output=True, text=True, timeout=timeout
            )
            if done.returncode != 0:
                print(f"check_docs: {where} failed (exit {done.returncode}):", file=sys.stderr)
                print((done.stdout + done.stderr)[-4000:], file=sys.stderr)
                return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: check the given Markdown files (default: README.md and docs/)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--list", action="store_true", help="list the marked blocks, run none")
    args = parser.parse_args(argv)
    files = args.files or [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    status = 0
    for path in files:
        blocks = marked_blocks(path.resolve())
        if args.list:
            for block in blocks:
                print(f"{block.path}:{block.line} {block.lang}")
            continue
        if blocks:
            status = status or run_blocks(blocks)
    return status


if __name__ == "__main__":
    sys.exit(main())
