"""Server mode as template.yaml deploys it: the serve task under its task role, the infer
function forwarding a KIND_GPU model's requests to it through the load balancer's name."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient

from lambdaserve.local.http_api_event import http_api_event
from tests import builders, sequence_models
from tests.deployed.stack import DeployedStack, deployed
from tests.support import wait_until

MLP = builders.onnx_mlp(4, 3)
ROWS = [[0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4]]
GPU_CONFIG = b"max_batch_size: 8\ninstance_group [{ kind: KIND_GPU }]"
SERVER_MODE = {  # docs/deploy.md's server-mode profile, less the real network's ids
    "EnableServerMode": "true",
    "ServerModeImageUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/lambdaserve:gpu",
    "ServerModeVpcId": "vpc-0123456789abcdef0",
    "ServerModeSubnetIds": "subnet-0123456789abcdef0,subnet-0123456789abcdef1",
    "ServerModeKind": "cpu",
    "ServerModeMetricsCidr": "10.0.0.0/8",  # TorchServe's metrics API on each task, port 8082
}
BODY = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [2, 4], "data": ROWS}]}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeployedStack]:
    # Given the server-mode stack, a KIND_GPU model published, and the serve task started
    with deployed(tmp_path_factory.mktemp("server-mode"), SERVER_MODE) as running:
        running.publish("gpu", {"config.pbtxt": GPU_CONFIG, "1/model.onnx": MLP})
        running.task("ServerModeTaskDefinition")
        yield running


def expected(rows: list[list[float]]) -> np.ndarray:
    return ort.InferenceSession(MLP).run(None, {"INPUT__0": np.array(rows, np.float32)})[0]


def test_the_infer_function_forwards_a_gpu_model_to_the_serve_task(stack: DeployedStack):
    # When a v2 infer of the KIND_GPU model reaches the infer function
    event = http_api_event("POST", "/v2/models/gpu/infer", json.dumps(BODY).encode())
    response = stack.invoke("InferFunction", event)
    # Then the serve task answered it (its statistics count both rows)
    assert response["statusCode"] == 200, response
    [output] = json.loads(response["body"])["outputs"]
    np.testing.assert_allclose(output["data"], expected(ROWS).ravel(), rtol=1e-5)
    http = f"http://127.0.0.1:{stack.ports[8000]}"
    stats = httpx.get(f"{http}/v2/models/gpu/stats", timeout=30).json()
    assert sum(int(m["inference_count"]) for m in stats["model_stats"]) >= 2


def test_the_serve_task_answers_http_and_grpc_directly(stack: DeployedStack):
    # When tritonclient calls the task's gRPC port and a client its HTTP port
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{stack.ports[8001]}")
    tensor = grpcclient.InferInput("INPUT__0", [2, 4], "FP32")
    tensor.set_data_from_numpy(np.array(ROWS, np.float32))
    over_grpc = client.infer("gpu", [tensor]).as_numpy("OUTPUT__0")
    client.close()
    over_http = httpx.post(
        f"http://127.0.0.1:{stack.ports[8000]}/v2/models/gpu/infer", json=BODY, timeout=30
    )
    # Then both answer the model's outputs
    np.testing.assert_allclose(over_grpc, expected(ROWS), rtol=1e-5)
    assert over_http.status_code == 200, over_http.text
    np.testing.assert_allclose(
        over_http.json()["outputs"][0]["data"], expected(ROWS).ravel(), rtol=1e-5
    )


def test_respond_async_sent_to_the_serve_task_is_queued_and_answered(stack: DeployedStack):
    # When a client sends Prefer: respond-async to server mode directly
    http = f"http://127.0.0.1:{stack.ports[8000]}"
    accepted = httpx.post(
        f"{http}/v2/models/gpu/infer", json=BODY, headers={"Prefer": "respond-async"}, timeout=30
    )
    # Then it is accepted (queued through the requests queue, under the task's role)
    assert accepted.status_code == 202, accepted.text
    stack.assert_no_denials()


def test_the_serve_task_answers_torchserves_metrics_api_where_the_template_opens_it(
    stack: DeployedStack,
):
    # Given requests served by the task (the tests above)
    # When a scraper reads the port the template publishes for TorchServe's metrics API
    scraped = httpx.get(f"http://127.0.0.1:{stack.ports[8082]}/metrics", timeout=30)
    # Then it answers TorchServe's metric names, counting the requests of the GPU model
    assert scraped.status_code == 200, scraped.text
    assert "ts_inference_requests_total" in scraped.text
    assert 'model_name="gpu"' in scraped.text


def test_a_sequences_steps_alternate_between_the_infer_function_and_the_serve_task(
    stack: DeployedStack,
):
    # Given an accumulator (implicit state) published to the server-mode stack
    stack.publish(
        "accumulator",
        sequence_models.simple_string_dyna_sequence("accumulator", idle_us=60_000_000),
    )
    http = f"http://127.0.0.1:{stack.ports[8000]}/v2/models/accumulator/infer"

    def body(value: int, start: bool = False, end: bool = False) -> dict[str, Any]:
        return {
            "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [value]}],
            "parameters": {"sequence_id": "7", "sequence_start": start, "sequence_end": end},
        }

    def by_function(sent: dict[str, Any]) -> int:
        event = http_api_event("POST", "/v2/models/accumulator/infer", json.dumps(sent).encode())
        answer = stack.invoke("InferFunction", event)
        assert answer["statusCode"] == 200, answer
        return int(json.loads(answer["body"])["outputs"][0]["data"][0])

    def by_task(sent: dict[str, Any]) -> int:
        answer = httpx.post(http, json=sent, timeout=30)
        assert answer.status_code == 200, answer.text
        return int(answer.json()["outputs"][0]["data"][0])

    # When its steps go by turns to the infer function and to the serve task
    got = [by_function(body(20, start=True)), by_task(body(-11)), by_function(body(-7))]
    got.append(by_task(body(-1, end=True)))
    # Then the running sums are one process's (END adds the id 7), under both roles
    assert got == [20, 9, 2, 1 + 7]
    stack.assert_no_denials()


def test_a_state_over_400_kb_lives_in_the_bucket_for_the_serve_task(stack: DeployedStack):
    # Given a sequence model whose implicit state is 480 KB (over a DynamoDB item's 400 KB)
    stack.publish("wide", sequence_models.wide_accumulator("wide"))
    http = f"http://127.0.0.1:{stack.ports[8000]}/v2/models/wide/infer"

    def step(value: int, start: bool = False, end: bool = False) -> int:
        sent = {
            "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [value]}],
            "parameters": {"sequence_id": "w", "sequence_start": start, "sequence_end": end},
        }
        answer = httpx.post(http, json=sent, timeout=30)
        assert answer.status_code == 200, answer.text
        return int(answer.json()["outputs"][0]["data"][0])

    # When its steps reach the serve task
    sums = [step(5, start=True), step(2)]
    listed = stack.clients.s3.list_objects_v2(
        Bucket=stack.settings.bucket, Prefix="sequence-state/wide/"
    )
    sums.append(step(3, end=True))
    # Then each met the state the one before left, kept in the bucket under the task's role
    assert sums == [5, 7, 10]
    assert listed.get("KeyCount", 0) == 1, listed
    stack.assert_no_denials()


def test_a_capturing_models_exchange_through_the_serve_task_lands_in_the_bucket(
    stack: DeployedStack,
):
    # Given a model capturing every exchange, published to the server-mode stack
    config = GPU_CONFIG + (
        b'\nparameters { key: "data_capture" value { string_value: '
        b'"{\\"sampling_percentage\\": 100}" } }'
    )
    stack.publish("watched", {"config.pbtxt": config, "1/model.onnx": MLP})
    # When a request reaches the serve task
    answer = httpx.post(
        f"http://127.0.0.1:{stack.ports[8000]}/v2/models/watched/infer", json=BODY, timeout=30
    )
    assert answer.status_code == 200, answer.text

    # Then its exchange lands under captures/, written under the task's role
    def captured() -> int:
        listed = stack.clients.s3.list_objects_v2(
            Bucket=stack.settings.bucket, Prefix="captures/watched/"
        )
        return int(listed.get("KeyCount", 0))

    assert wait_until(captured, 30), "no exchange was captured"
    stack.assert_no_denials()


def test_a_large_async_request_to_the_serve_task_travels_through_the_bucket(
    stack: DeployedStack,
):
    # Given a CPU model, and 8,000 rows sent to the serve task with Prefer: respond-async
    # (about 600 KB: over a queue message, so its body goes to requests/)
    stack.publish("cpu", {"1/model.onnx": MLP})
    rows = np.random.default_rng(3).random((8000, 4), dtype=np.float32)
    sent = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [8000, 4],
                        "data": rows.ravel().tolist()}]}  # fmt: skip
    http = f"http://127.0.0.1:{stack.ports[8000]}"
    accepted = httpx.post(
        f"{http}/v2/models/cpu/infer", json=sent, headers={"Prefer": "respond-async"}, timeout=60
    )
    assert accepted.status_code == 202, accepted.text
    status_url = f"{http}{accepted.json()['status_url']}"
    # When the batcher answers it (the answer, about 450 KB, stored under results/)
    stack.pump("BatcherFunction", lambda: httpx.get(status_url, timeout=30).status_code == 200)
    # Then the serve task's status URL serves the whole answer from the bucket, under its role
    answer = httpx.get(status_url, timeout=30)
    [output] = answer.json()["outputs"]
    np.testing.assert_allclose(
        np.array(output["data"], np.float32).reshape(8000, 3), expected(rows.tolist()), rtol=1e-5
    )
    stack.assert_no_denials()
