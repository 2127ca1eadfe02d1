"""Every shipped Python environment, built as its recipe builds it, then checked from inside it.

    python scripts/shipped_envs.py build [NAME ...]   # build (or reuse) each; prints seconds
    python scripts/shipped_envs.py check [NAME ...]   # build, then scripts/env_imports.py in it
    python scripts/shipped_envs.py list

No Docker: a Dockerfile's own ARG, COPY and RUN lines are read and run against a directory
(``/build`` -> a copy of its build context, ``${LAMBDA_TASK_ROOT}`` and ``/opt/venv`` -> the
environment's directory, ``pip``/``python3`` -> python3.12, the images' Python). `make dev`'s
venv is made by the Makefile's own rule, with VENV pointed elsewhere. So a recipe that changes
is what gets built; a recipe this reader cannot follow fails loudly (no silent copy of it).

Environments live under .cache/shipped-envs/<name>-<hash of their recipe and pyproject.toml>:
built once, reused until the recipe changes. The lambdaserve package and the function code are
copied in afresh on every use (pure Python, as pip would install it), so a reused environment
still runs the code under test.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _sibling(name: str) -> ModuleType:
    """scripts/NAME.py (scripts/ is no package): image_variant.py holds the variants' build
    arguments, one list for `make build` and for this; dockerfile_plan.py reads Dockerfiles."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)  # dataclasses look their module up while defined
    spec.loader.exec_module(module)
    return module


_VARIANTS = _sibling("image_variant")
TORCH_INDEX: str = _VARIANTS.TORCH_INDEX
VARIANTS: dict[str, dict[str, str]] = _VARIANTS.VARIANTS
_READER = _sibling("dockerfile_plan")
CACHE = Path(os.environ.get("SHIPPED_ENVS_DIR", ROOT / ".cache" / "shipped-envs"))
INFER, MANAGE, GPU = (
    "functions/infer/Dockerfile",
    "functions/manage/Dockerfile",
    "functions/infer/Dockerfile.gpu",
)
SERVE_CPU = "functions/infer/Dockerfile.cpu"
# Optional runtimes: absent from an environment is fine when the package says what installs
# them (the check looks for this hint in the package's source).
OPTIONAL = {
    "torch": "lambdaserve[torch]",
    "torchvision": "lambdaserve[torchserve]",
    "ts": "lambdaserve[torchserve]",
    "captum": "lambdaserve[torchserve]",
    "openvino": "lambdaserve[openvino]",
    "paddle": "lambdaserve[paddle]",
    "tensorflow": "lambdaserve[tensorflow]",
    # --trace-config mode=opentelemetry (serve, dev): the SDK is the local extra's
    "opentelemetry": "lambdaserve[server]",
    # dev's coloured log (processes/logs.py): plain text without it
    "rich": "lambdaserve[local]",
    # /docs from local assets: the images answer /openapi.json only (apps/docs_page.py)
    "swagger_ui_bundle": "swagger-ui-bundle",
    # SnapStart's hooks: Lambda's runtime provides the module where SnapStart is on
    "snapshot_restore_py": "snapshot_restore_py is missing",
}


_REQUIREMENTS = ROOT / "layers/core/requirements.txt"
# The Makefile's rules that make dev's venv runs: variables they use, then each rule's lines
_MAKE_RULE = re.compile(
    r"^(?:(?:PYTHON|VENV|BIN|LOCKED|EDITABLE) .*|\$\((?:BIN)\)/python:.*(?:\n\t.*)*"
    r"|\$\(VENV\)/\.(?:dev|torch)-installed:.*(?:\n\t.*)*)$",
    re.M,
)


@dataclass(frozen=True)
class Env:
    name: str
    recipe: str  # the file that builds it
    build_args: tuple[tuple[str, str], ...] = ()
    entries: tuple[str, ...] = ()
    layer: bool = False  # the batcher: function code + the layer + the runtime's boto3

    @property
    def key(self) -> str:
        """What the build depends on: the recipe (for the Makefile, only its venv rules: the
        other targets change often and build nothing here), the package's requirements."""
        digest = hashlib.sha256(self.name.encode())
        recipe = (ROOT / self.recipe).read_text()
        if self.recipe == "Makefile":
            recipe = "\n".join(_MAKE_RULE.findall(recipe))
        elif self.layer:  # the layer is its Makefile and its requirements.txt, hashed below
            recipe = (ROOT / "layers/core/Makefile").read_text()
        for text in (recipe, (ROOT / "pyproject.toml").read_text(), _REQUIREMENTS.read_text()):
            digest.update(text.encode())
        for lock in sorted((ROOT / "locks").glob("*")):  # what every recipe installs from
            digest.update(lock.read_bytes())
        digest.update(repr(self.build_args).encode())
        return digest.hexdigest()[:12]

    @property
    def home(self) -> Path:
        return CACHE / f"{self.name}-{self.key}"


