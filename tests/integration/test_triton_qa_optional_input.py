"""Triton's qa/L0_optional_input, its own test file unchanged (tests/fixtures/triton_qa), on its
own model configs, against `lambdaserve serve` as Triton's test.sh runs it: one fresh server
per test (the tests count the executions the server's statistics report). The suite dials
localhost:8001, so the server's gRPC port is 127.0.0.1:8001.

Its ``identity_2_float32`` runs on Triton's C++ identity backend; here its config with
``backend: "python"`` (as test.sh's generate_python_models seds a platform) beside a Python
stand-in (tests/fixtures/triton_qa_stand_ins/identity). ``optional_identity`` is the qa's own
Python model.

Passing: test.sh's test_all_inputs and test_optional_same_input, and the file's
test_ensemble_optional_pipeline and test_ensemble_optional_connecting_tensor (inputs left out
of a request and of an ensemble step). Not run, each with its reason: NOT_RUN."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from tests.support import free_port, wait_until

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
QA = FIXTURES / "triton_qa"
SUITE = QA / "L0_optional_input"
STAND_IN = FIXTURES / "triton_qa_stand_ins" / "identity" / "model.py"
# one server each: they check the statistics of a fresh server
FRESH = ("test_all_inputs", "test_optional_same_input")
# these check answers only: one server for both
SHARED = ("test_ensemble_optional_pipeline", "test_ensemble_optional_connecting_tensor")
_CUT = (
    "the suite expects the dynamic batcher to send the batch it holds as soon as a request "
    "with other inputs arrives (Triton's batcher cuts a batch at the first request whose "
    "inputs differ); lambdaserve's waits the queue delay, then runs each group of like "
    "requests as a batch (batching/plan.py)"
)
_STEPS = (
    "the suite expects the ensemble's steps to queue in the composing model's dynamic "
    "batcher; here ensemble steps run in the ensemble's own thread, never through a batcher "
    "(pipelines/bls.py), so they answer before the queue delay"
)
# Not run, by design, with the reason
NOT_RUN = {
    "test_optional_mix_inputs": _CUT,
    "test_optional_mix_inputs_2": _CUT,
    "test_ensemble_all_inputs": _STEPS,
    "test_ensemble_optional_same_input": _STEPS,
    "test_ensemble_optional_mix_inputs": f"{_STEPS}; and {_CUT}",
    "test_ensemble_optional_mix_inputs_2": f"{_STEPS}; and {_CUT}",
}


def _ready() -> bool:
    try:
        return bool(grpcclient.InferenceServerClient("localhost:8001").is_server_ready())
    except Exception:
        return False


def _run(names: tuple[str, ...], workdir: Path, log: Path) -> dict[str, str]:
    """The qa tests ``names`` against one fresh `serve`; the failures' output by name."""
    with log.open("w") as output:
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "lambdaserve.cli", "serve", "--host", "127.0.0.1"),
                *("--port", str(free_port()), "--grpc-port", "8001"),
            ],
            env=dict(os.environ),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_until(lambda: server.poll() is not None or _ready(), 120)
            assert server.poll() is None, log.read_text()
            failed = {}
            for name in names:
                done = subprocess.run(
                    [sys.executable, "optional_input_test.py", f"OptionalInputTest.{name}"],
                    cwd=workdir / "L0_optional_input",
                    env={**os.environ, "PYTHONPATH": str(workdir / "common")},
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
                if done.returncode != 0:
                    failed[name] = (done.stdout + done.stderr)[-3000:]
            return failed
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)


@pytest.fixture
def qa_models(stack, tmp_path):
    """The suite's models, published by upload: its configs, identity_2_float32's made a
    Python model's beside the stand-in."""
    models = SUITE / "models"
    for config in models.glob("*/config.pbtxt"):
        name = config.parent.name
        text = config.read_text()
        if name == "identity_2_float32":
            text = re.sub(r'backend: "identity"', 'backend: "python"', text)
            stack.put(f"models/{name}/1/model.py", STAND_IN.read_bytes())
        stack.put(f"models/{name}/config.pbtxt", text.encode())
    for code in models.glob("*/1/model.py"):
        stack.put(f"models/{code.parent.parent.name}/1/model.py", code.read_bytes())
    names = sorted(c.parent.name for c in models.glob("*/config.pbtxt"))
    for name in names:
        stack.wait_state(name, 1, "READY", timeout_s=60)
    # the suite writes its results beside itself: a copy of it and of qa/common
    for part in ("L0_optional_input", "common"):
        shutil.copytree(QA / part, tmp_path / part)
    return tmp_path


def test_tritons_optional_input_tests_pass(qa_models, tmp_path):
    # Given the port the suite dials is free
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", 8001)) != 0, "127.0.0.1:8001 is in use"
    # When each statistics test runs against its own fresh server, and the answer-only
    # tests against one more
    failed = {}
    for name in FRESH:
        failed |= _run((name,), qa_models, tmp_path / f"{name}.log")
    failed |= _run(SHARED, qa_models, tmp_path / "shared.log")
    # Then every one passes, inputs left out and all
    assert not failed, failed
    # (the file's ten tests: four run, six not, each with its reason)
    assert len(FRESH + SHARED) + len(NOT_RUN) == 10
