"""A TorchServe handler folder (``models/m/1/handler.py``) answers as its ``.mar`` would:
version 1 is also ``1.0`` (torch-model-archiver's default ``--version``) for describe,
predict and delete; and TorchServe's request counters count clients' requests only."""

from __future__ import annotations

import re

from lambdaserve.metrics.torchserve import render, torchserve_registry
from lambdaserve.processes.asgi.metrics_api import ResponseCounts

HANDLER = """
def handle(data, context):
    if data is None:
        return None
    return [bytes(row.get("body", row.get("data"))).decode().upper() for row in data]
"""


def test_handler_folder_version_1_answers_to_1_0(stack):
    """Given models/upper/1/handler.py published and READY
    When a client describes, predicts and deletes /models/upper/1.0, as with a .mar
    Then describe names modelVersion 1.0, the prediction answers, and delete removes
    version 1 (202: its objects go, the catalog follows)."""
    stack.put("models/upper/1/handler.py", HANDLER.encode())
    stack.wait_state("upper", 1, "READY")

    described = stack.api.get("/models/upper/1.0")
    assert described.status_code == 200, described.text
    assert described.json()[0]["modelVersion"] == "1.0"
    answer = stack.inference.post("/predictions/upper/1.0", content=b"hello")
    assert answer.status_code == 200, answer.text
    assert answer.text == "HELLO"

    deleted = stack.api.delete("/models/upper/1.0")
    assert deleted.status_code == 202, deleted.text  # as for a .mar: the objects go
    stack.wait_state("upper", 1, "UNAVAILABLE")


def test_ts_request_counters_count_clients_requests_only(stack):
    """Given a handler folder published (its publish check loads and warms it up here)
    When a client sends two predictions
    Then ts_inference_requests_total for it is 2: warm-up is not a client's request."""
    stack.put("models/upper/1/handler.py", HANDLER.encode())
    stack.wait_state("upper", 1, "READY")
    for _ in range(2):
        assert stack.inference.post("/predictions/upper", content=b"hi").status_code == 200

    # what TorchServe's metrics port (8082 in dev) renders, from this process's stats
    text = render(torchserve_registry(lambda: stack.process.server().stats, ResponseCounts()))
    found = re.search(
        r'^ts_inference_requests_total\{model_name="upper",model_version="1",.*\} (\S+)$',
        text,
        re.M,
    )
    assert found and float(found.group(1)) == 2, text
