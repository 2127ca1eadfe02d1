"""The journeys through the stack as template.yaml deploys it, each function under its role."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from lambdaserve.catalog.store import Catalog
from lambdaserve.local.http_api_event import http_api_event
from tests import builders
from tests.deployed.stack import STACK, DeployedStack, deployed
from tests.support import wait_until

EVENTS = Path(__file__).parents[1] / "events"
MLP = builders.onnx_mlp(4, 3)
ROWS = [[0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4]]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeployedStack]:
    # Given the stack with the template's defaults, an ONNX model published through it
    with deployed(tmp_path_factory.mktemp("deployed")) as running:
        running.publish("mlp", {"1/model.onnx": MLP})
        yield running


def expected(rows: list[list[float]]) -> np.ndarray:
    return ort.InferenceSession(MLP).run(None, {"INPUT__0": np.array(rows, np.float32)})[0]


def sample(name: str) -> dict[str, Any]:
    return dict(json.loads((EVENTS / name).read_text()))


def test_v2_infer_and_predictions_answer_through_the_infer_function(stack: DeployedStack):
    # When API Gateway's v2 infer and TorchServe's /predictions events reach the infer function
    v2 = stack.invoke("InferFunction", sample("apigw_v2_infer_json.json"))
    predictions = stack.invoke("InferFunction", sample("apigw_v2_predictions.json"))
    # Then each answers the model's outputs
    assert v2["statusCode"] == 200, v2
    [output] = json.loads(v2["body"])["outputs"]
    np.testing.assert_allclose(output["data"], expected(ROWS).ravel(), rtol=1e-5)
    assert predictions["statusCode"] == 200, predictions
    np.testing.assert_allclose(json.loads(predictions["body"]), expected(ROWS[:1])[0], rtol=1e-5)

    # and describe, through the management API, shows the version's cold start in the infer
    # function, phase by phase, as its role let the function write it (from a thread of its
    # own: the first request never waits for the writes)
    def described() -> dict[str, Any] | None:
        answer = stack.invoke("ManageApiFunction", http_api_event("GET", "/models/mlp", b""))
        [version] = json.loads(answer["body"])
        return version["coldStart"] if "firstInferenceMs" in version["coldStart"] else None

    cold = wait_until(described, 30)
    assert "infer function" in cold["where"], cold
    assert {"fetchMs", "loadMs", "warmupMs", "firstInferenceMs", "totalMs"} <= set(cold), cold
    # the function's own init joined its first load's (the model's first request paid it)
    assert cold["starts"] == ["init"] and cold["initMs"]["p50"] > 0, cold
    stack.assert_no_denials()


def test_tf_serving_rest_answers_through_the_infer_function(stack: DeployedStack):
    # When TF Serving's REST predict reaches the infer function
    body = json.dumps({"instances": ROWS}).encode()
    answer = stack.invoke("InferFunction", http_api_event("POST", "/v1/models/mlp:predict", body))
    # Then it answers TF Serving's predictions
    assert answer["statusCode"] == 200, answer
    np.testing.assert_allclose(json.loads(answer["body"])["predictions"], expected(ROWS), rtol=1e-5)


def test_respond_async_goes_through_the_queue_to_the_batcher(stack: DeployedStack):
    # Given a v2 request sent with Prefer: respond-async
    body = sample("apigw_v2_infer_json.json")["body"].encode()
    event = http_api_event("POST", "/v2/models/mlp/infer", body)
    event["headers"]["prefer"] = "respond-async"
    accepted = stack.invoke("InferFunction", event)
    assert accepted["statusCode"] == 202, accepted
    status = http_api_event("GET", json.loads(accepted["body"])["status_url"], b"")

    # When the requests queue's mapping feeds the batcher function
    def answered() -> bool:
        return bool(stack.invoke("InferFunction", status)["statusCode"] == 200)

    stack.pump("BatcherFunction", answered)
    # Then the status URL answers the outputs
    [output] = json.loads(stack.invoke("InferFunction", status)["body"])["outputs"]
    np.testing.assert_allclose(output["data"], expected(ROWS).ravel(), rtol=1e-5)


def test_a_queued_request_naming_a_reply_queue_gets_its_result_there(stack: DeployedStack):
    # Given a client's reply queue named as the stack allows (<stack>-reply-*)
    sqs = stack.clients.sqs
    reply_url = sqs.create_queue(QueueName=f"{STACK}-reply-journey")["QueueUrl"]
    # When a producer sends an envelope naming it straight to the requests queue
    request = json.loads(sample("apigw_v2_infer_json.json")["body"])
    envelope = {**request, "id": "reply-1", "model_name": "mlp", "reply_to": reply_url}
    sqs.send_message(QueueUrl=stack.queue("RequestsQueue").url, MessageBody=json.dumps(envelope))
    replies: list[dict[str, Any]] = []

    def replied() -> bool:
        replies.extend(sqs.receive_message(QueueUrl=reply_url).get("Messages", []))
        return bool(replies)

    stack.pump("BatcherFunction", replied)
    # Then the batcher, under its role, sent the result to that queue
    reply = json.loads(replies[0]["Body"])
    assert (reply["id"], reply["status"]) == ("reply-1", "SUCCESS"), reply
    [output] = reply["response"]["outputs"]
    np.testing.assert_allclose(output["data"], expected(ROWS).ravel(), rtol=1e-5)


def test_a_deleted_version_is_unavailable(stack: DeployedStack):
    # Given a second model published
    stack.publish("gone", {"1/model.onnx": MLP})
    # When its file is deleted from the bucket
    stack.clients.s3.delete_object(Bucket=stack.settings.bucket, Key="models/gone/1/model.onnx")
    catalog = Catalog(stack.clients.dynamodb, stack.settings.table)
    stack.pump("ManageEventsFunction", lambda: catalog.versions("gone")[0].state == "UNAVAILABLE")
    # Then the infer function no longer serves it, and says why
    answer = stack.invoke("InferFunction", http_api_event("GET", "/v2/models/gone/ready", b""))
    assert answer["statusCode"] != 200, answer


def test_the_scheduled_reconcile_heals_an_upload_whose_event_was_lost(stack: DeployedStack):
    # Given an upload whose S3 event never reached the manage function (the queue lost it)
    stack.clients.s3.put_object(
        Bucket=stack.settings.bucket, Key="models/missed/1/model.onnx", Body=MLP
    )
    [source] = stack.shape.function("ManageEventsFunction").sources
    stack.clients.sqs.purge_queue(QueueUrl=stack.queue(source.queue).url)
    catalog = Catalog(stack.clients.dynamodb, stack.settings.table)
    assert catalog.versions("missed") == []
    # When the schedule template.yaml sets invokes the reconcile function, under its role
    scheduled = {
        "version": "0",
        "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": "2026-12-06T00:00:00Z",
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/reconcile"],
        "detail": {},
    }
    answer = stack.invoke("ReconcileFunction", scheduled)
    # Then the catalog holds the version, READY, as if its event had come
    assert answer["models"] >= 1, answer
    [record] = catalog.versions("missed")
    assert record.state == "READY", record.reason


SCHEDULED = {
    "version": "0",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "region": "us-east-1",
    "resources": ["arn:aws:events:us-east-1:123456789012:rule/rollouts"],
    "detail": {},
}


def roll_out(stack: DeployedStack) -> dict[str, Any]:
    """A label moved from version 1 to 2 of ``canary`` through its steps: the rollout asked
    of the management API, clients asking the label through the infer function (whose
    tallies the analysis reads), the schedule ticking the rollouts function; its status."""
    files = {"config.pbtxt": b"version_policy: { all { } }", "1/model.onnx": MLP}
    stack.publish("canary", files | {"2/model.onnx": builders.onnx_mlp(4, 3, seed=2)})
    catalog = Catalog(stack.clients.dynamodb, stack.settings.table)
    stack.pump(
        "ManageEventsFunction",
        lambda: (
            [(v.version, v.state) for v in catalog.versions("canary")]
            == [(1, "READY"), (2, "READY")]
        ),
    )

    def manage(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        event = http_api_event(method, path, json.dumps(body).encode() if body else b"")
        return stack.invoke("ManageApiFunction", event)

    assert manage("PUT", "/models/canary/labels/prod", {"version": 1})["statusCode"] == 200
    rollout = {
        "label": "prod",
        "to": 2,
        "steps": [50, 100],
        "bake_seconds": 0,
        # the infer function sees the new weights within its catalog view's 2 s
        "analysis": {"interval_seconds": 1, "min_samples": 5, "inconclusive_limit": 50},
    }
    started = manage("POST", "/models/canary/rollouts", rollout)
    assert started["statusCode"] == 201, started
    body = json.dumps(
        {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": ROWS[0]}]}
    ).encode()
    ask = http_api_event("POST", "/v2/models/canary/versions/prod/infer", body)

    def moved_on() -> dict[str, Any] | None:
        for _ in range(20):
            answer = stack.invoke("InferFunction", ask)
            assert answer["statusCode"] == 200, answer
        time.sleep(1.1)  # a window closes; the next invocation writes its tallies as it ends
        stack.invoke("InferFunction", ask)
        stack.invoke("RolloutsFunction", SCHEDULED)
        status = json.loads(manage("GET", "/models/canary/rollouts/prod")["body"])
        return dict(status) if status["phase"] != "Progressing" else None

    return wait_until(moved_on, 120, 0)


def test_a_rollout_is_judged_and_promoted_by_the_scheduled_rollouts_function(stack: DeployedStack):
    # Given two versions of a model, its label on version 1, a rollout to version 2 asked
    # When clients ask the label and the schedule runs the rollouts function, under its role
    done = roll_out(stack)
    # Then it reached 100% through its steps, each judged on the tallies the infer function
    # wrote, and the label names version 2 alone
    assert done["phase"] == "Promoted", done
    assert any(m["phase"] == "Successful" for m in done["measurements"]), done
    ask = http_api_event(
        "POST",
        "/v2/models/canary/versions/prod/infer",
        json.dumps(
            {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": ROWS[0]}]}
        ).encode(),
    )
    answer = stack.invoke("InferFunction", ask)
    assert answer["headers"]["lambdaserve-model-version"] == "2", answer


def test_a_config_fixed_through_the_management_api_makes_the_version_ready(stack: DeployedStack):
    # Given a version refused for its config (an input the model does not have)
    wrong = b'max_batch_size: 8\ninput [{ name: "WRONG", data_type: TYPE_FP32, dims: [ 4 ] }]'
    stack.publish("fixable", {"config.pbtxt": wrong, "1/model.onnx": MLP}, state="UNAVAILABLE")
    # When the management API (ManageApiFunction, under its role) overrides the input
    fixed = {"input": [{"name": "INPUT__0", "data_type": "TYPE_FP32", "dims": [4]}]}
    event = http_api_event("PUT", "/models/fixable", json.dumps(fixed).encode())
    answer = stack.invoke("ManageApiFunction", event)
    # Then the version is READY without a new upload, and answers
    assert answer["statusCode"] == 200, answer
    [record] = Catalog(stack.clients.dynamodb, stack.settings.table).versions("fixable")
    assert record.state == "READY", record.reason
    body = json.dumps(
        {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": ROWS[0]}]}
    ).encode()
    served = stack.invoke("InferFunction", http_api_event("POST", "/v2/models/fixable/infer", body))
    assert served["statusCode"] == 200, served


def test_a_deploy_pipeline_hears_a_version_become_ready_on_the_stacks_bus(stack: DeployedStack):
    # Given a pipeline's rule on the bus the template names (the default), targeting a queue
    sqs, events = stack.clients.sqs, stack.clients.client("events")
    url = sqs.create_queue(QueueName="deploy-pipeline")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    pattern = {"source": ["lambdaserve"], "detail-type": ["Model Version State Change"]}
    events.put_rule(Name="wait-for-ready", EventPattern=json.dumps(pattern))
    events.put_targets(Rule="wait-for-ready", Targets=[{"Id": "q", "Arn": arn["QueueArn"]}])
    # When a version is published through the manage function, under its role
    stack.publish("announced", {"1/model.onnx": MLP})
    # Then the rule's queue holds its LOADING and READY changes, with the version's digest
    bodies = [
        json.loads(m["Body"])
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    ]
    states = [(b["detail"]["previous_state"], b["detail"]["state"]) for b in bodies]
    assert states == [("", "LOADING"), ("LOADING", "READY")], bodies
    [record] = Catalog(stack.clients.dynamodb, stack.settings.table).versions("announced")
    assert bodies[-1]["detail"]["digest"] == record.sha256


CAPTURING = b"""
platform: "onnxruntime_onnx"
max_batch_size: 8
parameters { key: "data_capture" value { string_value: "{\\"sampling_percentage\\": 100}" } }
"""


def test_a_capturing_models_exchanges_reach_s3_under_the_functions_roles(
    stack: DeployedStack,
):
    # Given a model whose config asks for payload capture, published through the stack
    stack.publish("captured", {"config.pbtxt": CAPTURING, "1/model.onnx": MLP})
    body = json.dumps(
        {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": ROWS[0]}]}
    ).encode()
    # When the infer function answers it
    answer = stack.invoke(
        "InferFunction", http_api_event("POST", "/v2/models/captured/infer", body)
    )
    # Then the function's capture thread writes the exchange under captures/, as its role allows
    s3, bucket = stack.clients.s3, stack.settings.bucket

    def keys() -> list[str]:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix="captures/captured/1/")
        return [entry["Key"] for entry in listed.get("Contents", [])]

    found = wait_until(keys, 30, interval_s=0.5)
    record = json.loads(s3.get_object(Bucket=bucket, Key=found[0])["Body"].read())
    assert answer["statusCode"] == 200, answer
    assert record["captureData"]["endpointInput"]["data"].encode() == body
    assert record["captureData"]["endpointOutput"]["data"] == answer["body"]
    # And when the same request is queued, the batch path captures it too, under its roles
    event = http_api_event("POST", "/v2/models/captured/infer", body)
    event["headers"]["prefer"] = "respond-async"
    accepted = stack.invoke("InferFunction", event)
    assert accepted["statusCode"] == 202, accepted
    stack.pump("BatcherFunction", lambda: len(keys()) >= 2)
    queued = [
        json.loads(line)
        for key in keys()
        for line in s3.get_object(Bucket=bucket, Key=key)["Body"].read().splitlines()
    ]
    assert len(queued) == 2 and all(r["captureData"]["endpointOutput"]["data"] for r in queued)
    stack.assert_no_denials()


def test_a_labels_shadow_runs_through_the_requests_queue_from_the_infer_function(
    stack: DeployedStack,
):
    # Given a label answered by version 1, shadowed at 100% by version 2, which fails every
    # request (it takes a tensor named x, where clients send INPUT__0)
    files = {"config.pbtxt": b"version_policy: { all { } }", "1/model.onnx": MLP}
    stack.publish("shadowed", files | {"2/model.onnx": builders.onnx_identity(4)})
    catalog = Catalog(stack.clients.dynamodb, stack.settings.table)
    stack.pump(
        "ManageEventsFunction",
        lambda: {v.state for v in catalog.versions("shadowed")} == {"READY"},
    )
    label = {"versions": {"1": 100}, "shadow": {"version": 2, "percent": 100}}
    event = http_api_event("PUT", "/models/shadowed/labels/prod", json.dumps(label).encode())
    assert stack.invoke("ManageApiFunction", event)["statusCode"] == 200
    body = json.dumps(
        {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": ROWS[0]}]}
    ).encode()
    # When the infer function answers the label three times
    ask = http_api_event("POST", "/v2/models/shadowed/versions/prod/infer", body)
    answers = [stack.invoke("InferFunction", ask) for _ in range(3)]
    # Then every client sees version 1's answer, never the shadow's failure
    assert [a["statusCode"] for a in answers] == [200] * 3, answers
    assert {a["headers"]["lambdaserve-model-version"] for a in answers} == {"1"}
    # and the copies, queued by the infer function, run by the batcher under its roles, are
    # recorded under the shadow version's captures, marked a shadow's, with its error
    s3, bucket = stack.clients.s3, stack.settings.bucket

    def records() -> list[dict[str, Any]]:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix="captures/shadowed/2/")
        keys = [entry["Key"] for entry in listed.get("Contents", [])]
        lines = (s3.get_object(Bucket=bucket, Key=k)["Body"].read().splitlines() for k in keys)
        return [json.loads(line) for chunk in lines for line in chunk]

    stack.pump("BatcherFunction", lambda: len(records()) >= 3)
    found = records()
    assert len(found) == 3, found
    for record in found:
        assert record["eventMetadata"]["shadow"] is True
        assert record["eventMetadata"]["primaryVersion"] == 1
        assert "error" in json.loads(record["captureData"]["endpointOutput"]["data"])
    # and no version 1 answer was captured (its config asks for none)
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="captures/shadowed/1/")
    assert listed.get("KeyCount", 0) == 0
    stack.assert_no_denials()


def large_async_answer(stack: DeployedStack) -> None:
    """An answer of about 800 KB of JSON, queued: over DynamoDB's inline limit for a result,
    under Lambda's 6 MB invoke, so the batcher writes it under results/."""
    width = 40_000
    stack.publish("wide", {"1/model.onnx": builders.onnx_identity(width)})
    row = np.arange(width, dtype=np.float32) / 7
    tensor = {"name": "x", "datatype": "FP32", "shape": [1, width], "data": row.tolist()}
    event = http_api_event(
        "POST", "/v2/models/wide/infer", json.dumps({"inputs": [tensor]}).encode()
    )
    event["headers"]["prefer"] = "respond-async"
    accepted = stack.invoke("InferFunction", event)
    assert accepted["statusCode"] == 202, accepted
    status = http_api_event("GET", json.loads(accepted["body"])["status_url"], b"")
    stack.pump(
        "BatcherFunction",
        lambda: stack.invoke("InferFunction", status)["statusCode"] == 200,
        timeout_s=60,
    )
    [output] = json.loads(stack.invoke("InferFunction", status)["body"])["outputs"]
    np.testing.assert_allclose(output["data"], row, rtol=1e-6)
    stack.assert_no_denials()


