"""One trace across the serverless path, as template.yaml deploys it (``Tracing: Active``):
an async request's X-Ray segments and subsegments, from the HTTP API through SQS and the
batcher to its answer, all in the request's trace. The X-Ray SDK in each function sends them
over UDP to ``AWS_XRAY_DAEMON_ADDRESS``; the daemon here is a real UDP listener."""

from __future__ import annotations

import json
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from lambdaserve.local.http_api_event import http_api_event
from tests import builders
from tests.deployed.stack import DeployedStack, deployed

MLP = builders.onnx_mlp(4, 3)
BODY = json.dumps(
    {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
).encode()


class XRayDaemon:
    """The X-Ray daemon's UDP side: each datagram is the protocol's header line and one
    segment or subsegment document."""

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.settimeout(0.2)
        self.address = f"127.0.0.1:{self._socket.getsockname()[1]}"
        self.documents: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                datagram = self._socket.recv(65536)
            except TimeoutError:
                continue
            header, _, document = datagram.partition(b"\n")
            assert json.loads(header) == {"format": "json", "version": 1}
            self.documents.append(json.loads(document))

    def of_trace(self, root: str) -> list[dict[str, Any]]:
        return [d for d in self.documents if d.get("trace_id") == root]

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._socket.close()


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DeployedStack, XRayDaemon]]:
    # Given the stack with the template's defaults (Tracing: Active), its functions' daemon
    # address pointing at a listener, and a model published through it
    daemon = XRayDaemon()
    try:
        with deployed(tmp_path_factory.mktemp("traced")) as stack:
            stack.xray_daemon = daemon.address
            stack.publish("mlp", {"1/model.onnx": MLP})
            yield stack, daemon
    finally:
        daemon.close()


def _answer_async(stack: DeployedStack, headers: dict[str, str]) -> None:
    """An async v2 request through the HTTP API, fed through the batcher until answered."""
    event = http_api_event("POST", "/v2/models/mlp/infer", BODY)
    event["headers"].update({"prefer": "respond-async", **headers})
    accepted = stack.http(event)
    assert accepted["statusCode"] == 202, accepted
    status = http_api_event("GET", json.loads(accepted["body"])["status_url"], b"")
    stack.pump("BatcherFunction", lambda: stack.http(status)["statusCode"] == 200)


def _wait_for(daemon: XRayDaemon, root: str, names: set[str]) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 10
    while not names <= {d["name"] for d in daemon.of_trace(root)}:
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    return daemon.of_trace(root)


def _check_one_trace(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The journey's entities: the submit's AWS calls, the batcher's and the batch run's
    segments, each under the one before it."""
    by_name: dict[str, dict[str, Any]] = {}
    for document in documents:
        by_name.setdefault(document["name"], document)
    names = set(by_name)
    # the infer function's handler and its AWS calls (the queue's send among them)
    assert {"## api_handler", "sqs", "dynamodb"} <= names, names
    # the batcher's run and the batch invoke's run of this request, in the request's trace
    assert {"lambdaserve-batcher", "lambdaserve-infer"} <= names, names
    ids = {d["id"] for d in documents}
    batcher, batch_run = by_name["lambdaserve-batcher"], by_name["lambdaserve-infer"]
    assert batcher["parent_id"] in ids  # the span that sent the message, in the infer function
    assert batch_run["parent_id"] == batcher["id"]
    assert batcher["start_time"] <= batch_run["start_time"] <= batch_run["end_time"]
    assert batch_run["end_time"] <= batcher["end_time"]  # the batcher writes the answer last
    return by_name


def test_an_async_requests_spans_share_api_gateways_trace(traced):
    stack, daemon = traced
    # When an async request comes through the HTTP API with API Gateway's trace header
    root = f"1-{int(time.time()):08x}-{secrets.token_hex(12)}"
    _answer_async(stack, {"x-amzn-trace-id": f"Root={root}"})
    # Then the infer function's segment, its calls, the batcher's run and the batch run are
    # all in that trace
    documents = _wait_for(daemon, root, {"lambdaserve-batcher", "lambdaserve-infer"})
    entities = _check_one_trace(documents)
    function = f"{stack.shape.function('InferFunction').logical}"
    assert any(
        d.get("origin") == "AWS::Lambda::Function" and function in d["name"] for d in documents
    )
    assert entities["## api_handler"]["parent_id"] in {d["id"] for d in documents}


def test_a_callers_traceparent_is_the_trace_the_request_joins(traced):
    stack, daemon = traced
    # When an async request carries its caller's W3C traceparent
    trace, span = secrets.token_hex(16), secrets.token_hex(8)
    _answer_async(stack, {"traceparent": f"00-{trace}-{span}-01"})
    # Then the whole path's entities are in the caller's trace, the handler under its span
    root = f"1-{trace[:8]}-{trace[8:]}"
    documents = _wait_for(daemon, root, {"lambdaserve-batcher", "lambdaserve-infer"})
    entities = _check_one_trace(documents)
    assert entities["## api_handler"]["parent_id"] == span