def _variant(name: str, dockerfile: str) -> tuple[tuple[str, str], ...]:
    extras = VARIANTS[name].get(dockerfile)
    if not extras:
        return ()
    if name not in _VARIANTS.TORCH_VARIANTS:
        lock = _VARIANTS.LOCKS.get(name, {}).get(dockerfile)
        return (("EXTRAS", extras), *((("LOCK", lock),) if lock else ()))
    return (("EXTRAS", extras), ("TORCH_INDEX", TORCH_INDEX))


_INFER_ENTRIES = ("functions/infer/app.py",)
ENVS = {
    env.name: env
    for env in [
        Env("infer", INFER, entries=_INFER_ENTRIES),
        Env("infer-torch", INFER, _variant("torch", INFER), _INFER_ENTRIES),
        Env("infer-torchserve", INFER, _variant("torchserve", INFER), _INFER_ENTRIES),
        Env("infer-paddle", INFER, _variant("paddle", INFER), _INFER_ENTRIES),
        Env("infer-tensorflow", INFER, _variant("tensorflow", INFER), _INFER_ENTRIES),
        Env("infer-mixed", INFER, _variant("mixed", INFER), _INFER_ENTRIES),
        Env("manage", MANAGE, entries=("functions/manage/app.py",)),
        Env("manage-torch", MANAGE, _variant("torch", MANAGE), ("functions/manage/app.py",)),
        Env("gpu", GPU, entries=("module:lambdaserve.cli",)),
        # server mode on CPU (ServerModeKind=cpu): the default image, and the torchserve
        # variant the mixed-team profile deploys
        Env("serve-cpu", SERVE_CPU, entries=("module:lambdaserve.cli",)),
        Env(
            "serve-cpu-torchserve",
            SERVE_CPU,
            (("EXTRAS", "server,images,openvino,torchserve"), ("TORCH_INDEX", TORCH_INDEX)),
            ("module:lambdaserve.cli",),
        ),
        Env(
            "serve-cpu-mixed",
            SERVE_CPU,
            (
                ("EXTRAS", "server,images,openvino,torchserve,tensorflow"),
                ("TORCH_INDEX", TORCH_INDEX),
            ),
            ("module:lambdaserve.cli",),
        ),
        Env("batcher", "template.yaml", entries=("functions/batcher/app.py",), layer=True),
        Env("dev", "Makefile", entries=("module:lambdaserve.cli",)),
        Env("dev-torch", "Makefile", (("TORCH", "1"),), ("module:lambdaserve.cli",)),
    ]
}
# What CI builds (make shipped-envs): the Lambda images' default environments, the layer and
# make dev's venvs. The torch variants and the GPU image are built on request
# (make shipped-envs ARGS="infer-torchserve gpu"): each pulls PyTorch and its CUDA libraries
# (~3 GB) where PyTorch's CPU index cannot be reached, minutes CI's budget does not have;
# infer-paddle and infer-tensorflow too (paddlepaddle's wheel is 195 MB, tensorflow-cpu's 250).
# serve-cpu is CI's too: the deployed journeys run every ECS task (`serve`, `worker`) from it.
DEFAULT = ("dev", "infer", "manage", "batcher", "dev-torch", "serve-cpu")
ON_REQUEST = (
    "infer-torch",
    "infer-torchserve",
    "infer-paddle",
    "infer-tensorflow",
    "infer-mixed",
    "manage-torch",
    "gpu",
    "serve-cpu-torchserve",
    "serve-cpu-mixed",
)


def python312() -> str:
    """The images' Python: pyenv's 3.12 where there is one (its shim may point elsewhere)."""
    pyenv = sorted(Path.home().glob(".pyenv/versions/3.12*/bin/python3.12"))
    found = str(pyenv[-1]) if pyenv else shutil.which("python3.12")
    if not found:
        raise SystemExit("shipped_envs: the images' Python, python3.12, is not on this machine")
    return found


