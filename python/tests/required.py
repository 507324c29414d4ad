"""A package a test needs: imported, or the test skipped saying why; under
SONOGRAPH_REQUIRE_PYTHON=1 (CI, which installs every pinned package) it fails instead."""

import importlib
import os
from types import ModuleType

import pytest


def module(name: str, pins: str = "scripts/requirements-test.txt") -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as e:
        why = f"{name} is not installed ({e}; pip install --no-deps -r {pins}, as scripts/test.sh does)"
        if os.environ.get("SONOGRAPH_REQUIRE_PYTHON") == "1":
            pytest.fail(f"{why}, and SONOGRAPH_REQUIRE_PYTHON=1")
        pytest.skip(why)
