"""Triton's qa/L0_sequence_batcher, its own test file unchanged (tests/fixtures/triton_qa),
on the ONNX models its own generator makes (``gen_qa_sequence_models.py --onnx``), as
Triton's test.sh runs it: one fresh server per test (the tests count the executions the
server's statistics report), here `lambdaserve serve` on 127.0.0.x ports 8000 and 8001 (the
ports the suite dials; an address of its own so nothing else on this host is in the way).

The no-delay tests run, on the plain models, again with implicit state, and on the Python
``sequence_int32`` model (test.sh's Python run); the delay,
backlog and queue-delay tests need Triton's scheduler hooks (TRITONSERVER_DELAY_SCHEDULER)
and its slot/backlog model, which lambdaserve does not have (every sequence gets a slot; its
state is kept outside the instance)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from tests.support import wait_until

QA = Path(__file__).resolve().parents[1] / "fixtures" / "triton_qa"
NO_DELAY = (
    "test_simple_sequence",
    "test_length1_sequence",
    "test_batch_size",
    "test_no_correlation_id",
    "test_no_sequence_start",
    "test_no_sequence_start2",
    "test_no_sequence_end",
)
# the Python run (a worker process per server start) takes the tests of a sequence's own
# answers, the rest being the ONNX runs' (the CI budget: under a minute for this file)
PYTHON_TESTS = ("test_simple_sequence", "test_length1_sequence", "test_no_sequence_start")
HOST = "127.0.0.39"
# test.sh's settings for the fixed-shape, batching, one-instance runs
SUITE_ENV = {
    "BACKENDS": "onnx",
    "ENSEMBLES": "0",
    "NO_BATCHING": "0",
    "MODEL_INSTANCES": "1",
    "INITIAL_STATE_FILE": "0",
    "BATCHER_TYPE": "FIXED",
    "TRITONSERVER_IPADDR": HOST,
}
# the suite run on its plain sequence models, and again with implicit state (test.sh's
# IMPLICIT_STATE=1 on gen_qa_implicit_models.py's models, which keep the sum in a state)
GENERATORS = {
    "0": "gen_qa_sequence_models.py",
    "1": "gen_qa_implicit_models.py",
    "python": "gen_qa_sequence_models.py",
}
# the datatypes test.sh publishes for ONNX: int32 and bool controls, and the string model
# with implicit state (the implicit generator's float32 model is not one ONNX Runtime loads)
DATATYPES = {
    "0": ("int32", "bool", "float32", "object"),
    "1": ("int32", "bool", "object"),
    "python": ("int32", "bool"),
}
# test.sh's Python run: the ONNX models' configs made Python's (its sed), each with
# qa/python_models/sequence_int32/model.py
PYTHON_MODEL = QA / "python_models" / "sequence_int32" / "model.py"


def _ready() -> bool:
    try:
        return bool(grpcclient.InferenceServerClient(f"{HOST}:8001").is_server_ready())
    except Exception:
        return False


def _run_one(name: str, implicit: str, log: Path) -> subprocess.CompletedProcess[str]:
    """One qa test against a fresh `serve`, as test.sh gives each test its own server."""
    with log.open("w") as output:
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "lambdaserve.cli", "serve", "--host", HOST),
                *("--port", "8000", "--grpc-port", "8001"),
            ],
            env=dict(os.environ),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_until(lambda: server.poll() is not None or _ready(), 120)
            assert server.poll() is None, log.read_text()
            return subprocess.run(
                [sys.executable, "sequence_batcher_test.py", f"SequenceBatcherTest.{name}"],
                cwd=QA / "L0_sequence_batcher",
                env={
                    **os.environ,
                    **SUITE_ENV,
                    "BACKENDS": "python" if implicit == "python" else "onnx",
                    "IMPLICIT_STATE": "1" if implicit == "1" else "0",
                    "PYTHONPATH": str(QA / "common"),
                },
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)


@pytest.fixture(params=sorted(GENERATORS))
def qa_models(request, stack, tmp_path):
    """Triton's generator's ONNX sequence models (four datatypes), published by upload;
    with IMPLICIT_STATE, its implicit-state models."""
    models = tmp_path / "models"
    subprocess.run(
        [sys.executable, GENERATORS[request.param], "--models_dir", str(models), "--onnx"],
        cwd=QA / "common",
        check=True,
        capture_output=True,
        timeout=300,
    )
    names = [f"onnx_sequence_{dtype}" for dtype in DATATYPES[request.param]]
    if request.param == "python":
        names = [_as_python(stack, models / name) for name in names]
    else:
        for model in names:
            for path in (models / model).rglob("*"):
                if path.is_file():
                    key = f"models/{model}/{path.relative_to(models / model)}"
                    stack.put(key, path.read_bytes())
    for model in names:
        stack.wait_state(model, 1, "READY")
    return request.param, names


def _as_python(stack, onnx_model: Path) -> str:
    """test.sh's generate_python_models: the config's platform line made ``backend:
    "python"`` and "onnx" made "python", beside the qa's sequence_int32 model.py."""
    name = onnx_model.name.replace("onnx", "python")
    config = (onnx_model / "config.pbtxt").read_text()
    config = re.sub(r"platform:.*", 'backend: "python"', config).replace("onnx", "python")
    stack.put(f"models/{name}/config.pbtxt", config.encode())
    stack.put(f"models/{name}/1/model.py", PYTHON_MODEL.read_bytes())
    return name


def test_tritons_sequence_batcher_no_delay_tests_pass(qa_models, tmp_path):
    # Given Triton's ONNX sequence models (int32, float32, bool controls, string input),
    # plain, or with implicit state (int32, bool, string)
    implicit, names = qa_models
    assert names
    # When each no-delay test of qa/L0_sequence_batcher runs against its own fresh server
    failed = {}
    for name in PYTHON_TESTS if implicit == "python" else NO_DELAY:
        done = _run_one(name, implicit, tmp_path / f"{name}.log")
        if done.returncode != 0:
            failed[name] = (done.stdout + done.stderr)[-3000:]
    # Then every one passes, over HTTP and gRPC, its statistics checks included
    assert not failed, failed
