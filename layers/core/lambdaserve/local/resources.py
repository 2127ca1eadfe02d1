"""Create the stack's stateful resources in an emulator (moto server or LocalStack)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from botocore.exceptions import ClientError

from lambdaserve.aws import AwsClients
from lambdaserve.catalog import table_definition
from lambdaserve.settings import Settings

MAX_RECEIVE_COUNT = 3
VISIBILITY_TIMEOUT_S = 30


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


def ensure_resources(
    clients: AwsClients, settings: Settings, max_receive_count: int = MAX_RECEIVE_COUNT
) -> LocalResources:
    """Create (idempotently) bucket, table, queues with DLQs, and the bucket notification."""
    _ensure_bucket(clients, settings.bucket)
    _ensure_table(clients, settings.table)
    events = _ensure_queue_pair(clients, settings.repository_events_queue, max_receive_count)
    requests = _ensure_queue_pair(clients, settings.requests_queue, max_receive_count)
    _allow_bucket_to_send(clients, events, settings.bucket)
    clients.s3.put_bucket_notification_configuration(
        Bucket=settings.bucket,
        NotificationConfiguration={
            "QueueConfigurations": [
                {
                    "Id": "repository-events",
                    "QueueArn": events.arn,
                    "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"],
                    "Filter": {
                        "Key": {
                            "FilterRules": [{"Name": "prefix", "Value": settings.models_prefix}]
                        }
                    },
                }
            ]
        },
    )
    return LocalResources(settings.bucket, settings.table, events, requests)


def _ensure_bucket(clients: AwsClients, bucket: str) -> None:
    try:
        clients.s3.create_bucket(Bucket=bucket)
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise


def _ensure_table(clients: AwsClients, table: str) -> None:
    try:
        clients.dynamodb.create_table(**table_definition(table))
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceInUseException":
            raise
    clients.dynamodb.get_waiter("table_exists").wait(
        TableName=table, WaiterConfig={"Delay": 1, "MaxAttempts": 30}
    )
    # Async results expire through TTL on expires_at (catalog items never set it).
    try:
        clients.dynamodb.update_time_to_live(
            TableName=table,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"},
        )
    except ClientError as exc:
        if "already enabled" not in str(exc).lower():
            raise


def _ensure_queue_pair(clients: AwsClients, name: str, max_receive_count: int) -> QueuePair:
    sqs = clients.sqs
    dlq_url = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn = _queue_arn(clients, dlq_url)
    url = sqs.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": str(VISIBILITY_TIMEOUT_S),
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)}
            ),
        },
    )["QueueUrl"]
    return QueuePair(url=url, arn=_queue_arn(clients, url), dlq_url=dlq_url)


def _queue_arn(clients: AwsClients, url: str) -> str:
    attributes = clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return str(attributes["Attributes"]["QueueArn"])


def _allow_bucket_to_send(clients: AwsClients, queue: QueuePair, bucket: str) -> None:
    """The queue policy S3 needs to deliver notifications (enforced by LocalStack/AWS)."""
    statement = {
        "Effect": "Allow",
        "Principal": {"Service": "s3.amazonaws.com"},
        "Action": "sqs:SendMessage",
        "Resource": queue.arn,
        "Condition": {"ArnLike": {"aws:SourceArn": f"arn:aws:s3:::{bucket}"}},
    }
    clients.sqs.set_queue_attributes(
        QueueUrl=queue.url,
        Attributes={"Policy": json.dumps({"Version": "2012-10-17", "Statement": [statement]})},
    )
