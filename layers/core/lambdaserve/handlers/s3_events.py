"""S3 event notifications as the repository-events queue delivers them: direct, wrapped in
SNS, or EventBridge-shaped; the object keys they name."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.utilities.data_classes import S3Event
from aws_lambda_powertools.utilities.data_classes.s3_event import S3EventBridgeNotificationEvent

from lambdaserve.catalog.repository import decode_event_key


def object_keys(body: dict[str, Any]) -> list[str]:
    """Object keys in an SQS body: an S3 notification, SNS-wrapped, or EventBridge-shaped."""
    if body.get("Event") == "s3:TestEvent":
        return []
    if body.get("Type") == "Notification" and "Message" in body:
        return object_keys(json.loads(body["Message"]))
    if body.get("source") == "aws.s3" and "detail" in body:
        return [S3EventBridgeNotificationEvent(body).detail.object.key]
    if "Records" in body:
        # S3Object.key is the raw, URL-encoded key of the notification.
        return [decode_event_key(record.s3.get_object.key) for record in S3Event(body).records]
    raise ValueError(f"not an S3 event notification: keys {sorted(body)}")