def dockerfile_plan(env: Env, target: Path, python: str) -> list[Any]:
    """What env's Dockerfile does against ``target`` (scripts/dockerfile_plan.py)."""
    return list(_READER.plan(ROOT / env.recipe, dict(env.build_args), target, python))


def run_dockerfile(env: Env, target: Path) -> None:
    """The plan's steps, in order; the build context's copy is removed afterwards."""
    for step in dockerfile_plan(env, target, python312()):
        if step.kind == "run":
            _log(f"{env.name}: RUN {step.command}")
        _READER.run(step, ROOT)
    shutil.rmtree(target.parent / f"{target.name}.build", ignore_errors=True)


def resolve(env: Env) -> Path:
    """The recipe's pip installs resolved, not installed (``pip install --dry-run --report``):
    for an environment whose wheels CI cannot afford (the torch variants' ~1-3 GB), what
    the image's pip would install, or its refusal. PyTorch's CPU index, where this machine
    cannot reach it, is replaced by PyPI, which holds the same torch releases (its Linux
    wheels are the CUDA builds: same versions and dependencies but for the nvidia-* wheels).
    Returns the last pip's report."""
    target = CACHE / f"{env.name}-resolve"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    report = target / "report.json"
    if "SHIPPED_ENVS_TORCH_INDEX" not in os.environ and not _reachable(_PYTORCH_CPU):
        _log(f"{env.name}: {_PYTORCH_CPU} unreachable: torch resolved from PyPI instead")
        os.environ["SHIPPED_ENVS_TORCH_INDEX"] = "https://pypi.org/simple"
    dry_run = f"pip install --dry-run --ignore-installed --report {report}"
    for planned in dockerfile_plan(env, target, python312()):
        step = planned
        if step.kind == "run":
            if "pip install" not in step.command:
                continue  # the rest of the recipe needs what was installed
            step = replace(step, command=step.command.replace("pip install", dry_run, 1))
            _log(f"{env.name}: RUN {step.command}")
        _READER.run(step, ROOT)
    shutil.rmtree(target.parent / f"{target.name}.build", ignore_errors=True)
    return report


_PYTORCH_CPU = "https://download.pytorch.org/whl/cpu/"


def _reachable(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=10):
            return True
    except OSError:
        return False


def build_layer(target: Path) -> None:
    """`sam build` of CoreLayer (BuildMethod makefile, ContentUri layers/core): its Makefile's
    build-CoreLayer target into ``target`` (python/), then boto3 as the Lambda runtime has it."""
    python = python312()
    subprocess.run(
        ["make", "-C", str(ROOT / "layers/core"), "build-CoreLayer"],
        check=True,
        env={**os.environ, "ARTIFACTS_DIR": str(target), "PYTHON": python},
    )
    pip = [python, "-m", "pip", "install", "-q", "--target"]
    subprocess.run([*pip, str(target / "runtime"), "boto3"], check=True)


def build_dev(env: Env, target: Path) -> None:
    """The Makefile's own rules, VENV pointed at ``target`` (TORCH=1 adds install-torch's)."""
    stamps = [f"{target}/.dev-installed"]
    if dict(env.build_args).get("TORCH") == "1":
        stamps.append(f"{target}/.torch-installed")
    # one at a time: each editable install writes the package's egg-info in the source tree
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / ".make.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(["make", "-C", str(ROOT), f"VENV={target}", *stamps], check=True)


def build(env: Env) -> tuple[Path, float]:
    """The environment's directory, built unless this recipe's build is already there."""
    target = env.home
    started = time.monotonic()
    if not (target / ".built").exists():
        shutil.rmtree(target, ignore_errors=True)
        for stale in CACHE.glob(f"{env.name}-*"):  # this environment from an older recipe
            if re.fullmatch(rf"{re.escape(env.name)}-[0-9a-f]{{12}}", stale.name):
                shutil.rmtree(stale, ignore_errors=True)
        target.mkdir(parents=True)
        if env.recipe == "Makefile":
            build_dev(env, target)
        elif env.layer:
            build_layer(target)
        else:
            run_dockerfile(env, target)
        (target / ".built").write_text(json.dumps({"seconds": time.monotonic() - started}))
    fresh(env, target)
    return target, time.monotonic() - started


