"""template.yaml's invariants: the numbers that must agree with each other and with AWS's
guidance, read from the template as CloudFormation receives it (SAM's own translator).

Each test names the guidance it comes from. Parameters take their defaults, and where a
parameter bounds a number (MaxValue), the bound: a deployer may choose any allowed value.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from lambdaserve.local.template import load_template
from lambdaserve.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
# Lambda's default function timeout, where neither the function nor Globals sets one
LAMBDA_DEFAULT_TIMEOUT_S = 3


@pytest.fixture(scope="module")
def cfn() -> dict[str, Any]:
    from samtranslator.translator.transform import transform

    from tests.unit.test_template import TEMPLATE, _NoManagedPolicies, packaged

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        return dict(transform(packaged(load_template(TEMPLATE)), {}, _NoManagedPolicies()))


def _of(cfn: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in cfn["Resources"].items() if v["Type"] == kind}


def _number(cfn: dict[str, Any], value: Any, bound: str = "Default") -> int:
    """A literal, or a parameter's default (bound="MaxValue": the largest it may be)."""
    if isinstance(value, dict) and "Ref" in value:
        spec = cfn["Parameters"][value["Ref"]]
        return int(spec.get(bound, spec["Default"]))
    return int(value)


def _target(value: Any) -> str:
    """The logical id a Ref / GetAtt names."""
    if "Ref" in value:
        return str(value["Ref"])
    return str(value["Fn::GetAtt"][0])


def _function_timeout(cfn: dict[str, Any], name: str) -> int:
    timeout = cfn["Resources"][name]["Properties"].get("Timeout", LAMBDA_DEFAULT_TIMEOUT_S)
    return _number(cfn, timeout)


def _function_of(cfn: dict[str, Any], function_name: Any) -> str:
    """The function an event source mapping or an integration names (its alias resolved)."""
    name = _target(function_name)
    resource = cfn["Resources"][name]
    if resource["Type"] == "AWS::Lambda::Alias":
        return _target(resource["Properties"]["FunctionName"])
    return name


