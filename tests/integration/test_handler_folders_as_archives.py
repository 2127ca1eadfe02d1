"""A TorchServe handler folder (``models/m/1/handler.py``) answers as its ``.mar`` would:
version 1 is also ``1.0`` (torch-model-archiver's default ``--version``) for describe,
predict and delete."""

from __future__ import annotations

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
    assert deleted.status_code == 200, deleted.text  # as for a .mar: the objects go
    stack.wait_state("upper", 1, "UNAVAILABLE")