def fresh(env: Env, target: Path) -> None:
    """Today's package and function code over the built environment (dev is editable)."""
    if env.recipe == "Makefile":
        return
    site = target / "python" if env.layer else _site(target)
    shutil.rmtree(site / "lambdaserve", ignore_errors=True)
    package = ROOT / "layers/core/lambdaserve"
    # as the images and the layer ship it: without the emulator (lambdaserve/local)
    shutil.copytree(package, site / "lambdaserve", ignore=_not_shipped)
    for entry in env.entries:
        if entry.startswith("functions/"):
            shutil.copy2(ROOT / entry, target / "app.py" if not env.layer else target)


def _not_shipped(directory: str, names: list[str]) -> set[str]:
    ignored = {name for name in names if name == "__pycache__"}
    if Path(directory) == ROOT / "layers/core/lambdaserve" and "local" in names:
        ignored.add("local")
    return ignored


def _site(target: Path) -> Path:
    found = sorted(target.glob("venv/lib/python3*/site-packages"))
    return found[0] if found else target


def interpreter(env: Env, target: Path) -> list[str]:
    """The command that runs Python with this environment alone on sys.path."""
    if env.recipe == "Makefile":
        return [str(target / "bin/python"), "-I"]
    if (target / "venv").exists():
        return [str(target / "venv/bin/python"), "-I"]
    return [python312(), "-I", "-S"]  # Lambda: no site-packages, the task root on PYTHONPATH


def paths(env: Env, target: Path) -> list[str]:
    if env.layer:
        return [str(target), str(target / "python"), str(target / "runtime")]
    return [] if env.recipe == "Makefile" or (target / "venv").exists() else [str(target)]


def check(env: Env, target: Path) -> dict[str, object]:
    """scripts/env_imports.py in the environment: its JSON answer, and its exit status."""
    entries = [e if e.startswith("module:") else str(target / "app.py") for e in env.entries]
    spec = {"paths": paths(env, target), "entries": entries, "optional": OPTIONAL}
    done = subprocess.run(
        [*interpreter(env, target), str(ROOT / "scripts/env_imports.py"), json.dumps(spec)],
        check=False,
        capture_output=True,
        text=True,
        cwd=target,
        env={"PATH": os.environ["PATH"], "AWS_DEFAULT_REGION": "us-east-1", "HOME": str(target)},
    )
    lines = done.stdout.strip().splitlines()
    answer = json.loads(lines[-1]) if lines else {"missing": [done.stderr[-3000:]]}
    return {**answer, "returncode": done.returncode}


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_in_parallel(envs: list[Env]) -> int:
    """Each environment built by its own process (SHIPPED_ENVS_JOBS at a time, default 2: the
    builds wait on downloads as much as on the CPU), its output in .cache/shipped-envs/NAME.log.
    The number that failed; their logs' ends are printed."""
    CACHE.mkdir(parents=True, exist_ok=True)

    def one(env: Env) -> bool:
        with (CACHE / f"{env.name}.log").open("w") as log:
            done = subprocess.run(
                [sys.executable, __file__, "build", env.name],
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if done.returncode:
            _log(f"{env.name}: build failed:\n{(CACHE / f'{env.name}.log').read_text()[-4000:]}")
        return done.returncode == 0

    jobs = int(os.environ.get("SHIPPED_ENVS_JOBS", "2"))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return sum(not ok for ok in pool.map(one, envs))


def main() -> int:
    command, *names = sys.argv[1:] or ["list"]
    if command == "list":
        print("\n".join(f"{e.name}: {e.recipe} {dict(e.build_args)}" for e in ENVS.values()))
        return 0
    chosen = [ENVS[n] for n in (names or DEFAULT)]
    if command == "resolve":
        for env in chosen:
            installs = json.loads(resolve(env).read_text())["install"]
            pins = sorted(f"{i['metadata']['name']}=={i['metadata']['version']}" for i in installs)
            _log(f"{env.name}: resolves, {len(pins)} distributions: {' '.join(pins)}")
        return 0
    failed = build_in_parallel(chosen) if len(chosen) > 1 else 0
    for env in chosen:
        target, seconds = build(env)
        built = json.loads((target / ".built").read_text())["seconds"]
        _log(f"{env.name}: {target} ({seconds:.0f} s now; built in {built:.0f} s)")
        if command == "check":
            answer = check(env, target)
            for problem in answer.get("missing", []):
                _log(f"{env.name}: {problem}")
            failed += answer["returncode"] != 0
            _log(f"{env.name}: {'FAIL' if answer['returncode'] else 'ok'} {answer}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
