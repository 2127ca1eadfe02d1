"""The IAM actions AWS authorizes for each call the stack makes, whatever moto names the call.

moto names an S3 call's action by its API operation from 5.2.6 on (``s3:ListObjectsV2``), and by
its own table before (``s3:ListBucket``); AWS's Service Authorization Reference names neither
the operation nor moto: ListObjectsV2 is authorized as ``s3:ListBucket``, HeadObject as
``s3:GetObject``, a DeleteObjects as ``s3:DeleteObject`` on each key it names, a CopyObject as
``s3:GetObject`` on its source and ``s3:PutObject`` on its target. ``ACTIONS`` is that table, one
row per name a moto release may give; ``authorizations`` adds the per-key and per-source rules.
So a moto release that renames an operation changes nothing here (tests/unit/test_iam_actions.py
has a case per row).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import unquote

# moto's name for a call -> the IAM action AWS authorizes (where the two differ)
ACTIONS: Mapping[str, str] = {
    # S3 (moto >= 5.2.6 names the API operation)
    "s3:ListObjects": "s3:ListBucket",
    "s3:ListObjectsV2": "s3:ListBucket",
    "s3:HeadBucket": "s3:ListBucket",
    "s3:HeadObject": "s3:GetObject",
    "s3:ListObjectVersions": "s3:ListBucketVersions",
    "s3:ListMultipartUploads": "s3:ListBucketMultipartUploads",
    "s3:ListParts": "s3:ListMultipartUploadParts",
    "s3:CreateMultipartUpload": "s3:PutObject",
    "s3:UploadPart": "s3:PutObject",
    "s3:CompleteMultipartUpload": "s3:PutObject",
    "s3:ListBuckets": "s3:ListAllMyBuckets",
    "s3:GetBucketNotificationConfiguration": "s3:GetBucketNotification",
    "s3:PutBucketNotificationConfiguration": "s3:PutBucketNotification",
    "s3:DeleteObjects": "s3:DeleteObject",  # on each key: see authorizations
    "s3:CopyObject": "s3:PutObject",  # on the target, s3:GetObject on the source
    # Lambda: an Invoke is lambda:InvokeFunction
    "lambda:Invoke": "lambda:InvokeFunction",
    # SQS authorizes a batch call as its single action (AWS's SQS developer guide)
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:SendMessageBatch": "sqs:SendMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
}
_KEY = re.compile(rb"<Key>(.*?)</Key>", re.S)


def authorizations(
    action: str, resource: str, headers: Mapping[str, str], body: bytes | str | None
) -> list[tuple[str, str]]:
    """The (IAM action, resource ARN) pairs AWS checks for the call moto names ``action`` on
    ``resource`` (with the request's ``headers`` and ``body``), in order."""
    named = ACTIONS.get(action, action)
    if not action.startswith("s3:"):
        return [(named, resource)]
    copy_source = _header(headers, "x-amz-copy-source")
    if copy_source and named == "s3:PutObject":  # CopyObject, as moto 5.2.6 or 5.2.5 names it
        return [("s3:GetObject", _copy_source_arn(copy_source)), ("s3:PutObject", resource)]
    raw = body.encode() if isinstance(body, str) else (body or b"")
    if action == "s3:DeleteObjects" or (named == "s3:DeleteObject" and b"<Delete" in raw):
        bucket = resource.removeprefix("arn:aws:s3:::").split("/", 1)[0]
        keys = [_xml_text(key) for key in _KEY.findall(raw)]
        return [("s3:DeleteObject", f"arn:aws:s3:::{bucket}/{key}") for key in keys]
    return [(named, resource)]


def _header(headers: Mapping[str, str], name: str) -> str:
    for key, value in headers.items():
        if key.lower() == name:
            return str(value)
    return ""


def _copy_source_arn(copy_source: str) -> str:
    """x-amz-copy-source (``bucket/key`` or ``/bucket/key``, URL-encoded, maybe ?versionId=)."""
    path = unquote(copy_source.split("?", 1)[0]).lstrip("/")
    return f"arn:aws:s3:::{path}"


def _xml_text(raw: bytes) -> str:
    text = raw.decode()
    for entity, char in (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&apos;", "'")):
        text = text.replace(entity, char)
    return text.replace("&amp;", "&")
