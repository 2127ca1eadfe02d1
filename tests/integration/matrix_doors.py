"""The doors of the feature-by-door matrix: each sends asks (rows, and what the client may say
with them: a request id, a timeout, a classification) through one door's own client, as
that door's users send them, and gives back each answer. A door whose protocol has no way to
say what an ask says raises ``NotCarried`` with the reason; a cell that meets it must be in
the matrix's table of refusals.

Asks with an ``at`` (seconds) run together, each at its offset, so they meet in the
server's queue.
"""

from __future__ import annotations

import base64
import json
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from tests.integration.grpc_support import Served
from tests.integration.test_grpc_peers import peer

Rows = np.ndarray[Any, Any]
INPUT, OUTPUT = "INPUT__0", "OUTPUT__0"
BLS = "bls_caller"  # the model whose code calls the asked model (tests.integration.matrix_models)


class NotCarried(AssertionError):
    """The door's protocol cannot say what the ask says."""


@dataclass(frozen=True)
class Ask:
    model: str
    rows: Rows
    request_id: str = ""
    timeout_us: int = 0
    class_count: int = 0
    at: float = 0.0
    signature: str = ""  # a TF SavedModel's signature by name (TF Serving's doors alone)
    input: str = INPUT


@dataclass(frozen=True)
class Answer:
    ok: bool
    said: str  # the error as the door said it, or the body
    output: Any = field(default=None)  # the first output's elements, where ``ok``

    def expect_ok(self) -> Answer:
        assert self.ok, self.said[:300]
        return self


Door = Callable[[Served, Sequence[Ask]], list[Answer]]


def _http(served: Served) -> str:
    return f"http://127.0.0.1:{served.http}"


def _together(one: Callable[[Served, Ask], Answer]) -> Door:
    """A door whose client is in this process: asks with offsets run on threads of their own."""

    def send(served: Served, asks: Sequence[Ask]) -> list[Answer]:
        if len(asks) == 1 and not asks[0].at:
            return [one(served, asks[0])]
        answers: list[Answer | None] = [None] * len(asks)
        not_carried: list[NotCarried] = []
        began = time.monotonic()

        def run(index: int, ask: Ask) -> None:
            time.sleep(max(0.0, began + ask.at - time.monotonic()))
            try:
                answers[index] = one(served, ask)
            except NotCarried as exc:  # the door's, raised where the asks were sent
                not_carried.append(exc)
            except Exception as exc:  # given back, never lost in the thread
                answers[index] = Answer(False, f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=run, args=item) for item in enumerate(asks)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        if not_carried:
            raise not_carried[0]
        return [a if a is not None else Answer(False, "no answer in 120 s") for a in answers]

    return send


def _v2_parameters(ask: Ask, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    parameters = dict(extra or {})
    if ask.timeout_us:
        parameters["timeout"] = ask.timeout_us
    return parameters


def _v2_json(served: Served, ask: Ask, model: str, extra: dict[str, Any] | None = None) -> Answer:
    tensor = {"name": INPUT, "datatype": "FP32", "shape": list(ask.rows.shape)}
    body: dict[str, Any] = {"inputs": [{**tensor, "data": ask.rows.tolist()}]}
    if ask.request_id:
        body["id"] = ask.request_id
    if parameters := _v2_parameters(ask, extra):
        body["parameters"] = parameters
    if ask.class_count:
        wanted = {"classification": ask.class_count}
        body["outputs"] = [{"name": OUTPUT, "parameters": wanted}]
    answer = httpx.post(f"{_http(served)}/v2/models/{model}/infer", json=body, timeout=60)
    if answer.status_code != 200:
        return Answer(False, answer.text)
    return Answer(True, answer.text, answer.json()["outputs"][0]["data"])


def _one_v2_json(served: Served, ask: Ask) -> Answer:
    _no_signature(ask)
    return _v2_json(served, ask, ask.model)


def _one_v2_binary(served: Served, ask: Ask) -> Answer:
    _no_signature(ask)
    tensor = triton.InferInput(INPUT, list(ask.rows.shape), "FP32")
    tensor.set_data_from_numpy(ask.rows, binary_data=True)
    asked = [triton.InferRequestedOutput(OUTPUT, binary_data=True, class_count=ask.class_count)]
    body, size = triton.InferenceServerClient.generate_request_body(
        [tensor],
        outputs=asked,
        request_id=ask.request_id,
        timeout=ask.timeout_us or None,
    )
    answer = httpx.post(
        f"{_http(served)}/v2/models/{ask.model}/infer",
        content=body,
        headers={"Inference-Header-Content-Length": str(size)},
        timeout=60,
    )
    if answer.status_code != 200:
        return Answer(False, answer.text)
    length = answer.headers.get("Inference-Header-Content-Length")
    result = triton.InferenceServerClient.parse_response_body(
        answer.content, header_length=int(length) if length else None
    )
    return Answer(True, "", result.as_numpy(OUTPUT).tolist())


def _grpc_output(ask: Ask) -> list[grpcclient.InferRequestedOutput]:
    return [grpcclient.InferRequestedOutput(OUTPUT, class_count=ask.class_count)]


def _grpc_input(ask: Ask) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput(INPUT, list(ask.rows.shape), "FP32")
    tensor.set_data_from_numpy(ask.rows)
    return [tensor]


def _one_v2_grpc(served: Served, ask: Ask) -> Answer:
    _no_signature(ask)
    try:
        result = served.client().infer(
            ask.model,
            _grpc_input(ask),
            outputs=_grpc_output(ask),
            request_id=ask.request_id,
            timeout=ask.timeout_us or None,
        )
    except InferenceServerException as exc:
        return Answer(False, f"{exc.status()}: {exc.message()}")
    return Answer(True, "", result.as_numpy(OUTPUT).tolist())


def _one_v2_stream(served: Served, ask: Ask) -> Answer:
    _no_signature(ask)
    client = served.client()
    came: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: came.put((result, error)))
    try:
        client.async_stream_infer(
            ask.model,
            _grpc_input(ask),
            outputs=_grpc_output(ask),
            request_id=ask.request_id,
            timeout=ask.timeout_us or None,
        )
        result, error = came.get(timeout=60)
    finally:
        client.stop_stream()
    if error is not None:
        return Answer(False, f"{error.status()}: {error.message()}")
    return Answer(True, "", result.as_numpy(OUTPUT).tolist())


