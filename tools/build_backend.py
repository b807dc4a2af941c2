"""The build backend: setuptools, leaving no ``build/`` or ``*.egg-info`` in the source tree.

setuptools writes its intermediate files (``build/``, ``torchroute.egg-info/``) next to
``pyproject.toml``; a ``pip install .`` would leave them in the checkout. Every hook here
delegates to ``setuptools.build_meta`` and removes what it created.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from setuptools import build_meta as _setuptools

_BY_PRODUCTS = ("build", "torchroute.egg-info")


@contextlib.contextmanager
def _clean_tree() -> Iterator[None]:
    """Remove the by-products a hook creates (and none that existed before it)."""
    before = {name for name in _BY_PRODUCTS if Path(name).exists()}
    try:
        yield
    finally:
        for name in set(_BY_PRODUCTS) - before:
            shutil.rmtree(name, ignore_errors=True)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 517 hook: build the wheel into ``wheel_directory``."""
    with _clean_tree():
        return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):
    """PEP 517 hook: build the source distribution into ``sdist_directory``."""
    with _clean_tree():
        return _setuptools.build_sdist(sdist_directory, config_settings)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660 hook: build the editable wheel into ``wheel_directory``."""
    with _clean_tree():
        return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    """PEP 517 hook: write the ``.dist-info`` folder into ``metadata_directory``."""
    with _clean_tree():
        return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    """PEP 660 hook: write the ``.dist-info`` folder into ``metadata_directory``."""
    with _clean_tree():
        return _setuptools.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def get_requires_for_build_wheel(config_settings=None):
    """PEP 517 hook: what building the wheel needs beyond ``build-system.requires``."""
    with _clean_tree():
        return _setuptools.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_sdist(config_settings=None):
    """PEP 517 hook: what building the sdist needs beyond ``build-system.requires``."""
    with _clean_tree():
        return _setuptools.get_requires_for_build_sdist(config_settings)


def get_requires_for_build_editable(config_settings=None):
    """PEP 660 hook: what building the editable wheel needs."""
    with _clean_tree():
        return _setuptools.get_requires_for_build_editable(config_settings)
