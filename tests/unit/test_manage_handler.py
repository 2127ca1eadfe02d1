"""The manage function's SQS handler, invoked with real event JSON, against in-process moto."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lambdaserve.handlers import manage
from lambdaserve.processes.event_pump import LocalContext
from tests import builders

EVENTS = Path(__file__).parent.parent / "events"


def load_event(name: str) -> dict:
    return json.loads((EVENTS / name).read_text())


@pytest.fixture
def handler_services(aws, monkeypatch: pytest.MonkeyPatch):
    aws.use_process()
    return aws


def test_object_created_event_lands_the_version_in_the_catalog(handler_services):
    # Given the object the event names exists in the bucket
    handler_services.put("models/mlp/1/model.onnx", builders.onnx_mlp())
    # When the handler receives S3's notification through SQS (URL-encoded key)
    result = manage.events_handler(load_event("sqs_s3_object_created.json"), LocalContext("manage"))
    # Then no record failed and the version is READY
    assert result == {"batchItemFailures": []}
    version = handler_services.services.catalog.get_version("mlp", 1)
    assert (version.state, version.runtime) == ("READY", "onnxruntime")


def test_object_removed_event_retires_the_version(handler_services):
    handler_services.put("models/mlp/1/model.onnx", builders.onnx_mlp())
    manage.events_handler(load_event("sqs_s3_object_created.json"), LocalContext("manage"))
    handler_services.clients.s3.delete_object(
        Bucket=handler_services.settings.bucket, Key="models/mlp/1/model.onnx"
    )
    manage.events_handler(load_event("sqs_s3_object_removed.json"), LocalContext("manage"))
    version = handler_services.services.catalog.get_version("mlp", 1)
    assert (version.present, version.state) == (False, "UNAVAILABLE")
    assert version.reason.startswith("removed")


def test_s3_test_event_is_skipped(handler_services):
    result = manage.events_handler(load_event("sqs_s3_test_event.json"), LocalContext("manage"))
    assert result == {"batchItemFailures": []}
    assert handler_services.services.catalog.all_model_names() == []


def test_a_poison_record_fails_alone_and_the_rest_succeed(handler_services):
    handler_services.put("models/mlp/1/model.onnx", builders.onnx_mlp())
    event = load_event("sqs_mixed_with_poison.json")
    result = manage.events_handler(event, LocalContext("manage"))
    # Then only the non-S3 body is reported for retry (and, after maxReceiveCount, the DLQ)
    assert result == {"batchItemFailures": [{"itemIdentifier": event["Records"][1]["messageId"]}]}
    assert handler_services.services.catalog.get_version("mlp", 1).state == "READY"


def test_eventbridge_and_sns_wrapped_notifications_are_understood():
    eventbridge = {"source": "aws.s3", "detail": {"object": {"key": "models/a%2Bb/1/x"}}}
    assert manage.object_keys(eventbridge) == ["models/a+b/1/x"]
    inner = {
        "Records": [{"eventSource": "aws:s3", "s3": {"object": {"key": "models/m/2/model.onnx"}}}]
    }
    sns = {"Type": "Notification", "Message": json.dumps(inner)}
    assert manage.object_keys(sns) == ["models/m/2/model.onnx"]


def test_management_api_through_mangum_with_an_api_gateway_v2_event(handler_services):
    # Given a published model
    handler_services.put("models/mlp/1/model.onnx", builders.onnx_mlp())
    manage.events_handler(load_event("sqs_s3_object_created.json"), LocalContext("manage"))
    # When API Gateway (HTTP API, payload 2.0) invokes the function
    response = manage.api_handler(load_event("apigw_v2_get_models.json"), LocalContext("manage"))
    # Then the answer is TorchServe's list shape
    assert response["statusCode"] == 200
    body = json.loads(response["body"])
    assert body["models"] == [
        {"modelName": "mlp", "modelUrl": f"s3://{handler_services.settings.bucket}/models/mlp/"}
    ]


def test_invalid_config_through_mangum_is_a_400_that_says_why(handler_services):
    handler_services.put("models/mlp/1/model.onnx", builders.onnx_mlp())
    manage.events_handler(load_event("sqs_s3_object_created.json"), LocalContext("manage"))
    response = manage.api_handler(
        load_event("apigw_v2_put_model_invalid.json"), LocalContext("manage")
    )
    assert response["statusCode"] == 400
    assert "num_versions >= 1" in json.loads(response["body"])["error"]


def test_the_scheduled_reconcile_heals_missed_events(handler_services):
    # Given objects whose events were never delivered
    handler_services.put("models/a/1/model.onnx", builders.onnx_mlp())
    handler_services.put("models/b/config.pbtxt", b"version_policy: { all { } }")
    handler_services.put("models/b/1/model.onnx", builders.onnx_mlp())
    handler_services.put("models/b/2/model.onnx", builders.onnx_mlp(seed=2))
    # When the schedule runs the full reconcile
    result = manage.reconcile_handler({"source": "aws.events"}, LocalContext("reconcile"))
    # Then every version is in the catalog with its policy applied
    assert result == {"models": 2}
    catalog = handler_services.services.catalog
    assert [v.state for v in catalog.versions("a")] == ["READY"]
    assert [v.state for v in catalog.versions("b")] == ["READY", "READY"]
