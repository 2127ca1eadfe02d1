"""What the deployed stack (``deployed_stack``) stands on: the names the emulated resources
get, each function's own /tmp, the event source mapping's SQS client, and the small process
helpers."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from lambdaserve.local.resources import LocalResources, QueuePair
from lambdaserve.local.stack_shape import Names
from lambdaserve.local.template import Resolver
from lambdaserve.settings import Settings
from lambdaserve.wiring.aws import AwsClients

REGION = "us-east-1"
STACK = "lambdaserve-deployed"
LOAD_BALANCED_PORT = 8000  # template.yaml's ServerModeHttpTargets forward to it


class MappingClient:
    """SQS as an event source mapping calls it: under the function's role, but for the
    pump's shortcut to a failed message's retry (``change_message_visibility``: Lambda
    waits out the visibility timeout instead, which needs no permission of the role)."""

    def __init__(self, role: Any, harness: Any) -> None:
        self._role = role
        self.change_message_visibility = harness.change_message_visibility

    def __getattr__(self, name: str) -> Any:
        return getattr(self._role, name)


def with_conditional_queues(
    clients: AwsClients,
    names: Names,
    template: Mapping[str, Any],
    values: Mapping[str, str],
) -> tuple[Names, dict[str, QueuePair]]:
    """The queues whose condition ``values`` make true (the GPU service's, priority levels 2
    and 3: not in the local stack's stateful part), each with its DLQ: created with the
    template's attributes, named for the stack; with each queue's URL and ARN."""
    resources = template["Resources"]
    conditions = Resolver(template, values, {})
    wanted = [
        logical
        for logical, resource in resources.items()
        if resource["Type"] == "AWS::SQS::Queue"
        and "Condition" in resource
        and conditions.condition(resource["Condition"])
    ]
    # dead-letter queues first: a queue's redrive policy names its DLQ's ARN
    wanted.sort(key=lambda logical: "RedrivePolicy" in resources[logical].get("Properties", {}))
    urls: dict[str, str] = {}
    arns: dict[tuple[str, str], str] = {}
    for logical in wanted:
        name = f"{STACK}-{logical}"
        resolver = Resolver(template, values, arns)
        properties = resolver.resolve(resources[logical].get("Properties", {}))
        attributes = {
            key: json.dumps(value) if isinstance(value, dict) else str(value)
            for key, value in properties.items()
            if key in ("VisibilityTimeout", "MessageRetentionPeriod", "RedrivePolicy")
        }
        urls[logical] = clients.sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        arns[(logical, "Arn")] = f"arn:aws:sqs:{REGION}:{names.account}:{name}"
        arns[(logical, "QueueName")] = name
    queues = {}
    for logical in wanted:
        redrive = resources[logical].get("Properties", {}).get("RedrivePolicy", {})
        target = redrive.get("deadLetterTargetArn", {}).get("Fn::GetAtt", [""])[0]
        dlq = urls.get(target, "")
        queues[logical] = QueuePair(url=urls[logical], arn=arns[(logical, "Arn")], dlq_url=dlq)
    refs = dict(names.refs) | urls
    return Names(names.stack, names.region, names.account, refs, dict(names.attributes) | arns), (
        queues
    )


def under_own_tmp(
    variables: Mapping[str, str], literal: frozenset[str], scratch: Path
) -> dict[str, str]:
    """The template's own paths under ``/tmp/`` (not a parameter's value) moved into
    ``scratch``, each function's or task's own /tmp."""
    return {
        name: str(scratch) + value.removeprefix("/tmp")
        if name in literal and value.startswith("/tmp/")
        else value
        for name, value in variables.items()
    }


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def tail(path: str | Path) -> str:
    return Path(path).read_text(errors="replace")[-4000:]


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def emulated_names(
    settings: Settings, resources: LocalResources, ports: Mapping[int, int]
) -> Names:
    account = resources.requests.arn.split(":")[4]
    refs = {
        "ModelBucket": settings.bucket,
        "CatalogTable": settings.table,
        "RepositoryEventsQueue": resources.repository_events.url,
        "RequestsQueue": resources.requests.url,
    }
    attributes = {}
    for logical, pair in (
        ("RepositoryEventsQueue", resources.repository_events),
        ("RequestsQueue", resources.requests),
    ):
        attributes[(logical, "QueueName")] = pair.arn.rsplit(":", 1)[1]
        attributes[(logical, "Arn")] = pair.arn
    # the load balancer forwards to the server-mode task's HTTP port, published here
    balanced = f"127.0.0.1:{ports[LOAD_BALANCED_PORT]}"
    attributes[("ServerModeLoadBalancer", "DNSName")] = balanced
    return Names(STACK, REGION, account, refs, attributes)