def _queue_mappings(cfn: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(queue, function, mapping properties) for every SQS event source mapping."""
    found = []
    for mapping in _of(cfn, "AWS::Lambda::EventSourceMapping").values():
        properties = mapping["Properties"]
        queue = _target(properties["EventSourceArn"])
        if cfn["Resources"][queue]["Type"] == "AWS::SQS::Queue":
            found.append((queue, _function_of(cfn, properties["FunctionName"]), properties))
    return found


def test_every_queue_hides_a_message_for_six_times_its_consumers_timeout(cfn):
    """AWS Lambda's guide (using Lambda with Amazon SQS): set the source queue's visibility
    timeout to at least six times the function's timeout, plus the event source mapping's
    MaximumBatchingWindowInSeconds, so a batch that Lambda retries while throttled is not
    delivered a second time meanwhile. The window is taken at its parameter's largest value.

    The GPU queue's consumer is the ECS worker (`lambdaserve worker`), not Lambda: it has no
    function timeout or poller retries, and holds what it receives on a visibility lease; its
    queue hides a message for the worker's whole batch budget (900 s) instead."""
    mappings = _queue_mappings(cfn)
    assert {q for q, _, _ in mappings} == {
        "RepositoryEventsQueue",
        "RequestsQueue",
        "RequestsQueue2",  # priority levels 2 and 3 (PriorityQueues)
        "RequestsQueue3",
    }
    for queue, function, properties in mappings:
        visibility = _number(cfn, cfn["Resources"][queue]["Properties"]["VisibilityTimeout"])
        window = _number(cfn, properties.get("MaximumBatchingWindowInSeconds", 0), "MaxValue")
        needed = 6 * _function_timeout(cfn, function) + window
        assert visibility >= needed, (queue, function, visibility, needed)
    gpu = cfn["Resources"]["GpuRequestsQueue"]["Properties"]
    assert gpu["VisibilityTimeout"] >= 900


def test_every_asynchronous_path_has_a_dead_letter_queue_with_an_alarm(cfn):
    """Amazon SQS's guide (dead-letter queues) and Lambda's (asynchronous invocation): every
    path that retries on its own must end in a dead-letter queue, and a CloudWatch alarm on
    the DLQ's visible messages must say when anything lands there (AWS's recommended alarms:
    ApproximateNumberOfMessagesVisible on a DLQ, threshold 0).

    The asynchronous paths: every queue a consumer reads (the S3 events, the queued requests,
    the GPU queue). Lambda's own asynchronous invocations: only the reconcile schedule, which
    runs again on its next tick and needs no DLQ of its own (a missed run is healed by the
    next one); no code invokes a function with InvocationType=Event."""
    queues = _of(cfn, "AWS::SQS::Queue")
    consumed = {q for q, _, _ in _queue_mappings(cfn)} | {"GpuRequestsQueue"}
    alarms = _of(cfn, "AWS::CloudWatch::Alarm").values()
    alarmed = {
        _target(d["Value"])
        for a in alarms
        if a["Properties"].get("MetricName") == "ApproximateNumberOfMessagesVisible"
        and a["Properties"]["Threshold"] == 0
        and a["Properties"]["ComparisonOperator"] == "GreaterThanThreshold"
        for d in a["Properties"]["Dimensions"]
    }
    for queue in consumed:
        redrive = queues[queue]["Properties"]["RedrivePolicy"]
        dlq = _target(redrive["deadLetterTargetArn"])
        assert dlq in queues and "RedrivePolicy" not in queues[dlq]["Properties"]
        assert dlq in alarmed, f"{queue}'s DLQ {dlq} has no alarm"
        # the alarm of a DLQ tells someone where a topic is given
        [alarm] = [
            a
            for a in alarms
            if a["Properties"].get("MetricName") == "ApproximateNumberOfMessagesVisible"
            and _target(a["Properties"]["Dimensions"][0]["Value"]) == dlq
        ]
        assert "AlarmTopicArn" in json.dumps(alarm["Properties"]["AlarmActions"])
    pattern = re.compile(r"InvocationType\s*=\s*[\"']Event")
    package = ROOT / "layers" / "core" / "lambdaserve"
    assert not [p for p in package.rglob("*.py") if pattern.search(p.read_text())]


def test_api_gateway_answers_within_its_limit_and_the_function_stops_with_it(cfn):
    """API Gateway's quotas: an HTTP API's integration times out at 30 s at most, and the docs
    promise 29 s (docs/server-mode.md: a forwarded request waits LAMBDASERVE_SERVER_WAIT_S,
    25 s, "inside API Gateway's 29 s"). So: the integration's timeout is that 29 s; the
    server-mode wait ends before it, with time left to answer 202; and the infer function's
    own timeout is no shorter (a request API Gateway still waits for is not cut off) and
    ends within a second of it (no work runs on that nobody waits for)."""
    [integration] = _of(cfn, "AWS::ApiGatewayV2::Integration").values()
    limit_ms = integration["Properties"]["TimeoutInMillis"]
    assert limit_ms == 29_000
    assert "inside API Gateway's 29 s" in (ROOT / "docs" / "server-mode.md").read_text()
    assert Settings().server_wait_s <= limit_ms / 1000 - 3
    infer = _function_of(cfn, integration["Properties"]["IntegrationUri"])
    assert infer == "InferFunction"
    timeout = _function_timeout(cfn, infer)
    assert limit_ms / 1000 <= timeout <= limit_ms / 1000 + 1


def test_the_batching_window_and_batch_size_fit_the_consumers_timeout(cfn):
    """Lambda's guide (batching behavior; using Lambda with Amazon SQS): the batching window
    elapses before the invocation, so it counts against the queue's visibility timeout, not
    the function's (the visibility test above adds its largest value); a standard queue's
    batch of more than 10 messages needs a window of at least 1 s; and a batch must be
    processed inside the function's timeout. So: the default batch size needs no window; the
    batcher's own top-up inside the invocation (LAMBDASERVE_TOPUP_WINDOW_S) and its visibility
    lease (LAMBDASERVE_VISIBILITY_LEASE_S) are a small part of its timeout; the batcher's
    timeout covers the synchronous call of the function it hands each batch to; and every
    mapping reports partial batch failures, so one failed request does not retry the batch."""
    settings = Settings()
    for queue, function, properties in _queue_mappings(cfn):
        timeout = _function_timeout(cfn, function)
        size = _number(cfn, properties.get("BatchSize", 10))
        window = _number(cfn, properties.get("MaximumBatchingWindowInSeconds", 0))
        assert size <= 10 or window >= 1, (queue, size, window)
        assert properties["FunctionResponseTypes"] == ["ReportBatchItemFailures"], queue
        if function == "BatcherFunction":
            assert settings.topup_window_s <= timeout / 100
            assert settings.visibility_lease_s <= timeout
    variables = cfn["Resources"]["BatcherFunction"]["Properties"]["Environment"]["Variables"]
    invoked = _target(variables["LAMBDASERVE_INFER_FUNCTION"])
    assert _function_timeout(cfn, "BatcherFunction") >= _function_timeout(cfn, invoked)


def test_every_log_group_has_a_retention(cfn):
    """CloudWatch Logs' guide (changing log data retention): a log group keeps its events
    forever unless it has a retention, and Lambda creates a function's /aws/lambda/<name>
    group without one. So each function logs to a group the stack creates with a retention
    (LoggingConfig), and every log group the stack creates (the functions', the ECS tasks',
    the API's access log) has one."""
    groups = _of(cfn, "AWS::Logs::LogGroup")
    for name, group in groups.items():
        assert group["Properties"].get("RetentionInDays"), name
    for name, function in _of(cfn, "AWS::Lambda::Function").items():
        config = function["Properties"].get("LoggingConfig", {})
        assert "LogGroup" in config, f"{name} logs to a group Lambda creates, kept forever"
        assert _target(config["LogGroup"]) in groups, name
        assert groups[_target(config["LogGroup"])].get("Condition") == function.get("Condition")
    for name, task in _of(cfn, "AWS::ECS::TaskDefinition").items():
        for container in task["Properties"]["ContainerDefinitions"]:
            group = container["LogConfiguration"]["Options"]["awslogs-group"]
            assert _target(group) in groups, name


def test_reserved_and_maximum_concurrency_agree(cfn):
    """Lambda's guide (configuring maximum concurrency for SQS event sources): a mapping's
    MaximumConcurrency (2 at least) above the function's reserved concurrency only throttles
    the extra pollers' batches back to the queue; where both are set, the maximum must not
    exceed the reserved."""
    functions = _of(cfn, "AWS::Lambda::Function")
    mappings = _queue_mappings(cfn)
    assert mappings
    for queue, function, properties in mappings:
        maximum = properties.get("ScalingConfig", {}).get("MaximumConcurrency")
        reserved = functions[function]["Properties"].get("ReservedConcurrentExecutions")
        if maximum is not None:
            assert _number(cfn, maximum) >= 2, queue
        if maximum is not None and reserved is not None:
            assert _number(cfn, maximum) <= _number(cfn, reserved), (queue, function)
