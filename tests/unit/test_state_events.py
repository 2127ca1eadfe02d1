"""Version state changes announced on EventBridge (source ``lambdaserve``, detail-type
``Model Version State Change``), received by a rule's SQS target as a deploy pipeline's
would be; an EventBridge failure never fails the state's write."""

from __future__ import annotations

import json
from dataclasses import replace

from lambdaserve.catalog.state_events import DETAIL_TYPE, EventBridgeAnnouncer
from lambdaserve.catalog.store import Catalog
from lambdaserve.wiring.manage import build_manage_services
from tests import builders
from tests.unit.conftest import InProcessAws

PATTERN = {"source": ["lambdaserve"], "detail-type": [DETAIL_TYPE]}


def pipeline_queue(aws: InProcessAws) -> str:
    """A rule on the default bus with an SQS target: what a deploy pipeline listens on."""
    sqs, events = aws.clients.sqs, aws.clients.events
    url = sqs.create_queue(QueueName="pipeline")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_rule(Name="lambdaserve-states", EventPattern=json.dumps(PATTERN))
    events.put_targets(Rule="lambdaserve-states", Targets=[{"Id": "pipeline", "Arn": arn}])
    return url


def received(aws: InProcessAws, url: str) -> list[dict]:
    found = []
    while messages := aws.clients.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get(
        "Messages"
    ):
        for message in messages:
            found.append(json.loads(message["Body"]))
            aws.clients.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return found


def test_a_published_version_announces_loading_then_ready_then_removed(aws: InProcessAws):
    # Given the manage services announcing on the default bus, and a pipeline's rule
    url = pipeline_queue(aws)
    services = build_manage_services(replace(aws.settings, event_bus="default"), aws.clients)
    # When a version is published, then its objects are deleted
    aws.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    services.registrar.reconcile_model("mlp")
    published = received(aws, url)
    record = Catalog(aws.clients.dynamodb, aws.settings.table).versions("mlp")[0]
    aws.clients.s3.delete_object(Bucket=aws.settings.bucket, Key="models/mlp/1/model.onnx")
    services.registrar.reconcile_model("mlp")
    removed = received(aws, url)
    # Then each change arrives as EventBridge delivers it, with the version's facts
    assert [e["detail"]["state"] for e in published] == ["LOADING", "READY"], published
    ready = published[-1]
    assert ready["source"] == "lambdaserve" and ready["detail-type"] == DETAIL_TYPE
    assert ready["detail"]["model"] == "mlp" and ready["detail"]["version"] == 1
    assert ready["detail"]["previous_state"] == "LOADING"
    assert record.sha256 and ready["detail"]["digest"] == record.sha256, ready["detail"]
    assert [e["detail"]["state"] for e in removed] == ["REMOVED"], removed
    assert removed[0]["detail"]["previous_state"] == "READY"


def test_a_load_failure_where_it_serves_announces_unavailable_with_the_reason(
    aws: InProcessAws,
):
    url = pipeline_queue(aws)
    services = build_manage_services(replace(aws.settings, event_bus="default"), aws.clients)
    aws.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    services.registrar.reconcile_model("mlp")
    received(aws, url)
    catalog = Catalog(
        aws.clients.dynamodb,
        aws.settings.table,
        EventBridgeAnnouncer(aws.clients.events, "default"),
    )
    record = catalog.versions("mlp")[0]
    # When the version fails to load where it serves
    assert catalog.record_load_failure("mlp", 1, record.fingerprint, "RuntimeError: no memory")
    # Then the pipeline hears READY -> UNAVAILABLE, and why
    [event] = received(aws, url)
    assert (event["detail"]["previous_state"], event["detail"]["state"]) == (
        "READY",
        "UNAVAILABLE",
    )
    assert event["detail"]["reason"] == "RuntimeError: no memory"


class Refusing:
    def put_events(self, **_: object) -> dict:
        raise ConnectionError("EventBridge unreachable")


def test_an_unreachable_bus_never_fails_the_write(aws: InProcessAws):
    # Given a catalog whose announcements cannot be sent
    announcer = EventBridgeAnnouncer(Refusing(), "default")
    services = build_manage_services(aws.settings, aws.clients)
    aws.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    services.registrar.reconcile_model("mlp")
    catalog = Catalog(aws.clients.dynamodb, aws.settings.table, announcer)
    record = catalog.versions("mlp")[0]
    # When a state change is written
    written = catalog.record_load_failure("mlp", 1, record.fingerprint, "broken")
    # Then it is written, and the lost event is counted
    assert written and catalog.versions("mlp")[0].state == "UNAVAILABLE"
    assert announcer.failed == 1