def _one_generate(served: Served, ask: Ask) -> Answer:
    _no_signature(ask)
    if ask.class_count:
        raise NotCarried("Triton's generate extension has no output parameters")
    if len(ask.rows) != 1:
        raise NotCarried("a generate request is one row (its fields fill one request)")
    body: dict[str, Any] = {INPUT: ask.rows[0].tolist()}
    if ask.request_id:
        body["id"] = ask.request_id
    if parameters := _v2_parameters(ask):
        body["parameters"] = parameters
    answer = httpx.post(f"{_http(served)}/v2/models/{ask.model}/generate", json=body, timeout=60)
    if answer.status_code != 200:
        return Answer(False, answer.text)
    return Answer(True, answer.text, answer.json()[OUTPUT])


def _refuse_v2_only(ask: Ask, door: str) -> None:
    if ask.request_id:
        raise NotCarried(f"{door}'s requests carry no request id of the client's")
    if ask.timeout_us:
        raise NotCarried(f"{door}'s requests carry no timeout of their own")
    if ask.class_count:
        raise NotCarried(f"{door} has no classification of outputs")


def _no_signature(ask: Ask) -> None:
    if ask.signature:
        raise NotCarried("only TF Serving's doors name a signature")


def _one_torchserve_rest(served: Served, ask: Ask) -> Answer:
    _no_signature(ask)
    _refuse_v2_only(ask, "TorchServe's inference API")
    answer = httpx.post(
        f"{_http(served)}/predictions/{ask.model}", json=ask.rows.tolist(), timeout=60
    )
    if answer.status_code != 200:
        return Answer(False, answer.text)
    return Answer(True, answer.text, answer.json())


def _one_tfserving_rest(served: Served, ask: Ask) -> Answer:
    _refuse_v2_only(ask, "TF Serving's REST API")
    body: dict[str, Any] = {"instances": ask.rows.tolist()}
    if ask.signature:
        body["signature_name"] = ask.signature
    answer = httpx.post(f"{_http(served)}/v1/models/{ask.model}:predict", json=body, timeout=60)
    if answer.status_code != 200:
        return Answer(False, answer.text)
    return Answer(True, answer.text, answer.json()["predictions"])


def _one_paddle_http(served: Served, ask: Ask) -> Answer:
    _no_signature(ask)
    if ask.timeout_us:
        raise NotCarried("Paddle's pipeline requests carry no timeout of their own")
    if ask.class_count:
        raise NotCarried("Paddle's pipeline has no classification of outputs")
    body: dict[str, Any] = {"key": [INPUT], "value": [json.dumps(ask.rows.tolist())]}
    if ask.request_id:
        body["logid"] = int(ask.request_id)  # Paddle's request id: an int64
    answer = httpx.post(f"{_http(served)}/{ask.model}/prediction", json=body, timeout=60)
    said = answer.json() if answer.status_code == 200 else {"err_no": answer.status_code}
    if said.get("err_no") != 0:
        return Answer(False, answer.text)
    return Answer(True, answer.text, json.loads(said["value"][0]))


