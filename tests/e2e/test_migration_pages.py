"""The migration pages are true: every shell block of docs/from-*.md runs against
`lambdaserve dev` (on free ports, rewritten in the commands), unless its info string says
`bash not-run: <what it needs>` (a deployed stack, the user's own model files); Python blocks
run too. No command may fail or answer an error."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import free_port, wait_until

pytestmark = pytest.mark.e2e

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(DOCS.glob("from-*.md"))
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
SHELLS = {"bash", "sh", "shell", "console", "zsh"}
NOT_RUN = re.compile(r"^bash not-run: \S.+$")


def blocks(page: Path) -> list[tuple[str, str]]:
    return [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(page.read_text())]


def test_there_is_a_page_for_each_peer_and_each_shell_block_runs_or_says_why() -> None:
    """Given the migration pages
    When their fenced blocks are read
    Then every shell block is a plain `bash` block (run below) or says why it is not run,
    and every page links only inside the repository (troubleshooting.md included)."""
    assert {p.name for p in PAGES} == {
        "from-torchserve.md",
        "from-triton.md",
        "from-tfserving.md",
        "from-paddle.md",
    }
    for page in [*PAGES, DOCS / "troubleshooting.md"]:
        text = page.read_text()
        for target in re.findall(r"\]\(([^)]+)\)", text):
            assert not re.match(r"\w+://", target), (page.name, target)
            assert (page.parent / target.split("#")[0]).exists(), (page.name, target)
        for info, _ in blocks(page):
            if info.split(" ", 1)[0] in SHELLS and info != "bash":
                assert NOT_RUN.match(info), (page.name, info)
        assert any(info == "bash" for info, _ in blocks(page)) or page.name.startswith("trouble")


@pytest.fixture
def ports() -> dict[str, int]:
    return {name: free_port() for name in ("8080", "8081", "8082", "8001", "4566")}


@pytest.fixture
def dev(ports: dict[str, int], tmp_path: Path) -> Iterator[dict[str, str]]:
    """`lambdaserve dev` with its demo model READY; the environment a user's shell has."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "LAMBDASERVE_WORK_DIR": str(tmp_path / "work"),
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{ports['4566']}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    log = tmp_path / "dev.log"
    command = [
        sys.executable, "-m", "lambdaserve.cli", "dev",
        "--inference-port", str(ports["8080"]), "--management-port", str(ports["8081"]),
        "--metrics-port", str(ports["8082"]), "--grpc-port", str(ports["8001"]),
        "--aws-port", str(ports["4566"]),
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        env=env,
        cwd=tmp_path,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_until(
            lambda: "Ctrl-C stops everything" in log.read_text() or process.poll() is not None,
            180,
        )
        assert process.poll() is None, log.read_text()

        def demo_ready() -> bool:
            index = httpx.post(
                f"http://127.0.0.1:{ports['8081']}/v2/repository/index", json={"ready": True}
            )
            return "demo-mlp" in {entry["name"] for entry in index.json()}

        wait_until(demo_ready, 120)
        yield env
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def _rewrite(text: str, ports: dict[str, int]) -> str:
    for default, port in ports.items():
        text = re.sub(rf"(?<=[:=]){default}\b", str(port), text)
    return text


def test_every_migration_page_command_runs(dev, ports, tmp_path) -> None:
    """Given `lambdaserve dev` serving its demo model
    When each page's bash and python blocks run, in order, as a user pastes them
    Then each exits 0 and none answers an error."""
    ran = 0
    for page in PAGES:
        for info, body in blocks(page):
            script = _rewrite(body, ports)
            if info == "python":
                command = [sys.executable, "-c", script]
            elif info == "bash":
                command = ["bash", "-euo", "pipefail", "-c", script]
            else:
                continue
            result = subprocess.run(
                command,
                check=False,
                cwd=tmp_path,
                env=dev,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert result.returncode == 0, (
                f"{page.name}\n{script}\n{result.stdout}\n{result.stderr}"
            )
            assert '"error"' not in result.stdout, (page.name, result.stdout)
            ran += 1
    assert ran >= 5
