"""Which environment loads a version with model code before it is READY: the one that
serves it. KIND_GPU versions under server mode serve on the task, not in the infer
function, so the infer function's CPU does not judge them."""

from __future__ import annotations

import pytest

from lambdaserve.catalog import version_policy
from lambdaserve.settings import get_settings

GPU_CONFIG = b"""
backend: "python"
max_batch_size: 0
input [{ name: "X", data_type: TYPE_FP32, dims: [1] }]
output [{ name: "Y", data_type: TYPE_FP32, dims: [1] }]
instance_group [{ kind: KIND_GPU }]
"""
NEEDS_CUDA = b"""
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("no CUDA device")

    def execute(self, requests):
        return []
"""


@pytest.mark.parametrize(("server_mode", "state"), [(False, "UNAVAILABLE"), (True, "READY")])
def test_a_gpu_version_is_loaded_where_it_serves(
    model_code_enabled, monkeypatch, caplog, server_mode, state
):
    """Given a KIND_GPU Python model whose initialize needs CUDA
    When it is published where the infer function serves it (no server mode)
    Then its load there fails and it is never READY
    When server mode is on (a GPU task serves KIND_GPU versions)
    Then the infer function does not load it on its CPU: it is READY, and the log says
    where it was not checked and why."""
    if server_mode:
        monkeypatch.setenv("LAMBDASERVE_SERVER_URL", "http://127.0.0.1:9")
    get_settings.cache_clear()
    try:
        aws = model_code_enabled
        aws.put("models/gpu/config.pbtxt", GPU_CONFIG)
        aws.put("models/gpu/1/model.py", NEEDS_CUDA)
        with caplog.at_level("INFO", logger="lambdaserve"):
            aws.services.registrar.reconcile_model("gpu")
    finally:
        get_settings.cache_clear()
    record = aws.services.catalog.get_version("gpu", 1)
    assert record.state == state, record.reason
    if server_mode:
        assert "KIND_GPU: not loaded in" in caplog.text
    else:
        assert "no CUDA device" in record.reason
    assert (record.state == version_policy.READY) == server_mode


class _LambdaInProcess:
    """Lambda's synchronous invoke as the infer function sees it: the payload as JSON
    bytes in, the entry point's answer as JSON bytes out (no Lambda emulator here)."""

    def __init__(self, server) -> None:
        self._server = server
        self.invoked: list[str] = []

    def invoke(self, FunctionName: str, Payload: bytes) -> dict:
        import io
        import json

        from lambdaserve.handlers import load_check

        self.invoked.append(FunctionName)
        answer = load_check.handle(json.loads(Payload), self._server)
        return {"StatusCode": 200, "Payload": io.BytesIO(json.dumps(answer).encode())}


def test_the_deployed_check_sends_the_version_as_json_and_reads_the_answer(model_code_enabled):
    """Given the manage side asking the infer function by invoke (InferFunctionCheck)
    When a Python model failing at initialize and a sound one are published
    Then the version crossed as JSON, the failing one is UNAVAILABLE naming the infer
    function's environment and the code's message, and the sound one is READY."""
    from lambdaserve.publishing.serving_check import InferFunctionCheck
    from lambdaserve.wiring.inference import build_model_server

    aws = model_code_enabled
    client = _LambdaInProcess(build_model_server(aws.settings, aws.clients))
    aws.services.registrar.check_where_it_serves(InferFunctionCheck(client, "infer:live"))
    config = GPU_CONFIG.replace(b"instance_group [{ kind: KIND_GPU }]\n", b"")
    for model, source in (
        ("bad", NEEDS_CUDA),
        ("good", NEEDS_CUDA.replace(b'raise RuntimeError("no CUDA device")', b"pass")),
    ):
        aws.put(f"models/{model}/config.pbtxt", config)
        aws.put(f"models/{model}/1/model.py", source)
        aws.services.registrar.reconcile_model(model)
    bad = aws.services.catalog.get_version("bad", 1)
    assert bad.state == version_policy.UNAVAILABLE
    assert "failed to load where it serves (the infer process" in bad.reason
    assert "no CUDA device" in bad.reason
    assert aws.services.catalog.get_version("good", 1).state == version_policy.READY
    assert client.invoked == ["infer:live", "infer:live"]


PICKY_CONFIG = b"""
backend: "python"
max_batch_size: 0
input [{ name: "X", data_type: TYPE_FP32, dims: [1] }]
output [{ name: "Y", data_type: TYPE_FP32, dims: [1] }]
parameters { key: "mode" value: { string_value: "fast" } }
"""
PICKY = b"""
import json


class TritonPythonModel:
    def initialize(self, args):
        mode = json.loads(args["model_config"])["parameters"]["mode"]["string_value"]
        if mode != "fast":
            raise ValueError(f"unknown mode {mode!r}")

    def execute(self, requests):
        return []
"""


def test_a_changed_parameter_is_loaded_again_where_it_serves(model_code_enabled):
    """Given a READY Python model whose initialize reads a parameter
    When the management API changes that parameter to a value initialize refuses
    Then the version is loaded again where it serves before it may serve, and is refused
    with the model's own error (a parameter is part of what model code loads)."""
    aws = model_code_enabled
    aws.put("models/picky/config.pbtxt", PICKY_CONFIG)
    aws.put("models/picky/1/model.py", PICKY)
    aws.services.registrar.reconcile_model("picky")
    assert aws.services.catalog.get_version("picky", 1).state == version_policy.READY

    aws.services.manager.update_config("picky", {"parameters": {"mode": {"string_value": "slow"}}})

    record = aws.services.catalog.get_version("picky", 1)
    assert record.state != version_policy.READY
    assert "unknown mode 'slow'" in record.reason, record.reason
