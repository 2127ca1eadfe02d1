"""template.yaml, read for the local stack: its stateful part, deployed into an emulator.

`sam deploy` creates the bucket, table, queues and notification from template.yaml; the
local stack must not keep a second hand-written list that can drift. So it takes the
stateful resources out of the same file, gives them the local names, deploys them through
the emulator's CloudFormation, and then applies what an emulator's CloudFormation may skip
(moto ignores the bucket notification and TTL): both are read from the template too.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from lambdaserve.errors import LambdaServeError

# Not the bucket policy: it denies every request that is not over TLS, and the local
# emulator's endpoint is plain HTTP (moto enforces bucket policies, so nothing would pass).
STATEFUL_TYPES = frozenset(
    {
        "AWS::S3::Bucket",
        "AWS::DynamoDB::Table",
        "AWS::SQS::Queue",
        "AWS::SQS::QueuePolicy",
    }
)
_SUB_NAMES = re.compile(r"\$\{([A-Za-z0-9]+)(?:\.[A-Za-z]+)?\}")


class TemplateError(LambdaServeError):
    """template.yaml is missing, unreadable, or its stack could not be deployed."""


class _CfnLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short tags (!Ref, !GetAtt, !Sub, ...) as long forms."""


def _intrinsic(loader: _CfnLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = str(value).split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    return {"Ref" if suffix == "Ref" else f"Fn::{suffix}": value}


_CfnLoader.add_multi_constructor("!", _intrinsic)


def checkout_root() -> Path:
    """The repository this package is installed from (editable): template.yaml, functions/."""
    return Path(__file__).resolve().parents[4]


def template_path() -> Path:
    """template.yaml at the repository root (``LAMBDASERVE_TEMPLATE`` overrides)."""
    given = os.environ.get("LAMBDASERVE_TEMPLATE")
    path = Path(given) if given else checkout_root() / "template.yaml"
    if not path.is_file():
        raise TemplateError(
            f"no template.yaml at {path}: run from a checkout, or set LAMBDASERVE_TEMPLATE"
        )
    return path


def load_template(path: Path | None = None) -> dict[str, Any]:
    """The template as a dict, short tags turned into their long forms."""
    document = yaml.load((path or template_path()).read_text(), Loader=_CfnLoader)
    if not isinstance(document, dict) or "Resources" not in document:
        raise TemplateError("template.yaml has no Resources")
    return document


def _references(node: Any) -> Iterator[str]:
    """Logical names a fragment refers to: Ref, GetAtt, Sub, If conditions, Condition."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Ref" and isinstance(value, str):
                yield value
            elif key == "Fn::GetAtt":
                yield value[0]
            elif key == "Fn::Sub":
                text = value if isinstance(value, str) else value[0]
                yield from _SUB_NAMES.findall(text)
            elif key == "Fn::If":
                yield value[0]
            elif key == "Condition" and isinstance(value, str):
                yield value  # a resource's condition; a policy's Condition is a mapping
            yield from _references(value)
    elif isinstance(node, list):
        for item in node:
            yield from _references(item)


def stateful_template(template: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """The unconditional stateful resources, renamed, with what they refer to.

    ``names`` maps a logical id to the physical name it gets locally (the contract's
    resource names); the bucket is named through the ``ModelBucketName`` parameter so
    that the queue policy follows.
    """
    resources = {
        logical: json.loads(json.dumps(resource))
        for logical, resource in template["Resources"].items()
        if resource["Type"] in STATEFUL_TYPES and "Condition" not in resource
    }
    for logical, name in names.items():
        properties = resources[logical].setdefault("Properties", {})
        kind = resources[logical]["Type"]
        if kind == "AWS::SQS::Queue":
            properties["QueueName"] = name
        elif kind == "AWS::DynamoDB::Table":
            properties["TableName"] = name
    wanted = set(resources)
    pending = list(_references(resources))
    while pending:
        name = pending.pop()
        if name in wanted:
            continue
        wanted.add(name)
        pending.extend(_references(template.get("Conditions", {}).get(name, {})))
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": "lambdaserve local stack: the stateful part of template.yaml",
        "Parameters": {k: v for k, v in template.get("Parameters", {}).items() if k in wanted},
        "Conditions": {k: v for k, v in template.get("Conditions", {}).items() if k in wanted},
        "Resources": resources,
    }


def deploy_stack(
    cloudformation: Any,
    stack_name: str,
    body: Mapping[str, Any],
    parameters: Mapping[str, str],
    timeout_s: float = 120.0,
) -> dict[str, str]:
    """Create or update the stack and wait; returns logical id -> physical id."""
    arguments = {
        "StackName": stack_name,
        "TemplateBody": json.dumps(body),
        "Parameters": [{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
    }
    status = _stack_status(cloudformation, stack_name)
    if status in ("ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "CREATE_FAILED", "DELETE_FAILED"):
        cloudformation.delete_stack(StackName=stack_name)
        _wait(cloudformation, stack_name, timeout_s)
        status = None
    if status is None or status == "DELETE_COMPLETE":
        cloudformation.create_stack(**arguments)
    else:
        try:
            cloudformation.update_stack(**arguments)
        except cloudformation.exceptions.ClientError as exc:
            if "No updates are to be performed" not in str(exc):
                raise
    final = _wait(cloudformation, stack_name, timeout_s)
    if final not in ("CREATE_COMPLETE", "UPDATE_COMPLETE"):
        failures = _failures(cloudformation, stack_name)
        raise TemplateError(f"local stack {stack_name} ended {final}: {failures}")
    resources = cloudformation.describe_stack_resources(StackName=stack_name)["StackResources"]
    return {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in resources
        if r.get("LogicalResourceId") and r.get("PhysicalResourceId")
    }


def _stack_status(cloudformation: Any, stack_name: str) -> str | None:
    try:
        stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    except cloudformation.exceptions.ClientError as exc:
        if "does not exist" in str(exc):
            return None
        raise
    return str(stacks[0]["StackStatus"]) if stacks else None


def _wait(cloudformation: Any, stack_name: str, timeout_s: float) -> str | None:
    deadline = time.monotonic() + timeout_s
    while True:
        status = _stack_status(cloudformation, stack_name)
        if status is None or not status.endswith("IN_PROGRESS"):
            return status
        if time.monotonic() > deadline:
            raise TemplateError(f"local stack {stack_name} still {status} after {timeout_s}s")
        time.sleep(0.2)


def _failures(cloudformation: Any, stack_name: str) -> str:
    events = cloudformation.describe_stack_events(StackName=stack_name)["StackEvents"]
    return "; ".join(
        f"{e['LogicalResourceId']}: {e.get('ResourceStatusReason', '')}"
        for e in events
        if e["ResourceStatus"].endswith("FAILED")
    )


def notification_configuration(bucket_properties: Mapping[str, Any]) -> dict[str, Any]:
    """A bucket's (resolved) CloudFormation NotificationConfiguration in the S3 API's form."""
    declared = bucket_properties.get("NotificationConfiguration", {})
    configurations = []
    for index, entry in enumerate(declared.get("QueueConfigurations", [])):
        rules = entry.get("Filter", {}).get("S3Key", {}).get("Rules", [])
        configuration: dict[str, Any] = {
            "Id": f"queue-{index}",
            "QueueArn": entry["Queue"],
            "Events": [entry["Event"]],
        }
        if rules:
            configuration["Filter"] = {
                "Key": {"FilterRules": [{"Name": r["Name"], "Value": r["Value"]} for r in rules]}
            }
        configurations.append(configuration)
    return {"QueueConfigurations": configurations}


def time_to_live(table_properties: Mapping[str, Any]) -> dict[str, Any] | None:
    """A table's (resolved) TimeToLiveSpecification in the DynamoDB API's form, if any."""
    spec = table_properties.get("TimeToLiveSpecification")
    if not spec:
        return None
    return {"AttributeName": spec["AttributeName"], "Enabled": bool(spec["Enabled"])}


_NO_VALUE = object()


class Resolver:
    """Evaluates the intrinsics of a template fragment from known values.

    Enough for the policies an emulator's CloudFormation skips: Ref, GetAtt, Sub, If,
    Join, Equals/Not/And/Or conditions.
    """

    def __init__(
        self,
        template: Mapping[str, Any],
        refs: Mapping[str, str],
        attributes: Mapping[tuple[str, str], str],
    ) -> None:
        self._conditions = template.get("Conditions", {})
        self._refs = dict(refs)
        self._attributes = dict(attributes)

    def condition(self, name: str) -> bool:
        return bool(self.resolve(self._conditions[name]))

    def resolve(self, node: Any) -> Any:
        """``node`` with every intrinsic evaluated; ``AWS::NoValue`` entries dropped."""
        if isinstance(node, list):
            items = (self.resolve(item) for item in node)
            return [item for item in items if item is not _NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((key, value),) = node.items()
            function = self._functions().get(key)
            if function is not None:
                return function(value)
        resolved = {k: self.resolve(v) for k, v in node.items()}
        return {k: v for k, v in resolved.items() if v is not _NO_VALUE}

    def _functions(self) -> dict[str, Callable[[Any], Any]]:
        return {
            "Ref": self._ref,
            "Fn::GetAtt": lambda v: self._attribute(v[0], v[1]),
            "Fn::Sub": self._sub,
            "Fn::If": lambda v: self.resolve(v[1] if self.condition(v[0]) else v[2]),
            "Fn::Join": lambda v: str(v[0]).join(str(x) for x in self.resolve(v[1])),
            "Fn::Equals": lambda v: str(self.resolve(v[0])) == str(self.resolve(v[1])),
            "Fn::Not": lambda v: not self.resolve(v[0]),
            "Fn::And": lambda v: all(self.resolve(v)),
            "Fn::Or": lambda v: any(self.resolve(v)),
            "Condition": self.condition,
        }

    def _ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return _NO_VALUE
        if name not in self._refs:
            raise TemplateError(f"template.yaml: no local value for Ref {name}")
        return self._refs[name]

    def _attribute(self, logical: str, attribute: str) -> str:
        if (logical, attribute) not in self._attributes:
            raise TemplateError(f"template.yaml: no local value for {logical}.{attribute}")
        return self._attributes[(logical, attribute)]

    def _sub(self, value: Any) -> str:
        text, variables = (value, {}) if isinstance(value, str) else value
        resolved = {k: str(self.resolve(v)) for k, v in variables.items()}

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in resolved:
                return resolved[name]
            if "." in name:
                logical, attribute = name.split(".", 1)
                return self._attribute(logical, attribute)
            return str(self._ref(name))

        return re.sub(r"\$\{([A-Za-z0-9:.]+)\}", replace, str(text))
