"""template.yaml with one thing a journey needs taken out: the journey fails, naming it.

Each mutation removes one permission, variable, event source mapping or command from a
copy of the template; the deployed stack is built from that copy and a journey run
through it. It must fail, and its message must name what is missing (the denied action,
the function without a queue, the task that never answered)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from lambdaserve.local.http_api_event import http_api_event
from lambdaserve.local.template import load_template
from tests import builders
from tests.deployed.stack import DeployedStack, deployed

MLP = builders.onnx_mlp(4, 3)
EVENTS = Path(__file__).parents[1] / "events"
Template = dict[str, Any]


def publish_and_infer(stack: DeployedStack) -> None:
    stack.publish("mlp", {"1/model.onnx": MLP})
    event = json.loads((EVENTS / "apigw_v2_infer_json.json").read_text())
    answer = stack.invoke("InferFunction", event)
    assert answer["statusCode"] == 200, answer
    stack.assert_no_denials()


def infer_asynchronously(stack: DeployedStack) -> None:
    stack.publish("mlp", {"1/model.onnx": MLP})
    body = json.loads((EVENTS / "apigw_v2_infer_json.json").read_text())["body"].encode()
    event = http_api_event("POST", "/v2/models/mlp/infer", body)
    event["headers"]["prefer"] = "respond-async"
    accepted = stack.invoke("InferFunction", event)
    status = http_api_event("GET", json.loads(accepted["body"])["status_url"], b"")
    stack.pump(
        "BatcherFunction",
        lambda: bool(stack.invoke("InferFunction", status)["statusCode"] == 200),
        timeout_s=60,
    )


def without_action(function: str, action: str) -> Callable[[Template], None]:
    def mutate(template: Template) -> None:
        for policy in template["Resources"][function]["Properties"]["Policies"]:
            if "Statement" not in policy:
                continue  # a SAM policy template or an !If: see without_policy_template
            for statement in policy.get("Statement", []):
                actions = statement["Action"]
                if isinstance(actions, list) and action in actions:
                    actions.remove(action)
            policy["Statement"] = [
                s for s in policy.get("Statement", []) if s["Action"] not in ([], action)
            ]
        found = json.dumps(template["Resources"][function])
        assert f'"{action}"' not in found, f"{action} is still granted to {function}"

    return mutate


def without_policy_template(function: str, name: str) -> Callable[[Template], None]:
    def mutate(template: Template) -> None:
        policies = template["Resources"][function]["Properties"]["Policies"]
        kept = [p for p in policies if name not in p]
        assert len(kept) < len(policies), f"{function} has no {name}"
        template["Resources"][function]["Properties"]["Policies"] = kept

    return mutate


def without_statement(function: str, comment_marker: str) -> Callable[[Template], None]:
    """``function``'s statement that grants ``comment_marker`` (a condition's value)."""

    def mutate(template: Template) -> None:
        policies = template["Resources"][function]["Properties"]["Policies"]
        kept = [p for p in policies if comment_marker not in json.dumps(p)]
        assert len(kept) == len(policies) - 1, f"{function} has no {comment_marker} statement"
        template["Resources"][function]["Properties"]["Policies"] = kept

    return mutate


def sequence_steps_sync_and_queued(stack: DeployedStack) -> None:
    from tests.deployed.test_sequences import IDLE_US, MODEL, alternate
    from tests.sequence_models import simple_string_dyna_sequence

    stack.publish(MODEL, simple_string_dyna_sequence(MODEL, idle_us=IDLE_US))
    alternate(stack)


def bounded_infer(stack: DeployedStack) -> None:
    """The MLP with one instance stated: each execution takes a slot in the catalog table."""
    stack.publish("mlp", {"1/model.onnx": MLP, "config.pbtxt": b"instance_group [{ count: 1 }]"})
    event = json.loads((EVENTS / "apigw_v2_infer_json.json").read_text())
    answer = stack.invoke("InferFunction", event)
    assert answer["statusCode"] == 200, answer


def without_variable(name: str) -> Callable[[Template], None]:
    def mutate(template: Template) -> None:
        del template["Globals"]["Function"]["Environment"]["Variables"][name]

    return mutate


def queue_at_priority_2(stack: DeployedStack) -> None:
    from tests.deployed.test_priority_queues import queue_at_priority_2 as journey

    journey(stack)


def without_queue_resource(function: str, condition: str) -> Callable[[Template], None]:
    """``function``'s SQS grants less the conditional queue ``condition`` creates."""

    def mutate(template: Template) -> None:
        found = 0
        for policy in template["Resources"][function]["Properties"]["Policies"]:
            for statement in policy.get("Statement", []):
                resources = statement.get("Resource")
                if isinstance(resources, list):
                    kept = [r for r in resources if condition not in json.dumps(r)]
                    found += len(resources) - len(kept)
                    statement["Resource"] = kept
        assert found, f"{function} is granted nothing on {condition}'s queue"

    return mutate


def without_event(function: str, event: str) -> Callable[[Template], None]:
    def mutate(template: Template) -> None:
        del template["Resources"][function]["Properties"]["Events"][event]

    return mutate


