"""Create the stack's stateful resources in an emulator (moto server or LocalStack).

They come from template.yaml (see ``lambdaserve.local.template``): the same bucket, table,
queues, DLQs, queue policy and notification that `sam deploy` creates, under the local names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from lambdaserve.local.template import (
    Resolver,
    deploy_stack,
    load_template,
    notification_configuration,
    stateful_template,
    time_to_live,
)
from lambdaserve.settings import Settings
from lambdaserve.wiring.aws import AwsClients

MAX_RECEIVE_COUNT = 3


@dataclass(frozen=True)
class QueuePair:
    url: str
    arn: str
    dlq_url: str


@dataclass(frozen=True)
class LocalResources:
    bucket: str
    table: str
    repository_events: QueuePair
    requests: QueuePair
    stack_name: str = ""


def local_names(settings: Settings) -> dict[str, str]:
    """Logical id in template.yaml -> the contract's local name."""
    return {
        "CatalogTable": settings.table,
        "RepositoryEventsQueue": settings.repository_events_queue,
        "RepositoryEventsDlq": f"{settings.repository_events_queue}-dlq",
        "RequestsQueue": settings.requests_queue,
        "RequestsDlq": f"{settings.requests_queue}-dlq",
    }


def local_stack_name(settings: Settings) -> str:
    return "lambdaserve-local-" + re.sub(r"[^A-Za-z0-9-]", "-", settings.table)[:100]


def ensure_resources(
    clients: AwsClients, settings: Settings, max_receive_count: int = MAX_RECEIVE_COUNT
) -> LocalResources:
    """Deploy (idempotently) the stateful part of template.yaml under the local names."""
    template = load_template()
    stack_name = local_stack_name(settings)
    parameters = {"ModelBucketName": settings.bucket, "MaxReceiveCount": str(max_receive_count)}
    stateful = stateful_template(template, local_names(settings))
    physical = deploy_stack(clients.client("cloudformation"), stack_name, stateful, parameters)
    events = _queue_pair(clients, physical, "RepositoryEventsQueue", "RepositoryEventsDlq")
    requests = _queue_pair(clients, physical, "RequestsQueue", "RequestsDlq")
    resolver = _resolver(
        settings,
        stateful=stateful,
        parameters=parameters,
        stack_name=stack_name,
        events=events,
        requests=requests,
    )
    _apply_what_emulators_skip(clients, settings, stateful["Resources"], resolver)
    return LocalResources(settings.bucket, settings.table, events, requests, stack_name)


def _queue_pair(clients: AwsClients, physical: dict[str, str], queue: str, dlq: str) -> QueuePair:
    url, dlq_url = (_queue_url(clients, physical[name]) for name in (queue, dlq))
    return QueuePair(url=url, arn=_queue_arn(clients, url), dlq_url=dlq_url)


def _queue_url(clients: AwsClients, physical_id: str) -> str:
    if physical_id.startswith("http"):  # AWS and moto report the URL; be lenient
        return physical_id
    return str(clients.sqs.get_queue_url(QueueName=physical_id)["QueueUrl"])


def _resolver(
    settings: Settings,
    *,
    stateful: dict[str, Any],
    parameters: dict[str, str],
    stack_name: str,
    events: QueuePair,
    requests: QueuePair,
) -> Resolver:
    account = events.arn.split(":")[4]
    refs = {k: str(v.get("Default", "")) for k, v in stateful["Parameters"].items()}
    refs |= parameters | {
        "AWS::Partition": "aws",
        "AWS::Region": settings.region,
        "AWS::AccountId": account,
        "AWS::StackName": stack_name,
        "AWS::URLSuffix": "amazonaws.com",
        "ModelBucket": settings.bucket,
        "CatalogTable": settings.table,
        "RepositoryEventsQueue": events.url,
        "RequestsQueue": requests.url,
    }
    names = local_names(settings)
    attributes = {
        ("ModelBucket", "Arn"): f"arn:aws:s3:::{settings.bucket}",
        ("CatalogTable", "Arn"): f"arn:aws:dynamodb:{settings.region}:{account}:table/"
        + settings.table,
    }
    for logical in ("RepositoryEventsQueue", "RepositoryEventsDlq", "RequestsQueue", "RequestsDlq"):
        attributes[(logical, "QueueName")] = names[logical]
        attributes[(logical, "Arn")] = f"arn:aws:sqs:{settings.region}:{account}:{names[logical]}"
    return Resolver(stateful, refs, attributes)


def _apply_what_emulators_skip(
    clients: AwsClients, settings: Settings, resources: dict[str, Any], resolver: Resolver
) -> None:
    """Policies, bucket notification and TTL from the template (idempotent where applied)."""
    for resource in resources.values():
        properties = resolver.resolve(resource.get("Properties", {}))
        if resource["Type"] == "AWS::SQS::QueuePolicy":
            for url in properties["Queues"]:
                clients.sqs.set_queue_attributes(
                    QueueUrl=url, Attributes={"Policy": json.dumps(properties["PolicyDocument"])}
                )
        elif resource["Type"] == "AWS::S3::BucketPolicy":
            clients.s3.put_bucket_policy(
                Bucket=properties["Bucket"], Policy=json.dumps(properties["PolicyDocument"])
            )
        elif resource["Type"] == "AWS::S3::Bucket":
            clients.s3.put_bucket_notification_configuration(
                Bucket=settings.bucket,
                NotificationConfiguration=notification_configuration(properties),
            )
        elif resource["Type"] == "AWS::DynamoDB::Table":
            _ensure_time_to_live(clients, settings.table, time_to_live(properties))


def _ensure_time_to_live(clients: AwsClients, table: str, ttl: dict[str, Any] | None) -> None:
    if ttl is None:
        return
    current = clients.dynamodb.describe_time_to_live(TableName=table)
    if current["TimeToLiveDescription"].get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
        clients.dynamodb.update_time_to_live(TableName=table, TimeToLiveSpecification=ttl)


def _queue_arn(clients: AwsClients, url: str) -> str:
    attributes = clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return str(attributes["Attributes"]["QueueArn"])
