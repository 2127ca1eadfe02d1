"""Decoupled Python models (model_transaction_policy { decoupled: true }), as Triton serves
them: every response over gRPC ModelStreamInfer with tritonclient's stream (in order, the
final flag last), over HTTP generate_stream, and to a BLS caller's exec(decoupled=True)."""

from __future__ import annotations

import json
import queue

import numpy as np
import tritonclient.grpc as grpcclient

from tests.integration.grpc_support import lambdaserve_serve
from tests.integration.test_python_models import publish

VALUES = [4, 2, 7]


def test_a_decoupled_model_streams_every_response_over_grpc(stack):
    # Given python_backend's repeat model, published by upload
    publish(stack, "repeat_int32")
    stack.wait_state("repeat_int32", 1, "READY")
    received: queue.Queue = queue.Queue()
    with lambdaserve_serve() as served:
        client = served.client()
        # When tritonclient streams a request, asking for the empty final response
        client.start_stream(callback=lambda result, error: received.put((result, error)))
        sent = grpcclient.InferInput("IN", [len(VALUES)], "INT32")
        sent.set_data_from_numpy(np.array(VALUES, dtype=np.int32))
        client.async_stream_infer("repeat_int32", [sent], enable_empty_final_response=True)
        answers = []
        while True:
            result, error = received.get(timeout=30)
            assert error is None, error
            response = result.get_response(as_json=True)
            final = response.get("parameters", {}).get("triton_final_response", {})
            if final.get("bool_param"):
                assert not response.get("outputs")  # the final flag comes empty
                break
            answers.append((int(result.as_numpy("OUT")[0]), int(result.as_numpy("IDX")[0])))
        client.stop_stream()
    # Then one response per element came, in order, then the final flag
    assert answers == [(v, i) for i, v in enumerate(VALUES)]


def test_a_decoupled_model_streams_over_http_generate_stream(stack):
    publish(stack, "repeat_int32")
    stack.wait_state("repeat_int32", 1, "READY")
    with stack.inference.stream(
        "POST", "/v2/models/repeat_int32/generate_stream", json={"IN": VALUES}
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [
            json.loads(line.removeprefix("data: "))
            for line in response.iter_lines()
            if line.startswith("data: ")
        ]
    assert [(e["OUT"], e["IDX"]) for e in events] == [(v, i) for i, v in enumerate(VALUES)]
    assert all(e["model_name"] == "repeat_int32" for e in events)


def test_bls_reads_every_response_of_a_decoupled_model(stack):
    publish(stack, "repeat_int32")
    publish(stack, "bls_repeat")
    stack.wait_state("repeat_int32", 1, "READY")
    stack.wait_state("bls_repeat", 1, "READY")
    body = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [3], "data": VALUES}]}
    answer = stack.inference.post("/v2/models/bls_repeat/infer", json=body)
    assert answer.status_code == 200, answer.text
    outputs = {o["name"]: o["data"] for o in answer.json()["outputs"]}
    assert outputs == {"SUM": [sum(VALUES)], "COUNT": [len(VALUES)]}


def test_one_answer_routes_say_where_many_responses_go(stack):
    publish(stack, "repeat_int32")
    stack.wait_state("repeat_int32", 1, "READY")
    many = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [3], "data": VALUES}]}
    answer = stack.inference.post("/v2/models/repeat_int32/infer", json=many)
    assert answer.status_code == 500
    assert "generate_stream" in answer.json()["error"]
    one = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [9]}]}
    assert stack.inference.post("/v2/models/repeat_int32/infer", json=one).status_code == 200
    generated = stack.inference.post("/v2/models/repeat_int32/generate", json={"IN": [9]})
    assert generated.status_code == 200 and generated.json()["OUT"] == 9


def test_through_the_http_apis_lambda_generate_answers_every_response_at_once(stack):
    from lambdaserve.handlers import infer
    from lambdaserve.local.http_api_event import http_api_event
    from lambdaserve.processes.event_pump import LocalContext

    # Given a decoupled model, and the infer function as API Gateway invokes it
    publish(stack, "repeat_int32")
    stack.wait_state("repeat_int32", 1, "READY")
    body = json.dumps({"IN": VALUES}).encode()

    def invoke(route: str) -> dict:
        event = http_api_event("POST", f"/v2/models/repeat_int32/{route}", body)
        return infer.api_handler(event, LocalContext("infer"))

    # When generate is asked: every response comes back at once, in order, as a list
    collected = invoke("generate")
    assert collected["statusCode"] == 200, collected["body"]
    documents = json.loads(collected["body"])
    assert [(d["OUT"], d["IDX"]) for d in documents] == [(v, i) for i, v in enumerate(VALUES)]
    # When a stream is asked: a 400 saying where streams run
    streamed = invoke("generate_stream")
    assert streamed["statusCode"] == 400
    assert "lambdaserve serve" in json.loads(streamed["body"])["error"]
