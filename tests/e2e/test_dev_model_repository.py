"""`make dev ARGS="--model-repository DIR"` as a user runs it, from the venv `make dev` builds:
an ONNX model answers; a TorchScript one says it needs PyTorch and how to get it, and answers
from the venv `make dev TORCH=1` builds."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests import builders
from tests.shipped import user_environment
from tests.support import free_port, wait_until

pytestmark = pytest.mark.e2e
ROWS = [[0.1, 0.2, 0.3, 0.4]]
BODY = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": ROWS}]}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Triton-layout folder: an ONNX MLP, and a TorchScript MLP with its config."""
    root = tmp_path_factory.mktemp("models")
    (root / "mlp" / "1").mkdir(parents=True)
    (root / "mlp" / "1" / "model.onnx").write_bytes(builders.onnx_mlp())
    (root / "ts" / "1").mkdir(parents=True)
    (root / "ts" / "config.pbtxt").write_bytes(builders.TORCHSCRIPT_CONFIG)
    (root / "ts" / "1" / "model.pt").write_bytes(builders.torchscript_mlp())
    return root


@contextmanager
def dev(command: list[str], repository: Path, work: Path) -> Iterator[dict[str, int]]:
    ports = {name: free_port() for name in ("aws", "management", "inference", "metrics")}
    log_path = work / "dev.log"
    with log_path.open("w+") as log:
        process = subprocess.Popen(
            [
                *command,
                "dev",
                "--no-demo",
                "--model-repository",
                str(repository),
                *(f"--{name}-port={port}" for name, port in ports.items()),
                "--grpc-port=0",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**user_environment(), "LAMBDASERVE_WORK_DIR": str(work / "work")},
        )
        try:
            wait_until(lambda: "Ctrl-C stops everything" in log_path.read_text(), 180)
            yield ports
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()


def state(ports: dict[str, int], model: str) -> dict[str, str] | None:
    answer = httpx.get(f"http://127.0.0.1:{ports['management']}/models/{model}", timeout=30)
    entries = answer.json() if answer.status_code == 200 else []
    settled = [e for e in entries if e["state"] in ("READY", "UNAVAILABLE")]
    return settled[0] if settled else None


def infer(ports: dict[str, int], model: str) -> httpx.Response:
    url = f"http://127.0.0.1:{ports['inference']}/v2/models/{model}/infer"
    return httpx.post(url, json=BODY, timeout=120)


def test_make_devs_venv_serves_the_folder_and_names_the_install_torchscript_needs(
    dev_command: list[str], repository: Path, tmp_path: Path
):
    # Given `make dev ARGS="--model-repository DIR"` (no TORCH=1)
    with dev(dev_command, repository, tmp_path) as ports:
        # When both versions have settled
        mlp = wait_until(lambda: state(ports, "mlp"), 120)
        torchscript = wait_until(lambda: state(ports, "ts"), 120)
        # Then the ONNX model answers, and the TorchScript one says which install it needs
        assert mlp["state"] == "READY", mlp
        answer = infer(ports, "mlp")
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"][0]["shape"] == [1, 3]
        assert torchscript["state"] == "UNAVAILABLE", torchscript
        assert "lambdaserve[torch]" in torchscript["reason"]


def test_make_dev_torch_serves_the_torchscript_version(
    dev_torch_command: list[str], repository: Path, tmp_path: Path
):
    # Given `make dev TORCH=1 ARGS="--model-repository DIR"`
    with dev(dev_torch_command, repository, tmp_path) as ports:
        # When the TorchScript version settles
        torchscript = wait_until(lambda: state(ports, "ts"), 180)
        # Then it is READY and answers what the scripted module computes
        assert torchscript["state"] == "READY", torchscript
        answer = infer(ports, "ts")
        assert answer.status_code == 200, answer.text
        assert np.array(answer.json()["outputs"][0]["data"]).shape == (3,)
