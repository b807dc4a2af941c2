"""Imports go one way: read from the source (``ast``) of every module under ``torchroute/``,
no import cycle and no import of a higher layer; a cold run imports no warm-start code.

The layers, lowest first (a module may import its own layer and those below it; the same
order is drawn in ``docs/architecture.md``). An import under ``if TYPE_CHECKING:`` is for
the type checker only and is not counted; an import inside a function is.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import torchroute

ROOT = Path(torchroute.__file__).parent

#: top-level part of a module name (``torchroute.<part>...``) -> its layer
LAYERS: dict[str, int] = {
    # 0: shared helpers with no torchroute import but each other's
    **dict.fromkeys(
        (
            *("errors", "buildable", "checks", "io", "console", "configs_path", "metrics"),
            *("paper_results", "checkpoint", "results_file", "tracking"),
            *("data_root", "heartbeat"),
        ),
        0,
    ),
    "functional": 1,  # pure tensor math
    # 2: the objects of one round: types, tables, learners, envs, the feature map
    **dict.fromkeys(["types", "data", "learners", "envs", "features", ""], 2),
    **dict.fromkeys(["loop", "feedback_queue"], 3),  # the simulation loop, its pending feedback
    "run": 4,  # a config -> a finished run folder
    # 5: what reads or serves runs, and the commands built on run
    **dict.fromkeys(["serve", "ope", "report", "devicecheck", "sweep", "gap"], 5),
    "gateway": 6,
    **dict.fromkeys(["cli", "__main__"], 7),
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = ["torchroute", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` outside ``if TYPE_CHECKING:`` blocks."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            test = child.test if isinstance(child, ast.If) else None
            if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
                todo.extend(child.orelse)
                continue
            todo.append(child)


def import_edges() -> set[tuple[str, str]]:
    """``(importer, imported)`` pairs of torchroute modules, as the source says."""
    modules = _modules()

    def owner(name: str) -> str | None:
        parts = name.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        return ".".join(parts) or None

    edges = set()
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
                targets = subs if len(subs) == len(node.names) else [base, *subs]
            for target in targets:
                imported = owner(target) if target.startswith("torchroute") else None
                if imported and imported != name:
                    edges.add((name, imported))
    return edges


def _layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else ""
    assert part in LAYERS, f"{module}: place torchroute.{part} in a layer of LAYERS"
    return LAYERS[part]


def test_every_module_has_a_layer_and_no_import_goes_up():
    upward = set()
    for importer, imported in import_edges():
        if _layer(imported) > _layer(importer):
            upward.add((importer, imported))
    assert upward == set(), "imports of a higher layer"


def test_no_import_cycle():
    graph: dict[str, set[str]] = {}
    for importer, imported in import_edges():
        graph.setdefault(importer, set()).add(imported)
    cycles = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == []


def test_the_reader_sees_a_planted_cycle_and_an_upward_import(tmp_path, monkeypatch):
    """The checks above are only as good as the edges: a cycle through a function-level
    import and an upward import are found (a package written for the test)."""
    pkg = tmp_path / "torchroute"
    (pkg / "learners").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "learners" / "__init__.py").write_text("from torchroute.learners import a\n")
    (pkg / "learners" / "a.py").write_text("def f():\n    from torchroute.run import x\n")
    (pkg / "run").mkdir()
    (pkg / "run" / "__init__.py").write_text("")
    (pkg / "run" / "x.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torchroute.cli\n"
        "from torchroute.learners import a\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", pkg)
    edges = import_edges()
    assert ("torchroute.learners.a", "torchroute.run.x") in edges  # upward, in a function
    assert ("torchroute.run.x", "torchroute.learners.a") in edges  # and back: a cycle
    assert not any(b == "torchroute.cli" for _, b in edges)  # type-checking only


def test_a_cold_linucb_run_imports_no_warm_start_code(tmp_path):
    """The warm-start rows, closed forms and the run's warm step are imported only by a run
    that warm-starts (checked in a fresh process)."""
    code = f"""
import sys
from tests.conftest import LINUCB_NODE, tiny_run_config
from torchroute.run import run_config
run_config(tiny_run_config({str(tmp_path / "run")!r}, {{"linucb": {{**LINUCB_NODE,
    "warm_start": None}}}}))
warm = sorted(m for m in sys.modules if m.startswith("torchroute") and "warm" in m)
print(warm)
"""
    root = ROOT.parent
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "['torchroute.learners.warm_options']"
