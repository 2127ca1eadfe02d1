"""READY means it answers, for model code too: a version with code is loaded where it
serves (import, ``initialize``, warm-up) before the index may say READY; a failure is the
code's own message, and ``load`` checks again once the cause is fixed."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.support import wait_until

CONFIG = b"""
backend: "python"
max_batch_size: 0
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [1] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [1] }]
"""
NEEDS_A_PACKAGE = """
import PACKAGE
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            output = pb_utils.Tensor("OUTPUT0", value * PACKAGE.FACTOR)
            responses.append(pb_utils.InferenceResponse([output]))
        return responses
"""
RAISING_INITIALIZE = b"""
class Handler:
    def initialize(self, context):
        raise RuntimeError("the vocabulary file is missing: ship vocab.txt")

    def handle(self, data, context):
        return ["never"] * len(data)
"""


def states_until_settled(stack, model: str, timeout_s: float = 120) -> list[tuple[str, str]]:
    """Every (state, reason) the index shows for version 1, polled from now until it is
    neither absent nor LOADING."""
    seen: list[tuple[str, str]] = []

    def settled() -> bool:
        state = stack.state(model, 1)
        if state is not None:
            seen.append(state)
        return state is not None and state[0] != "LOADING"

    wait_until(settled, timeout_s)
    return seen


def test_a_handler_whose_initialize_raises_is_never_ready(stack):
    """Given a TorchServe handler whose initialize raises
    When it is uploaded and the index is polled from that moment
    Then the index never says READY, and ends UNAVAILABLE with the handler's own message,
    saying where it was loaded."""
    stack.put("models/vocab/1/handler.py", RAISING_INITIALIZE)
    seen = states_until_settled(stack, "vocab")
    assert all(state != "READY" for state, _ in seen), seen
    state, reason = seen[-1]
    assert state == "UNAVAILABLE"
    assert "the vocabulary file is missing: ship vocab.txt" in reason
    assert "failed to load where it serves (the infer process" in reason


def test_a_python_model_failing_at_import_is_never_ready_and_load_checks_again(
    stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Given a Python model importing a package this environment lacks
    When it is uploaded
    Then the index never says READY and names the missing module
    When the package is installed and Triton's load is called
    Then the version is loaded again where it serves, READY, and answers."""
    package = f"needed_{uuid.uuid4().hex[:8]}"
    stack.put("models/needs/config.pbtxt", CONFIG)
    stack.put("models/needs/1/model.py", NEEDS_A_PACKAGE.replace("PACKAGE", package).encode())
    seen = states_until_settled(stack, "needs")
    assert all(state != "READY" for state, _ in seen), seen
    assert seen[-1][0] == "UNAVAILABLE"
    assert f"No module named '{package}'" in seen[-1][1]
    # a load before the fix is refused with the same reason, checked again
    refused = stack.inference.post("/v2/repository/models/needs/load")
    assert refused.status_code == 400
    assert f"No module named '{package}'" in refused.json()["error"]
    # "pip install" the package
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / f"{package}.py").write_text("FACTOR = 3.0\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))  # where code runs in workers
    loaded = stack.inference.post("/v2/repository/models/needs/load")
    assert loaded.status_code == 200, loaded.text
    assert stack.state("needs", 1) == ("READY", "")
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [2.0]}]}
    answer = stack.inference.post("/v2/models/needs/infer", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"][0]["data"] == [6.0]
