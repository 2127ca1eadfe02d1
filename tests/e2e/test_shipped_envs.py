"""Each shipped environment, built as its recipe builds it (scripts/shipped_envs.py), imports
its entry points and has every third-party module they reach installed, or reports the optional
runtime's install. It runs in that environment's own interpreter, without the test venv."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.shipped import built, shipped_envs

pytestmark = pytest.mark.e2e


def built_or_skipped(name: str) -> tuple[Any, Path]:
    """Environment ``name`` and its directory; one CI does not build (ON_REQUEST) is skipped
    unless it was built here."""
    module = shipped_envs()
    env = module.ENVS[name]
    if name in module.ON_REQUEST and not (env.home / ".built").exists():
        pytest.skip(f"not built: make shipped-envs ARGS={name} (PyTorch with CUDA, ~3 GB; paddle)")
    return env, built(name)


@pytest.mark.parametrize("name", [*shipped_envs().DEFAULT, *shipped_envs().ON_REQUEST])
def test_the_shipped_environment_has_what_its_entry_points_import(name: str):
    # Given the environment as its recipe builds it (reused from .cache/shipped-envs)
    module = shipped_envs()
    env, target = built_or_skipped(name)
    # When its own interpreter imports the entry points and walks their imports
    answer = module.check(env, target)
    # Then every entry point imported, and nothing reachable is missing
    assert answer["missing"] == [], "\n".join(answer["missing"])
    assert len(answer["imported"]) == len(env.entries)
    assert answer["returncode"] == 0


# What only `lambdaserve dev` and the tests use: never in an image, the layer or a function
DEV_ONLY_MODULES = ("moto", "aws_sam_translator", "awscli", "lambdaserve/local", "pytest")
SHIPPED = [
    name
    for name in (*shipped_envs().DEFAULT, *shipped_envs().ON_REQUEST)
    if not name.startswith("dev")
]


@pytest.mark.parametrize("name", SHIPPED)
def test_no_shipped_environment_holds_the_emulator(name: str):
    # Given the environment as its recipe builds it (the package copied in as it ships)
    env, target = built_or_skipped(name)
    # When what it holds is listed (every directory its interpreter imports from)
    roots = [target / "python", target / "runtime"] if env.layer else [target]
    sites = [s for root in roots for s in [*root.glob("venv/lib/python3*/site-packages"), root]]
    held = {
        str(path.relative_to(site))
        for site in sites
        for path in [*site.glob("*"), *site.glob("lambdaserve/*")]
        if path.is_dir()
    }
    # Then it holds the package, and none of the emulator's modules, nor the test tools
    assert "lambdaserve/serving" in held, sorted(held)[:20]
    assert not set(DEV_ONLY_MODULES) & held, f"{name} ships {sorted(set(DEV_ONLY_MODULES) & held)}"


def test_the_dev_environment_keeps_the_emulator():
    # the control: `make dev`'s venv is where the emulator lives (the listing can see it)
    target = built("dev")
    assert any(target.glob("lib/python3*/site-packages/moto"))
