"""Publishing never waits behind someone else's model code: while a handler is still being
loaded where it serves (its initialize holds), a tensor model published after it becomes
READY and answers."""

from __future__ import annotations

from tests import builders
from tests.support import wait_until

WAIT_S = 120
HOLDING_HANDLER = """
import os, time

def handle(data, context):
    if data is None:  # initialize: held until the test lets it go (at most a minute)
        deadline = time.monotonic() + 60
        while not os.path.exists({marker!r}) and time.monotonic() < deadline:
            time.sleep(0.05)
        return None
    return [b"ok" for _ in data]
"""


def test_a_tensor_model_is_ready_while_a_handler_is_still_loading(stack, tmp_path):
    """Given a handler whose load where it serves is held,
    When an ONNX model is published after it,
    Then the ONNX model is READY and answers while the handler is still not READY; and
    the handler is READY once its load goes on."""
    marker = tmp_path / "go"
    stack.put("models/slow/1/handler.py", HOLDING_HANDLER.format(marker=str(marker)).encode())
    wait_until(lambda: (s := stack.state("slow", 1)) is not None and "loading" in s[1], WAIT_S)
    stack.put("models/quick/1/model.onnx", builders.onnx_mlp())
    stack.wait_state("quick", 1, "READY", timeout_s=WAIT_S)
    body = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [0] * 4}]}
    assert stack.inference.post("/v2/models/quick/infer", json=body).status_code == 200
    state = stack.state("slow", 1)
    assert state is not None and state[0] != "READY", state
    marker.touch()
    stack.wait_state("slow", 1, "READY", timeout_s=WAIT_S)
