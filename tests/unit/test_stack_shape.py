"""template.yaml read as sam deploy makes it: each function and task's shape, resolved."""

from __future__ import annotations

import json

import pytest

from lambdaserve.local.sam_translation import parameter_values, transformed
from lambdaserve.local.stack_shape import Names, read_shape
from lambdaserve.local.template import TemplateError, load_template

NAMES = Names(
    stack="stk",
    region="eu-west-1",
    account="123456789012",
    refs={"ModelBucket": "my-models", "CatalogTable": "my-catalog"},
    attributes={("RequestsQueue", "QueueName"): "my-requests"},
)
EVERYTHING = {
    "EnablePythonModels": "true",
    "EnableServerMode": "true",
    "EnableGpuService": "true",
    "GpuImageUri": "gpu:1",
    "ServerModeImageUri": "serve:1",
    "ServerModeVpcId": "vpc-1",
    "ServerModeSubnetIds": "subnet-1,subnet-2",
    "GpuSubnetIds": "subnet-1",
}


@pytest.fixture(scope="module")
def cloudformation() -> dict:
    return transformed(load_template(), "eu-west-1")


@pytest.mark.parametrize("given", [{}, EVERYTHING], ids=["defaults", "everything"])
def test_every_function_and_task_resolves_to_plain_values(cloudformation, given):
    # Given the template through SAM's translator, for the defaults and for every option on
    shape = read_shape(cloudformation, parameter_values(load_template(), given), NAMES)
    # Then every function and task comes out with no intrinsic left in what it is started with
    started = [*shape.functions.values(), *shape.tasks.values()]
    for thing in started:
        text = json.dumps([dict(thing.environment), thing.role.policies])
        assert "Fn::" not in text and '"Ref"' not in text, thing.logical
    assert {"InferFunction", "ManageEventsFunction", "BatcherFunction"} <= set(shape.functions)
    assert bool(shape.tasks) == bool(given)


def test_a_function_gets_the_emulated_names_its_handler_limits_and_queue(cloudformation):
    # Given the defaults
    shape = read_shape(cloudformation, parameter_values(load_template(), {}), NAMES)
    # When the infer and batcher functions are read
    infer, batcher = shape.function("InferFunction"), shape.function("BatcherFunction")
    # Then the names the harness gave are what their environment says
    assert infer.environment["LAMBDASERVE_BUCKET"] == "my-models"
    assert infer.environment["LAMBDASERVE_TABLE"] == "my-catalog"
    assert infer.environment["LAMBDASERVE_REQUESTS_QUEUE"] == "my-requests"
    assert infer.handler == "app.api_handler" and infer.source == "functions/infer/Dockerfile"
    assert batcher.source == "functions/batcher" and batcher.handler == "app.handler"
    # and the batcher is fed by the requests queue, reporting failures item by item
    (source,) = batcher.sources
    assert source.queue == "RequestsQueue" and source.reports_item_failures
    # and a role's policy names the given table's ARN
    policies = json.dumps(infer.role.policies)
    assert "arn:aws:dynamodb:eu-west-1:123456789012:table/my-catalog" in policies


def test_a_condition_that_is_false_deploys_nothing_and_says_so(cloudformation):
    shape = read_shape(cloudformation, parameter_values(load_template(), {}), NAMES)
    with pytest.raises(TemplateError, match="GpuTaskDefinition"):
        shape.task("GpuTaskDefinition")
    with pytest.raises(TemplateError, match="NoSuchParameter"):
        parameter_values(load_template(), {"NoSuchParameter": "1"})


def test_a_parameter_set_a_rule_refuses_is_refused_with_the_rules_words(cloudformation):
    # Given server mode asked for without the network it needs (the ServerModeNeedsANetwork rule)
    given = parameter_values(load_template(), {"EnableServerMode": "true"})
    # When the shape is read / Then it is refused as CloudFormation would, saying why
    with pytest.raises(TemplateError, match="ServerModeNeedsANetwork"):
        read_shape(cloudformation, given, NAMES)
