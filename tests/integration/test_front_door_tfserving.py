"""TF Serving's ``:predict`` on `lambdaserve serve`: answered by the ASGI front door itself
(not the framework's middleware stack and router), with the app's answers and errors."""

from __future__ import annotations

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from lambdaserve.local.emulator import free_port
from lambdaserve.processes.asgi.front_door import FrontDoor
from lambdaserve.processes.background import BackgroundServer
from lambdaserve.processes.serve import build_serving_app
from tests import builders

MLP = builders.onnx_mlp(4, 3)
X = [[0.1, 0.2, 0.3, 0.4], [1.0, -2.0, 3.0, -4.0]]


def front_door_of(app: object) -> FrontDoor:
    """The FrontDoor inside serve's ASGI wrappers (lifespan, slow-client timeouts)."""
    while not isinstance(app, FrontDoor):
        app = getattr(app, "app", None) or app._app  # type: ignore[attr-defined]
    return app


@pytest.fixture
def serve(stack):
    """`lambdaserve serve`'s app, the paths its framework app was asked for, and the stack."""
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.wait_state("mlp", 1, "READY")
    app = build_serving_app(batching=True)
    door = front_door_of(app)
    framework, reached = door.app, []

    async def recording(scope, receive, send):
        reached.append(scope.get("path"))
        await framework(scope, receive, send)

    door.app = recording  # type: ignore[assignment]
    server = BackgroundServer(app, "127.0.0.1", free_port()).start()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            yield client, reached, stack
    finally:
        server.stop()


def test_predict_is_answered_by_the_front_door(serve):
    """Given `lambdaserve serve` with an ONNX MLP
    When TF Serving's :predict is posted in the row and the columnar formats
    Then the answers are onnxruntime's, and the framework app never saw those requests
    (its status route still answers GETs)."""
    client, reached, _ = serve
    expected = ort.InferenceSession(MLP).run(None, {"INPUT__0": np.array(X, np.float32)})[0]
    rows = client.post("/v1/models/mlp:predict", json={"instances": X})
    columns = client.post("/v1/models/mlp/versions/1:predict", json={"inputs": X})
    assert rows.status_code == 200 and columns.status_code == 200, (rows.text, columns.text)
    np.testing.assert_allclose(rows.json()["predictions"], expected, rtol=1e-6)
    np.testing.assert_allclose(columns.json()["outputs"], expected, rtol=1e-6)
    assert client.get("/v1/models/mlp").status_code == 200
    assert reached == ["/v1/models/mlp"]


def test_the_front_doors_answers_say_the_version_that_answered(serve):
    """Given `lambdaserve serve` with an ONNX MLP
    When TF Serving's :predict, TorchServe's /predictions and v2 infer are posted
    Then every answer says version 1 in lambdaserve-model-version, as the app's routes do."""
    client, reached, _ = serve
    v2 = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [2, 4], "data": X}]}
    answers = [
        client.post("/v1/models/mlp:predict", json={"instances": X}),
        client.post("/predictions/mlp", json=X),
        client.post("/v2/models/mlp/infer", json=v2),
    ]
    assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
    assert [a.headers.get("lambdaserve-model-version") for a in answers] == ["1", "1", "1"]
    assert reached == []


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/models/mlp:predict", b'{"instances": [[1, null, 3, 4]]}'),
        ("/v1/models/mlp:predict", b'{"instances": [[1, 2]]}'),
        ("/v1/models/mlp:predict", b"not json"),
        ("/v1/models/mlp:predict", b"[" * 70 + b"]" * 70),
        ("/v1/models/mlp:classify", b'{"examples": []}'),
        ("/v1/models/mlp", b'{"instances": []}'),
        ("/v1/models/nope:predict", b'{"instances": [[1, 2, 3, 4]]}'),
        ("/v1/models/mlp/versions/x:predict", b'{"instances": [[1, 2, 3, 4]]}'),
        ("/v1/models/", b"{}"),
    ],
)
def test_errors_match_the_apps(serve, path, body):
    """Given `lambdaserve serve` and the inference app as `lambdaserve dev` serves it
    When a bad :predict is posted to both
    Then both answer the same status and the same TF Serving error object."""
    client, reached, stack = serve
    ours, apps = client.post(path, content=body), stack.inference.post(path, content=body)
    assert 400 <= ours.status_code < 500, ours.text
    assert (ours.status_code, ours.json()) == (apps.status_code, apps.json())
    assert reached == []
