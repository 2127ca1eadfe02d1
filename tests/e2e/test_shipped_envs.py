"""Each shipped environment, built as its recipe builds it (scripts/shipped_envs.py), imports
its entry points and has every third-party module they reach installed, or reports the optional
runtime's install. It runs in that environment's own interpreter, without the test venv."""

from __future__ import annotations

import pytest

from tests.shipped import built, shipped_envs

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("name", [*shipped_envs().DEFAULT, *shipped_envs().ON_REQUEST])
def test_the_shipped_environment_has_what_its_entry_points_import(name: str):
    # Given the environment as its recipe builds it (reused from .cache/shipped-envs)
    module = shipped_envs()
    env = module.ENVS[name]
    if name in module.ON_REQUEST and not (env.home / ".built").exists():
        pytest.skip(f"not built: make shipped-envs ARGS={name} (PyTorch with CUDA, ~3 GB; paddle)")
    target = built(name)
    # When its own interpreter imports the entry points and walks their imports
    answer = module.check(env, target)
    # Then every entry point imported, and nothing reachable is missing
    assert answer["missing"] == [], "\n".join(answer["missing"])
    assert len(answer["imported"]) == len(env.entries)
    assert answer["returncode"] == 0
