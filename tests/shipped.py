"""The shipped environments (scripts/shipped_envs.py), as tests use them: built once per
recipe under .cache/shipped-envs (CI builds them first with `make shipped-envs`; a test run
without them builds what it needs, which takes minutes and the network)."""

from __future__ import annotations

import importlib.util
import os
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


@cache
def shipped_envs() -> ModuleType:
    """scripts/shipped_envs.py, loaded by its path (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("shipped_envs", ROOT / "scripts/shipped_envs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while defined
    spec.loader.exec_module(module)
    return module


def built(name: str) -> Path:
    """The directory of environment ``name``, built as its recipe builds it (or reused)."""
    module = shipped_envs()
    target, _ = module.build(module.ENVS[name])
    return Path(target)


def user_environment() -> dict[str, str]:
    """This process's environment less what points into the test venv (a user's shell has
    none of it): the shipped environment's own interpreter decides what is importable."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PYTEST_", "COV_"))
    }
