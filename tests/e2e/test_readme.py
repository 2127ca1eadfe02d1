"""The README is true: its ```bash and ```python blocks run, in order, as a user runs them.

`make dev ...` lines start the system (on free ports instead of 8080/8081/4566, which are
rewritten everywhere); every other command must exit 0 and no answer may be an error.
Blocks fenced ```sh are the ones no test here can run, and they are only these:
`make dev`/`make test` as the two commands (this suite is `make test`; `make dev` is what
the bash blocks start), and the deploy commands (they need an AWS account; `make build`,
a Docker engine).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import free_port, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.torch]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
NOT_RUN_HERE = {
    "make dev",
    "make test",
    "make validate",
    "make build",
    "sam deploy",
    "sam logs",
    "aws s3 cp model.onnx s3://<ModelBucketName>",
    "awscurl",
}


def blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(README.read_text())]


def test_the_readme_is_a_front_door():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    # Links stay inside the repository, and each one resolves.
    for target in re.findall(r"\]\(([^)]+)\)", text):
        assert not re.match(r"\w+://", target), target
        assert (ROOT / target.split("#")[0]).exists(), target
    assert not re.search(r"https?://(?!127\.0\.0\.1|localhost)", text)
    # Only the commands listed above are left to a person with an AWS account (or to CI).
    for language, body in blocks():
        if language != "sh":
            continue
        for line in _commands(body):
            assert any(line.startswith(allowed) for allowed in NOT_RUN_HERE), line


@pytest.fixture
def ports() -> dict[str, int]:
    return {
        "8080": free_port(),
        "8081": free_port(),
        "8082": free_port(),
        "8001": free_port(),
        "4566": free_port(),
    }


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """The repository as a user has it: the README's commands run in its root (models/ is
    ignored by git and removed afterwards)."""
    models = ROOT / "models"
    assert not models.exists(), "a models/ folder is already in the repository root"
    yield ROOT
    shutil.rmtree(models, ignore_errors=True)


def _commands(body: str) -> list[str]:
    """Logical command lines: continuations joined, comments and blank lines dropped."""
    joined = body.replace("\\\n", " ")
    lines = []
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            lines.append(stripped)
    return lines


def _rewrite(text: str, ports: dict[str, int]) -> str:
    for default, port in ports.items():
        text = re.sub(rf"(?<=[:=]){default}\b", str(port), text)
        text = re.sub(rf"(?<=:){default}(?=/)", str(port), text)
    return text


def test_every_readme_command_runs(ports, workdir, tmp_path):
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "LAMBDASERVE_WORK_DIR": str(tmp_path / "work"),
    }
    dev: subprocess.Popen[str] | None = None
    log = tmp_path / "dev.log"
    ran = 0
    try:
        for language, body in blocks():
            if language == "python":
                result = subprocess.run(
                    [sys.executable, "-c", _rewrite(body, ports)],
                    check=False,
                    cwd=workdir,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                assert result.returncode == 0, result.stderr
                ran += 1
                continue
            if language != "bash":
                continue
            if body.lstrip().startswith("make dev"):
                dev = _start_dev(body.strip(), ports, workdir, env, log)
                ran += 1
                continue
            script = _rewrite(body, ports)
            # Published models validate in the background: wait as a user would, then run.
            if "localhost" in script or "127.0.0.1" in script:
                _wait_ready(ports, ("mymlp", "mymlp_ts"))
            result = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script],
                check=False,
                cwd=workdir,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert result.returncode == 0, f"{script}\n{result.stdout}\n{result.stderr}"
            assert '"error"' not in result.stdout, result.stdout
            ran += 1
        assert dev is not None and ran >= 5
        # The uploads the README shows did land: by the folder and by the aws CLI.
        _wait_ready(ports, ("uploaded",))
    finally:
        if dev is not None:
            os.killpg(dev.pid, signal.SIGINT)
            try:
                dev.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(dev.pid, signal.SIGKILL)


def _start_dev(
    command: str, ports: dict[str, int], workdir: Path, env: dict[str, str], log: Path
) -> subprocess.Popen[str]:
    flags = (
        f"--inference-port {ports['8080']} --management-port {ports['8081']} "
        f"--metrics-port {ports['8082']} --grpc-port {ports['8001']} --aws-port {ports['4566']}"
    )
    words = shlex.split(command)
    args = [w for w in words if w.startswith("ARGS=")]
    words = [w for w in words if not w.startswith("ARGS=")]
    given = args[0].removeprefix("ARGS=") if args else ""
    words.append(f"ARGS={given} {flags}")
    process = subprocess.Popen(
        words,
        cwd=workdir,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    wait_until(
        lambda: "Ctrl-C stops everything" in log.read_text() or process.poll() is not None, 120
    )
    assert process.poll() is None, log.read_text()
    assert f"AWS_ENDPOINT_URL=http://127.0.0.1:{ports['4566']}" in log.read_text()
    return process


def _wait_ready(ports: dict[str, int], models: tuple[str, ...]) -> None:
    def ready() -> bool:
        response = httpx.post(
            f"http://127.0.0.1:{ports['8081']}/v2/repository/index", json={"ready": True}
        )
        names = {entry["name"] for entry in response.json()}
        return all(model in names for model in models)

    wait_until(ready, 60)