def test_a_large_async_answer_is_stored_by_the_batcher_in_results(stack: DeployedStack):
    # Given a model whose answer is as large as its request (40,000 floats each way)
    # When it is sent with Prefer: respond-async and the batcher answers it
    # Then the answer is whole
    large_async_answer(stack)
    # And its body was written under results/ (the batcher's grant)
    stored = stack.clients.s3.list_objects_v2(Bucket=stack.settings.bucket, Prefix="results/")
    assert stored.get("KeyCount", 0) >= 1, stored


def test_an_answer_over_the_invoke_limit_leaves_the_batch_function_through_results(
    stack: DeployedStack,
):
    # Given a model whose answer to a one-number request is two million floats (about 8 MB
    # of JSON: over Lambda's 6 MB invoke limit), and a client's reply queue
    width = 2_000_000
    stack.publish("expand", {"1/model.onnx": builders.onnx_expand(width)})
    sqs = stack.clients.sqs
    reply_url = sqs.create_queue(QueueName=f"{STACK}-reply-large")["QueueUrl"]
    tensor = {"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [0.0]}
    envelope = {"inputs": [tensor], "id": "large-1", "model_name": "expand", "reply_to": reply_url}
    # When the request is queued and the batcher has the infer batch function run it
    sqs.send_message(QueueUrl=stack.queue("RequestsQueue").url, MessageBody=json.dumps(envelope))
    replies: list[dict[str, Any]] = []

    def replied() -> bool:
        replies.extend(sqs.receive_message(QueueUrl=reply_url).get("Messages", []))
        return bool(replies)

    stack.pump("BatcherFunction", replied, timeout_s=120)
    # Then the batch function left the answer's body in results/ (its grant) instead of
    # the invoke's answer, and the request succeeded
    reply = json.loads(replies[0]["Body"])
    assert (reply["id"], reply["status"]) == ("large-1", "SUCCESS"), reply
    stored = stack.clients.s3.list_objects_v2(Bucket=stack.settings.bucket, Prefix="results/")
    assert any("large-1" in o["Key"] for o in stored.get("Contents", [])), stored
    stack.assert_no_denials()
