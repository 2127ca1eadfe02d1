"""The local stack is deployed from template.yaml, not from a second list of resources."""

from __future__ import annotations

import json

import orjson
import pytest

from lambdaserve.local.resources import ensure_resources, local_names
from lambdaserve.local.template import (
    Resolver,
    TemplateError,
    load_template,
    stateful_template,
)
from lambdaserve.queued.submit import AsyncSubmitter
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.settings import Settings
from lambdaserve.wiring.inference import build_model_server
from lambdaserve.wiring.queues import build_queue_services
from tests import builders


@pytest.fixture(scope="module")
def template():
    return load_template()


def test_the_stateful_part_is_the_templates_bucket_table_queues_and_queue_policy(template):
    # Given the SAM template
    # When the local stack takes its stateful part
    part = stateful_template(template, local_names(Settings()))
    # Then it has exactly the unconditional bucket, table, queues and the queue policy
    assert set(part["Resources"]) == {
        "ModelBucket",
        "CatalogTable",
        "RepositoryEventsQueue",
        "RepositoryEventsDlq",
        "RequestsQueue",
        "RequestsDlq",
        "RepositoryEventsQueuePolicy",
    }
    # under the contract's local names, with the parameters and conditions they use
    assert part["Resources"]["RequestsQueue"]["Properties"]["QueueName"] == "lambdaserve-requests"
    assert part["Resources"]["CatalogTable"]["Properties"]["TableName"] == "lambdaserve-catalog"
    assert {"ModelBucketName", "MaxReceiveCount"} <= set(part["Parameters"])
    assert "GpuAmiId" not in part["Parameters"]  # an SSM-typed parameter an emulator lacks
    assert {"NamedBucket", "UseKms"} <= set(part["Conditions"])
    # and the template itself is left as it was
    assert "QueueName" not in template["Resources"]["RequestsQueue"]["Properties"]


def test_the_emulator_gets_what_the_template_declares(aws, template):
    # Given resources deployed from the template (by the aws fixture, through CloudFormation)
    sqs, settings = aws.clients.sqs, aws.settings
    declared = template["Resources"]
    # Then queues carry the template's visibility timeout and redrive policy
    attributes = sqs.get_queue_attributes(
        QueueUrl=aws.resources.requests.url, AttributeNames=["All"]
    )["Attributes"]
    assert attributes["VisibilityTimeout"] == str(
        declared["RequestsQueue"]["Properties"]["VisibilityTimeout"]
    )
    redrive = json.loads(attributes["RedrivePolicy"])
    assert redrive["deadLetterTargetArn"].endswith(":lambdaserve-requests-dlq")
    assert int(redrive["maxReceiveCount"]) == settings.max_receive_count
    # and what moto's CloudFormation skips was applied from the template too
    notification = aws.clients.s3.get_bucket_notification_configuration(Bucket=settings.bucket)
    assert {e for c in notification["QueueConfigurations"] for e in c["Events"]} == {
        "s3:ObjectCreated:*",
        "s3:ObjectRemoved:*",
    }
    assert {c["QueueArn"] for c in notification["QueueConfigurations"]} == {
        aws.resources.repository_events.arn
    }
    ttl = aws.clients.dynamodb.describe_time_to_live(TableName=settings.table)
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "expires_at"
    policy = json.loads(
        sqs.get_queue_attributes(
            QueueUrl=aws.resources.repository_events.url, AttributeNames=["Policy"]
        )["Attributes"]["Policy"]
    )
    (statement,) = policy["Statement"]
    assert statement["Condition"]["ArnLike"]["aws:SourceArn"] == f"arn:aws:s3:::{settings.bucket}"
    assert statement["Resource"] == aws.resources.repository_events.arn


def test_deploying_again_changes_nothing(aws):
    # Given a deployed local stack
    # When it is ensured again (a restarted `lambdaserve dev` against LocalStack)
    again = ensure_resources(aws.clients, aws.settings)
    # Then the same resources are returned
    assert again == aws.resources


def test_the_resolver_evaluates_subs_conditions_and_drops_no_value(template):
    resolver = Resolver(
        template,
        {"ModelBucketName": "", "ModelBucketKmsKeyArn": "", "AWS::StackName": "s"},
        {("ModelBucket", "Arn"): "arn:aws:s3:::b"},
    )
    assert resolver.resolve({"Fn::Sub": "${ModelBucket.Arn}/models/*"}) == "arn:aws:s3:::b/models/*"
    assert resolver.resolve({"Fn::Sub": ["${X}-y", {"X": {"Ref": "AWS::StackName"}}]}) == "s-y"
    assert resolver.condition("UseKms") is False
    assert resolver.resolve(
        {"a": {"Fn::If": ["UseKms", 1, {"Ref": "AWS::NoValue"}]}, "b": [{"Ref": "AWS::NoValue"}]}
    ) == {"b": []}
    with pytest.raises(TemplateError, match="Ref Unknown"):
        resolver.resolve({"Ref": "Unknown"})


GPU_CONFIG = b"""
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
instance_group [ { kind: KIND_GPU } ]
"""


@pytest.mark.parametrize(("config", "queue"), [(GPU_CONFIG, "gpu"), (None, "cpu")])
def test_async_requests_for_gpu_models_go_to_the_gpu_queue(aws, config, queue):
    # Given a GPU queue and a model whose config asks (or not) for KIND_GPU
    sqs = aws.clients.sqs
    gpu_url = sqs.create_queue(QueueName="lambdaserve-gpu-requests")["QueueUrl"]
    settings = Settings(
        work_dir=aws.settings.work_dir, gpu_requests_queue="lambdaserve-gpu-requests"
    )
    if config:
        aws.put("models/mlp/config.pbtxt", config)
    aws.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    aws.services.registrar.reconcile_model("mlp")
    services = build_queue_services(settings, aws.clients)
    server = build_model_server(settings, aws.clients)
    submitter = AsyncSubmitter(
        InferenceDataPlane(lambda: server),
        services.results,
        services.payloads,
        sqs,
        services.requests_queue_url,
        gpu_queue_url=services.gpu_queue_url,
    )
    body = orjson.dumps(
        {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [0.0] * 4}]}
    )
    # When a request is submitted asynchronously
    request_id = submitter.submit("mlp", None, body, None)
    # Then it is queued where the model runs
    expected = gpu_url if queue == "gpu" else aws.resources.requests.url
    other = aws.resources.requests.url if queue == "gpu" else gpu_url
    (message,) = sqs.receive_message(QueueUrl=expected, MaxNumberOfMessages=10)["Messages"]
    assert json.loads(message["Body"])["id"] == request_id
    assert "Messages" not in sqs.receive_message(QueueUrl=other, MaxNumberOfMessages=10)