def _one_bls(served: Served, ask: Ask) -> Answer:
    """Model code's own request: the client asks the BLS caller, whose code asks the model
    (passing the client's id and timeout on, as a Triton BLS model does)."""
    _no_signature(ask)
    if ask.class_count:
        raise NotCarried("a BLS request names its outputs only (pb_utils has no classification)")
    return _v2_json(served, ask, BLS, {"target": ask.model})


def _tfserving_grpc(served: Served, asks: Sequence[Ask]) -> list[Answer]:
    for ask in asks:
        _refuse_v2_only(ask, "TF Serving's PredictionService")
    calls = [
        {
            "rpc": "predict",
            "model": ask.model,
            "inputs": {ask.input: {"data": ask.rows.tolist(), "dtype": "float32"}},
            **({"signature": ask.signature} if ask.signature else {}),
            **({"at": ask.at} if len(asks) > 1 else {}),
        }
        for ask in asks
    ]
    answers = peer("tfserving_client.py", served.grpc_url, calls)
    return [
        Answer(True, "", a["outputs"]) if a["ok"] else Answer(False, f"{a['code']}: {a['details']}")
        for a in answers
    ]


def torchserve_grpc(stubs: Path) -> Door:
    def send(served: Served, asks: Sequence[Ask]) -> list[Answer]:
        calls = []
        for ask in asks:
            _no_signature(ask)
            _refuse_v2_only(ask, "TorchServe's gRPC inference API")
            data = base64.b64encode(json.dumps(ask.rows.tolist()).encode()).decode()
            call = {"rpc": "Predictions", "model": ask.model, "input": {"data": data}}
            calls.append({**call, **({"at": ask.at} if len(asks) > 1 else {})})
        answers = peer("torchserve_client.py", served.grpc_url, calls, str(stubs))
        return [
            Answer(True, "", a["predictions"])
            if a["ok"]
            else Answer(False, f"{a['code']}: {a['details']}")
            for a in answers
        ]

    return send


def _one_queued(served: Served, ask: Ask) -> Answer:
    """v2 JSON sent with ``Prefer: respond-async`` (through the requests queue and the
    batcher), its answer read from the status URL once it has one."""
    _no_signature(ask)
    if ask.class_count:
        wanted = {"classification": ask.class_count}
        outputs: list[dict[str, Any]] = [{"name": OUTPUT, "parameters": wanted}]
    else:
        outputs = []
    tensor = {"name": INPUT, "datatype": "FP32", "shape": list(ask.rows.shape)}
    body: dict[str, Any] = {"inputs": [{**tensor, "data": ask.rows.tolist()}]}
    if ask.request_id:
        body["id"] = ask.request_id
    if ask.timeout_us:
        body["parameters"] = {"timeout": ask.timeout_us}
    if outputs:
        body["outputs"] = outputs
    base = _http(served)
    accepted = httpx.post(
        f"{base}/v2/models/{ask.model}/infer",
        json=body,
        headers={"Prefer": "respond-async"},
        timeout=60,
    )
    if accepted.status_code != 202:
        return Answer(False, accepted.text)
    status = f"{base}{accepted.json()['status_url']}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        answer = httpx.get(status, timeout=60)
        if answer.status_code != 202:
            if answer.status_code != 200:
                return Answer(False, answer.text)
            return Answer(True, answer.text, answer.json()["outputs"][0]["data"])
        time.sleep(0.1)
    return Answer(False, "no answer on the status URL in 60 s")


def queued() -> Door:
    """The queued door (the Lambda path's async requests): v2 JSON, answered by the batcher."""
    return _together(_one_queued)


def tfserving_doors() -> dict[str, Door]:
    """TF Serving's two doors (the TensorFlow suite's columns, for a named signature)."""
    return {"TF Serving REST": _together(_one_tfserving_rest), "TF Serving gRPC": _tfserving_grpc}


def doors(torchserve_stubs: Path) -> dict[str, Door]:
    """Every door of the matrix, by name: the columns."""
    return {
        "v2 HTTP JSON": _together(_one_v2_json),
        "v2 HTTP binary": _together(_one_v2_binary),
        "v2 gRPC": _together(_one_v2_grpc),
        "v2 gRPC stream": _together(_one_v2_stream),
        "generate": _together(_one_generate),
        "TorchServe REST": _together(_one_torchserve_rest),
        "TorchServe gRPC": torchserve_grpc(torchserve_stubs),
        **tfserving_doors(),
        "Paddle HTTP": _together(_one_paddle_http),
        "BLS": _together(_one_bls),
    }


def measure(
    found: dict[tuple[str, str], str], cell: tuple[str, str], probe: Callable[[], None]
) -> None:
    """One cell of the matrix, (feature, door): "applied", or why not (the probe's first line)."""
    try:
        probe()
        found[cell] = "applied"
    except AssertionError as exc:
        found[cell] = f"not applied: {str(exc).splitlines()[0][:120]}"
