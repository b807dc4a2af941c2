"""Every error class of the package is defined in ``torchroute/errors.py`` (and stays
importable from the module that raises it): read from the source (``ast``), a class whose
base is an exception (a builtin one, or one of ``torchroute.errors``) anywhere else fails."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import torchroute
import torchroute.errors

ROOT = Path(torchroute.__file__).parent
BUILTIN_EXCEPTIONS = {
    name
    for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, BaseException)
}
PACKAGE_EXCEPTIONS = {
    name
    for name, obj in vars(torchroute.errors).items()
    if isinstance(obj, type) and issubclass(obj, BaseException)
}


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def test_error_classes_live_in_errors_py():
    outside = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.name == "errors.py" and path.parent == ROOT:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {_base_name(b) for b in node.bases}
            if bases & (BUILTIN_EXCEPTIONS | PACKAGE_EXCEPTIONS):
                outside.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert outside == [], "define these in torchroute/errors.py"


def test_the_moved_classes_are_importable_where_they_are_raised():
    from torchroute.gateway.upstream import CallFailed
    from torchroute.serve.checks import DuplicateModelError
    from torchroute.serve.router import StoreError

    assert CallFailed is torchroute.errors.CallFailed
    assert DuplicateModelError is torchroute.errors.DuplicateModelError
    assert StoreError is torchroute.errors.StoreError
