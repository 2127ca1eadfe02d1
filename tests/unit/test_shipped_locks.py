"""What ships is what the locks say, and the locks keep the emulator out of production.

Every shipped environment installs from its lock (locks/*.txt; the layer from
layers/core/requirements.txt) with hashes required, so the lock lists exactly what it holds.
These tests read them: no image, layer or zip function carries the emulator's packages, every
lock takes the test lock's version of each package it shares with it, and each recipe installs
from its lock with --require-hashes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {
    "infer": ROOT / "locks/infer.txt",
    "infer-paddle": ROOT / "locks/infer-paddle.txt",
    "infer-tensorflow": ROOT / "locks/infer-tensorflow.txt",
    "manage": ROOT / "locks/manage.txt",
    "serve-cpu": ROOT / "locks/serve-cpu.txt",
    "serve-cpu-tensorflow": ROOT / "locks/serve-cpu-tensorflow.txt",
    "gpu": ROOT / "locks/gpu.txt",
    "layer": ROOT / "layers/core/requirements.txt",
}
# What only `dev` and the tests use (the `local` and `dev` extras)
DEV_ONLY = {"moto", "aws-sam-translator", "awscli", "pytest", "cfn-lint", "uv"}
_PIN = re.compile(r"^([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==([^ ;\\]+)", re.M)


def pins(lock: Path) -> dict[str, str]:
    return {
        name.lower().replace("_", "-"): version for name, version in _PIN.findall(lock.read_text())
    }


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_no_shipped_environment_holds_the_emulator(name):
    # Given the lock a shipped environment installs from
    held = pins(SHIPPED[name])
    # Then it holds packages, every one hashed, and none that only dev or the tests use
    assert held, name
    assert SHIPPED[name].read_text().count("--hash=sha256:") >= len(held)
    assert not DEV_ONLY & set(held), f"{name} ships {sorted(DEV_ONLY & set(held))}"


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_what_ships_is_the_version_the_tests_ran(name):
    tested = pins(ROOT / "locks/test.txt")
    shipped = pins(SHIPPED[name])
    moved = {p: (v, tested[p]) for p, v in shipped.items() if p in tested and tested[p] != v}
    assert not moved, f"{name} ships other versions than the tests ran: {moved}"


@pytest.mark.parametrize(
    ("recipe", "lock"),
    [
        ("functions/infer/Dockerfile", "infer"),
        ("functions/manage/Dockerfile", "manage"),
        ("functions/infer/Dockerfile.cpu", "serve-cpu"),
        ("functions/infer/Dockerfile.gpu", "gpu"),
    ],
)
def test_each_image_installs_from_its_lock_with_hashes(recipe, lock):
    text = (ROOT / recipe).read_text()
    assert f"ARG LOCK={lock}" in text
    assert '--require-hashes -r "/build/locks/${LOCK}.txt"' in re.sub(r"\\\n\s*", "", text)
    assert "COPY locks /build/locks" in text


def test_make_installs_every_venv_from_a_lock():
    makefile = (ROOT / "Makefile").read_text()
    rules = re.findall(r"^\$\(VENV\)/\.\w+-installed:.*(?:\n\t.*)*", makefile, re.M)
    installs = [line for rule in rules for line in rule.splitlines() if "pip install" in line]
    assert installs
    assert "--require-hashes" in re.search(r"^LOCKED .*$", makefile, re.M)[0]
    for line in installs:  # the editable install adds the package itself, never a dependency
        assert "--require-hashes" in line or "--no-deps" in line or "$(LOCKED)" in line, line
    for rule in ("dev", "test", "torch", "torchserve", "paddle", "tensorflow", "openvino"):
        assert re.search(rf"^\$\(VENV\)/\.{rule}-installed:.*locks/", makefile, re.M), rule
