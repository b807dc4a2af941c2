"""The wheel carries every config: each folder of configs/ is a package with its YAML files."""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def test_every_config_group_is_packaged() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    groups = sorted(p.name for p in (ROOT / "configs").iterdir() if any(p.glob("*.yaml")))
    assert groups, "no config groups found"
    for group in groups:
        package = f"torchroute.configs.{group}"
        assert package in setuptools["packages"], package
        assert setuptools["package-data"][package] == ["*.yaml"], package
    assert setuptools["package-data"]["torchroute.configs"] == ["*.yaml"]
    assert project["project"]["license"] == "Apache-2.0"
    assert (ROOT / project["project"]["license-files"][0]).is_file()


def test_configs_resolve_to_a_regular_package() -> None:
    """``torchroute.configs`` has an ``__init__.py``, so ``importlib.resources`` gives one
    folder (not a namespace ``MultiplexedPath``) in editable and regular installs."""
    files = importlib.resources.files("torchroute.configs")
    assert (Path(str(files)) / "simulate.yaml").is_file()
    assert (Path(str(files)) / "__init__.py").is_file()


def test_every_python_package_is_packaged() -> None:
    """A folder of ``torchroute/``, ``models/`` or ``trainers/`` with an ``__init__.py`` is in
    the wheel's package list (a missing one imports in a checkout and fails once installed)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = set(project["tool"]["setuptools"]["packages"])
    for init in sorted((ROOT / "torchroute").rglob("__init__.py")):
        name = ".".join(init.parent.relative_to(ROOT).parts)
        assert name in packages, name


def test_a_copy_of_the_checkout_imports_its_own_folders(tmp_path):
    """``torchroute.models`` / ``.trainers`` / ``.configs`` of a second checkout (here a copy,
    put first on ``PYTHONPATH``) are its own folders, not the installed checkout's."""
    import shutil
    import subprocess
    import sys

    clone = tmp_path / "clone"
    for name in ("torchroute", "models", "trainers", "configs"):
        shutil.copytree(ROOT / name, clone / name, ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", clone / "pyproject.toml")
    code = (
        "import torchroute, torchroute.models as m, torchroute.trainers as t, "
        "torchroute.configs as c; print(torchroute.__file__, m.__file__, t.__file__, c.__file__)"
    )
    env = {**os.environ, "PYTHONPATH": str(clone)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    files = done.stdout.split()
    assert len(files) == 4 and all(f.startswith(str(clone)) for f in files), files
