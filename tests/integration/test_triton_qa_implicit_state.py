"""Triton's qa/L0_implicit_state output tests, as its test.sh sets them up: the implicit-state
models of ``gen_qa_implicit_models.py --onnx`` (stored unchanged under tests/fixtures), the
``onnx_nobatch_sequence_int32`` model, and its ``_output`` copy whose config test.sh extends
with an ``output`` entry for ``OUTPUT_STATE``. Against ``lambdaserve serve``, tritonclient:

- asks the model for ``OUTPUT_STATE`` where its config does not list it as an output, and
  gets Triton's "unexpected inference output 'OUTPUT_STATE' for model" (400);
- asks the ``_output`` copy for it, and gets the state beside ``OUTPUT``.

(The other tests of implicit_state.py run Triton's C++ ``implicit_state`` test backend.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import wait_until

QA = Path(__file__).resolve().parents[1] / "fixtures" / "triton_qa"
HOST = "127.0.0.40"
MODEL = "onnx_nobatch_sequence_int32"


def _ready() -> bool:
    try:
        return bool(httpclient.InferenceServerClient(f"{HOST}:8000").is_server_ready())
    except Exception:
        return False


@contextmanager
def serving(log: Path) -> Iterator[None]:
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
            yield
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)


@pytest.fixture
def implicit_models(stack, tmp_path):
    """test.sh's two models, published by upload."""
    models = tmp_path / "models"
    subprocess.run(
        [sys.executable, "gen_qa_implicit_models.py", "--models_dir", str(models), "--onnx"],
        cwd=QA / "common",
        check=True,
        capture_output=True,
        timeout=300,
    )
    config = (models / MODEL / "config.pbtxt").read_text()
    # test.sh: sed the name, then echo an output entry for the state onto the config
    extended = config.replace(f'name: "{MODEL}"', f'name: "{MODEL}_output"') + (
        'output [{ name: "OUTPUT_STATE" \n data_type: TYPE_INT32 \n dims: [ 1 ] }]\n'
    )
    model = (models / MODEL / "1" / "model.onnx").read_bytes()
    for name, text in ((MODEL, config), (f"{MODEL}_output", extended)):
        stack.put(f"models/{name}/config.pbtxt", text.encode())
        stack.put(f"models/{name}/1/model.onnx", model)
    for name in (MODEL, f"{MODEL}_output"):
        stack.wait_state(name, 1, "READY")


def _infer(client, model: str, outputs: list[str]):
    tensor = httpclient.InferInput("INPUT", [1], "INT32")
    tensor.set_data_from_numpy(np.asarray([1], dtype=np.int32))
    return client.infer(
        model_name=model,
        inputs=[tensor],
        outputs=[httpclient.InferRequestedOutput(name) for name in outputs],
        sequence_id=1,
        sequence_start=True,
        sequence_end=True,
    )


def test_the_state_is_an_output_only_where_the_config_lists_it(implicit_models, tmp_path):
    # Given serve with the model and its _output copy
    with serving(tmp_path / "serve.log"):
        client = httpclient.InferenceServerClient(f"{HOST}:8000")
        # When tritonclient asks the model for its state output, not listed under output
        with pytest.raises(InferenceServerException) as refused:
            _infer(client, MODEL, ["OUTPUT_STATE"])
        # and asks the _output copy for it, beside OUTPUT
        answered = _infer(client, f"{MODEL}_output", ["OUTPUT_STATE", "OUTPUT"])
    # Then the first is refused with Triton's words, the second answers both (1 + state 0)
    assert "unexpected inference output 'OUTPUT_STATE' for model" in str(refused.value)
    assert answered.as_numpy("OUTPUT")[0] == 1
    assert answered.as_numpy("OUTPUT_STATE") is not None
