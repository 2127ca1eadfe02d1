"""Weighted and sticky version labels (issue 52's first step): ``PUT
/models/{m}/labels/{l}`` with ``{"versions": {"1": 90, "2": 10}, "sticky": "x-user"}``,
honoured by every door that names a label, each answer saying which version served it.
Budget: ~40 s (10,000 requests through the infer function's plane, then `serve`'s gRPC)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import grpc
import httpx
import numpy as np
from tritonclient.grpc import service_pb2, service_pb2_grpc

from lambdaserve.handlers.http_api import answer_without_app
from lambdaserve.local.http_api_event import http_api_event
from tests import builders
from tests.integration.grpc_support import lambdaserve_serve
from tests.support import wait_until

MODEL = "weighed"
HEADER = "lambdaserve-model-version"
BODY = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}


def publish_two(stack: Any) -> None:
    # both versions serve (Triton's default policy serves the latest alone)
    stack.put(f"models/{MODEL}/config.pbtxt", b"version_policy: { all { } }\n")
    for version in (1, 2):
        stack.put(f"models/{MODEL}/{version}/model.onnx", builders.onnx_mlp(4, 3, seed=version))
    for version in (1, 2):
        stack.wait_state(MODEL, version, "READY", timeout_s=60)


def weigh(stack: Any, body: dict[str, Any]) -> None:
    answer = stack.api.put(f"/models/{MODEL}/labels/canary", json=body)
    assert answer.status_code == 200, answer.text


def served_by(answer: httpx.Response) -> int:
    assert answer.status_code == 200, answer.text
    return int(answer.headers[HEADER])


def test_a_label_weighted_90_10_serves_each_version_its_share_on_every_http_door(stack):
    # Given two versions and a label weighted 90/10
    publish_two(stack)
    weigh(stack, {"versions": {"1": 90, "2": 10}})
    client = stack.inference
    # When 10,000 requests ask the label through v2 infer
    served = Counter()
    for _ in range(10_000):
        answer = client.post(f"/v2/models/{MODEL}/versions/canary/infer", json=BODY)
        version = served_by(answer)
        assert answer.json()["model_version"] == str(version)
        served[version] += 1
    # Then each version served its weight within 1.5 points, and each answer said which
    assert abs(served[1] / 100 - 90) <= 1.5 and abs(served[2] / 100 - 10) <= 1.5, served
    # and TorchServe's and TF Serving's doors honour the label too, saying the version
    others = Counter()
    for _ in range(200):
        rows = [[1, 2, 3, 4]]
        others[served_by(client.post(f"/predictions/{MODEL}/canary", json=rows))] += 1
        body = {"instances": rows}
        others[served_by(client.post(f"/v1/models/{MODEL}/labels/canary:predict", json=body))] += 1
    assert set(others) == {1, 2} and others[1] > others[2], others
    # and a request naming its version always meets that version
    assert {served_by(client.post(f"/v2/models/{MODEL}/versions/2/infer", json=BODY))} == {2}
    # and describe shows the weights with each version they name
    [first, *_] = stack.api.get(f"/models/{MODEL}/1").json()
    assert first["weightedLabels"] == {"canary": {"versions": {"1": 90, "2": 10}}}


def test_a_sticky_key_meets_one_version_until_the_weights_move_past_it(stack):
    # Given a label weighted 90/10, sticky on the caller's x-user header
    publish_two(stack)
    weigh(stack, {"versions": {"1": 90, "2": 10}, "sticky": "X-User"})
    users = [f"user-{n}" for n in range(300)]

    def route() -> dict[str, int]:
        url = f"/v2/models/{MODEL}/versions/canary/infer"
        return {
            u: served_by(stack.inference.post(url, json=BODY, headers={"x-user": u})) for u in users
        }

    # When each user asks twice
    first = route()
    # Then every user met one version both times
    assert route() == first
    assert set(first.values()) == {1, 2}
    # When the weights move to 50/50 (the new body replaces the old weights)
    weigh(stack, {"versions": {"1": 50, "2": 50}, "sticky": "x-user"})
    later = route()
    # Then users moved only from 1 to 2, never back from the canary
    moved = {(first[u], later[u]) for u in users if first[u] != later[u]}
    assert moved == {(1, 2)}, moved


def test_a_queued_request_meets_the_version_its_label_drew(stack):
    # Given a label weighted 0/100 on two versions
    publish_two(stack)
    weigh(stack, {"versions": {"1": 0, "2": 100}})
    # When requests for the label are queued (Prefer: respond-async)
    path = f"/v2/models/{MODEL}/versions/canary/infer"
    ids = []
    for _ in range(3):
        accepted = stack.inference.post(path, json=BODY, headers={"Prefer": "respond-async"})
        assert accepted.status_code == 202, accepted.text
        ids.append(accepted.json()["id"])

    # Then each result is the canary's, as the label's weights said
    def answered(request_id: str) -> httpx.Response | None:
        answer = stack.inference.get(f"/v2/requests/{request_id}")
        return answer if answer.status_code != 202 else None

    for request_id in ids:
        done = wait_until(lambda r=request_id: answered(r), 30)
        assert done.status_code == 200, done.text
        assert done.json()["model_version"] == "2"


def test_grpc_says_the_answering_version_in_its_trailing_metadata(stack):
    # Given a label weighted 0/100 on two versions, served by `serve`
    publish_two(stack)
    weigh(stack, {"versions": {"1": 0, "2": 100}, "sticky": "x-user"})
    request = service_pb2.ModelInferRequest(model_name=MODEL, model_version="canary")
    tensor = request.inputs.add(name="INPUT__0", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(np.array([[1, 2, 3, 4]], np.float32).tobytes())
    assert tensor.name == "INPUT__0"
    with lambdaserve_serve() as served, grpc.insecure_channel(served.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        # When tritonclient's own stub asks the label
        response, call = stub.ModelInfer.with_call(request, metadata=[("x-user", "u1")])
    # Then the canary answered, and the trailing metadata says so
    assert response.model_version == "2"
    assert dict(call.trailing_metadata())[HEADER] == "2"


def test_a_grpc_stream_keeps_its_sticky_key_on_one_version(stack):
    # Given a label weighted 50/50, sticky on x-user, served by `serve`
    publish_two(stack)
    weigh(stack, {"versions": {"1": 50, "2": 50}, "sticky": "x-user"})
    request = service_pb2.ModelInferRequest(model_name=MODEL, model_version="canary")
    request.inputs.add(name="INPUT__0", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(np.array([[1, 2, 3, 4]], np.float32).tobytes())
    with lambdaserve_serve() as served, grpc.insecure_channel(served.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

        def stream_of(user: str) -> set[str]:
            answers = stub.ModelStreamInfer(iter([request] * 4), metadata=[("x-user", user)])
            return {a.infer_response.model_version for a in answers}

        # When 30 users each stream four requests through tritonclient's own stub
        met = {user: stream_of(user) for user in (f"u{n}" for n in range(30))}
    # Then every stream met one version for all its requests, and both versions served
    assert all(len(versions) == 1 for versions in met.values()), met
    assert set().union(*met.values()) == {"1", "2"}, met


def test_the_infer_functions_direct_path_keeps_a_sticky_key_on_one_version(stack):
    # Given a label weighted 50/50, sticky on x-user
    publish_two(stack)
    weigh(stack, {"versions": {"1": 50, "2": 50}, "sticky": "x-user"})
    path = f"/v2/models/{MODEL}/versions/canary/infer"

    def version_for(user: str) -> int:
        event = http_api_event("POST", path, json.dumps(BODY).encode())
        event["headers"]["x-user"] = user
        answer = answer_without_app(stack.process, event)  # the infer function's v2 path
        assert answer is not None and answer.status == 200, answer
        return int(answer.headers[HEADER])

    # When 40 users ask three times each through the API Gateway event path
    first = {user: version_for(user) for user in (f"u{n}" for n in range(40))}
    # Then each met one version every time, and both versions served
    assert all(version_for(user) == version for user, version in first.items())
    assert set(first.values()) == {1, 2}