def large_async_answer(stack: DeployedStack) -> None:
    from tests.deployed.test_journeys import large_async_answer as journey

    journey(stack)


KMS_KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def capture_under_the_buckets_key(stack: DeployedStack) -> None:
    from tests.deployed.test_capture_key import capture_under_the_buckets_key as journey

    journey(stack)


def roll_out(stack: DeployedStack) -> None:
    from tests.deployed.test_journeys import roll_out as journey

    journey(stack)


@dataclass(frozen=True)
class Mutation:
    name: str
    mutate: Callable[[Template], None]
    journey: Callable[[DeployedStack], None]
    says: str  # what the failure must name
    parameters: dict[str, str] = field(default_factory=dict)  # the stack's, else defaults


MUTATIONS = [
    Mutation(
        "rollouts-no-update-item",
        without_action("RolloutsFunction", "dynamodb:UpdateItem"),
        roll_out,
        "RolloutsFunction was denied dynamodb:UpdateItem",
    ),
    Mutation(
        "manage-no-condition-check",
        without_action("ManageEventsFunction", "dynamodb:ConditionCheckItem"),
        publish_and_infer,
        "ManageEventsFunction was denied dynamodb:ConditionCheckItem",
    ),
    Mutation(
        "infer-no-get-object",
        without_action("InferFunction", "s3:GetObject"),
        publish_and_infer,
        "InferFunction was denied s3:GetObject",
    ),
    Mutation(
        "batcher-no-invoke",
        without_policy_template("BatcherFunction", "LambdaInvokePolicy"),
        infer_asynchronously,
        "BatcherFunction was denied lambda:InvokeFunction",
    ),
    Mutation(
        "manage-no-state-events",
        without_policy_template("ManageEventsFunction", "EventBridgePutEventsPolicy"),
        publish_and_infer,
        "ManageEventsFunction was denied events:PutEvents",
    ),
    Mutation(
        "batch-no-sequence-records",
        # the records' statement alone (the catalog statement excludes SEQUENCE# with NotLike)
        without_statement(
            "InferBatchFunction",
            'ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["SEQUENCE#*"]',
        ),
        sequence_steps_sync_and_queued,
        "InferBatchFunction was denied dynamodb:GetItem",
    ),
    Mutation(
        "infer-no-inflight-slots",
        # the slot statement alone (the catalog statement excludes INFLIGHT# with NotLike)
        without_statement(
            "InferFunction", 'ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["INFLIGHT#*"]'
        ),
        bounded_infer,
        "InferFunction was denied dynamodb:UpdateItem",
    ),
    Mutation(
        "no-table-variable",
        without_variable("LAMBDASERVE_TABLE"),
        publish_and_infer,
        "was denied dynamodb:",
    ),
    Mutation(
        "manage-no-queue",
        without_event("ManageEventsFunction", "RepositoryEvents"),
        publish_and_infer,
        "template.yaml maps no queue to ManageEventsFunction",
    ),
    Mutation(
        "batcher-no-results-put",
        without_action("BatcherFunction", "s3:PutObject"),
        large_async_answer,
        "BatcherFunction was denied s3:PutObject",
    ),
    Mutation(
        "no-kms-key-variable",
        without_variable("LAMBDASERVE_KMS_KEY_ARN"),
        capture_under_the_buckets_key,
        "this stack encrypts with no KMS key",
        {"ModelBucketKmsKeyArn": KMS_KEY},
    ),
    Mutation(
        "infer-no-priority-2-queue",
        without_queue_resource("InferFunction", "PriorityLevel2"),
        queue_at_priority_2,
        "InferFunction was denied sqs:GetQueueUrl",
        {"PriorityQueues": "2"},
    ),
]


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_a_journey_fails_naming_what_the_template_lacks(mutation: Mutation, tmp_path: Path):
    # Given template.yaml less one thing a journey needs
    template = copy.deepcopy(load_template())
    mutation.mutate(template)
    # When the journey runs through the stack deployed from it
    # (a denial surfaces as the journey's assertion or as the harness's own SDK call's error)
    with (
        pytest.raises(Exception) as failure,
        deployed(tmp_path, mutation.parameters, template=template) as stack,
    ):
        mutation.journey(stack)
    # Then it fails, naming what is missing
    assert mutation.says in str(failure.value), str(failure.value)[-3000:]


def test_the_template_lambdaserve_template_names_is_the_one_deployed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # Given a changed template named by LAMBDASERVE_TEMPLATE (as make test-grants runs the
    # journeys against each template less one grant)
    template = copy.deepcopy(load_template())
    without_variable("LAMBDASERVE_KMS_KEY_ARN")(template)
    changed = tmp_path / "template.yaml"
    changed.write_text(yaml.safe_dump(template, sort_keys=False))
    monkeypatch.setenv("LAMBDASERVE_TEMPLATE", str(changed))
    # When the stack is deployed with no template given
    with deployed(tmp_path / "stack") as stack:
        # Then its functions are that template's
        assert "LAMBDASERVE_KMS_KEY_ARN" not in stack.shape.functions["InferFunction"].environment
        assert "LAMBDASERVE_TABLE" in stack.shape.functions["InferFunction"].environment
