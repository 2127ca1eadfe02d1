"""The image recipes cannot be built here (no Docker engine); check what they rely on."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted(ROOT.glob("functions/*/Dockerfile*"))


def test_there_are_recipes_to_check():
    assert {p.name for p in DOCKERFILES} >= {"Dockerfile", "Dockerfile.gpu"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_copy_source_exists_in_the_build_context(dockerfile: Path):
    sources = []
    for line in dockerfile.read_text().splitlines():
        if match := re.match(r"^COPY\s+(.+)\s+\S+$", line.strip()):
            sources += match.group(1).split()
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), f"{dockerfile.name} copies missing {source}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_entry_point_resolves(dockerfile: Path):
    text = dockerfile.read_text()
    if match := re.search(r'CMD \["app\.(\w+)"\]', text):
        # functions/<name>/app.py re-exports lambdaserve.handlers.<name>
        app = importlib.import_module(f"lambdaserve.handlers.{dockerfile.parent.name}")
        assert callable(getattr(app, match.group(1)))
    else:
        match = re.search(r"^CMD (\[.*\])$", text, re.MULTILINE)
        assert match, "no CMD"
        command = json.loads(match.group(1))
        assert command[0] == "lambdaserve"
        from lambdaserve.cli import _parser

        assert _parser().parse_args(command[1:]).command == command[1]


@pytest.mark.parametrize(("flag", "extra"), [("TORCH=1", "torch"), ("TORCHSERVE=1", "torchserve")])
def test_make_dev_installs_what_the_flag_promises(tmp_path: Path, flag: str, extra: str):
    """Given a fresh clone (no virtual environment yet)
    When `make dev TORCHSERVE=1` is asked what it would run (a dry run)
    Then it installs the `torchserve` extra, TorchServe's `ts` included, before `lambdaserve
    dev` starts (TORCH=1 installs torch alone)."""
    import subprocess
    import tomllib

    venv = tmp_path / "venv"
    plan = subprocess.run(
        ["make", "-n", "dev", flag, f"VENV={venv}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    installs = [line for line in plan.splitlines() if "pip install" in line]
    starts = plan.index(f"{venv}/bin/lambdaserve dev")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = extras["optional-dependencies"][extra]
    # from the extra's own lock, which pins what the extra asks for
    assert any(f"-r locks/dev-{extra}.txt" in line for line in installs), installs
    lock = (ROOT / f"locks/dev-{extra}.txt").read_text()
    for requirement in requirements:
        if "==" in requirement:
            name, version = requirement.split("==")
            assert re.search(rf"^{re.escape(name)}=={re.escape(version)}(\+\w+)? ", lock, re.M)
    if extra == "torchserve":
        assert any(r.startswith("torchserve==") for r in requirements)
    assert all(plan.index(line) < starts for line in installs)
