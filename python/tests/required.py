"""A package a test needs: imported, or the test skipped saying why; under
SONOGRAPH_REQUIRE_PYTHON=1 (CI, which installs every pinned package) it fails instead."""

import importlib
import os
from types import ModuleType

import pytest


def module(name: str, install: str = "pip install -r scripts/requirements-test.txt, which holds the readers") -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as e:
        why = f"{name} is not installed ({e}; {install})"
        if os.environ.get("SONOGRAPH_REQUIRE_PYTHON") == "1":
            pytest.fail(f"{why}, and SONOGRAPH_REQUIRE_PYTHON=1")
        pytest.skip(why)
