"""A Dockerfile's Python environment without Docker: its ARG, ENV PATH, COPY and RUN lines
read and run against a directory, for scripts/shipped_envs.py.

``/build`` becomes a copy of the build context beside the target, ``${LAMBDA_TASK_ROOT}`` and
``/opt/venv`` the target, ``pip`` and ``python3`` the images' Python (until the recipe's own
``python3 -m venv`` puts its venv first on PATH). FROM, CMD, EXPOSE, WORKDIR, ENTRYPOINT and
other ENV lines say nothing about the Python environment; any other instruction stops the build,
so a recipe this cannot follow is never half-followed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# PyTorch's own index (the variants' --extra-index-url, the GPU image's cu128 --index-url) is
# used as written. Where a machine cannot reach it, SHIPPED_ENVS_TORCH_INDEX names one holding
# the same torch releases (https://pypi.org/simple: its Linux wheels are the CUDA builds).
_PYTORCH_INDEX = re.compile(r"https://download\.pytorch\.org/whl/\w+")


def dockerfile_steps(text: str) -> list[tuple[str, str]]:
    """(instruction, arguments) per line of a Dockerfile, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", re.sub(r"^\s*#.*\n", "", text, flags=re.M))
    steps = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            steps.append((word.upper(), rest.strip()))
    return steps


@dataclass(frozen=True)
class Step:
    """One thing a Dockerfile line does here: copy ``source`` to ``dest``, or run ``command``."""

    kind: str  # "copy" | "run"
    source: str = ""
    dest: str = ""
    into: bool = False  # COPY of several sources, or to a dest ending in "/"
    command: str = ""
    environment: tuple[tuple[str, str], ...] = ()


def plan(recipe: Path, build_args: dict[str, str], target: Path, python: str) -> list[Step]:
    """The Dockerfile's ARG/ENV/COPY/RUN as steps against ``target``; FROM/CMD/EXPOSE say
    nothing about the Python environment, any other instruction stops the build."""
    context = target.parent / f"{target.name}.build"
    values = {"LAMBDA_TASK_ROOT": str(target)}
    path, venv_made, steps = os.environ["PATH"], False, []
    for instruction, args in dockerfile_steps(recipe.read_text()):
        rest = args.replace("/build", str(context)).replace("/opt/venv", str(target / "venv"))
        if instruction == "ARG":
            name, _, default = rest.partition("=")
            values[name] = build_args.get(name, default.strip('"'))
        elif instruction == "ENV" and rest.startswith("PATH="):
            path = rest.removeprefix("PATH=").replace("$PATH", path)
        elif instruction == "COPY":
            *sources, dest = (_expand(word, values) for word in rest.split())
            for source in sources:  # the function code is copied on each use: see fresh()
                if not source.startswith("functions/"):
                    into = len(sources) > 1 or dest.endswith("/")
                    steps.append(Step("copy", source=source, dest=dest, into=into))
        elif instruction == "RUN":
            segments = [s.strip() for s in rest.split("&&")]
            if segments[0].startswith("apt-get"):
                continue  # the OS packages: python3.12 itself is what it brings here
            # once `python3 -m venv` made it, pip and python3 are the venv's (ENV PATH)
            shim = f'pip() {{ "{python}" -m pip "$@"; }}; python3() {{ "{python}" "$@"; }}; '
            command = ("" if venv_made else shim) + " && ".join(segments)
            venv_made = venv_made or "-m venv" in command
            # pip's cache off keeps the image small; here it only makes every rebuild download
            # again (what gets installed is the same)
            command = command.replace("--no-cache-dir ", "")
            instead = os.environ.get("SHIPPED_ENVS_TORCH_INDEX")
            if instead:
                command = _PYTORCH_INDEX.sub(instead, command)
                values = {k: _PYTORCH_INDEX.sub(instead, v) for k, v in values.items()}
            environment = tuple(sorted({**values, "PATH": path}.items()))
            steps.append(Step("run", command=command, environment=environment))
        elif instruction not in ("FROM", "ENV", "CMD", "EXPOSE", "WORKDIR", "ENTRYPOINT"):
            raise SystemExit(f"shipped_envs: {recipe.name}: no reading of {instruction} yet")
    return steps


def run(step: Step, root: Path) -> None:
    """One step: a COPY from the repository ``root``, or a RUN through bash."""
    if step.kind == "copy":
        _copy(root / step.source, step.dest, into=step.into)
        return
    subprocess.run(
        ["bash", "-ec", step.command],
        check=True,
        env={**os.environ, **dict(step.environment), "PIP_QUIET": "1"},
    )


def _expand(word: str, values: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m[1], m[0]), word)


def _copy(source: Path, dest: str, into: bool) -> None:
    """COPY's rules: a directory's contents to dest; a file into dest/ or onto dest."""
    if source.is_dir():
        shutil.copytree(source, dest, dirs_exist_ok=True)
        return
    path = Path(dest) / source.name if into else Path(dest)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, path)
