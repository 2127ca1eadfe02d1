"""TorchServe handler loads not slowed by OpenVINO: TorchServe's BaseHandler imports
OpenVINO's torch.compile backend whenever OpenVINO is installed (seconds per load); a
handler whose model-config.yaml does not ask for it (pt2 backend openvino) loads without
it, and one that asks gets it."""

from __future__ import annotations

import pytest

pytest.importorskip("ts")
pytest.importorskip("openvino")

WAIT_S = 180
HANDLER = """
import sys
from ts.torch_handler.base_handler import BaseHandler


class Handler(BaseHandler):
    def initialize(self, context):
        self.initialized = True

    def handle(self, data, context):
        return [str("openvino.torch" in sys.modules and sys.modules["openvino.torch"] is not None)
                for _ in data]
"""


@pytest.mark.parametrize(
    ("yaml", "imported"),
    [(b"minWorkers: 1\n", "False"), (b"pt2:\n  backend: openvino\n", "True")],
)
def test_base_handler_imports_openvinos_torch_backend_only_when_asked(stack, yaml, imported):
    """Given a BaseHandler subclass published with or without pt2 backend openvino,
    When it is loaded in its worker and asked,
    Then OpenVINO's torch backend is in its process only where the config asked for it."""
    stack.put("models/h/1/handler.py", HANDLER.encode())
    stack.put("models/h/1/model-config.yaml", yaml)
    stack.wait_state("h", 1, "READY", timeout_s=WAIT_S)
    answer = stack.inference.post("/predictions/h", content=b"x", timeout=WAIT_S)
    assert answer.status_code == 200, answer.text
    assert answer.text == imported
