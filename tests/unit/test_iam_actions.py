"""The IAM action AWS authorizes for each call, whatever moto names it (local/iam_actions.py):
one case per row of the table, so a moto release that renames an operation changes nothing."""

from __future__ import annotations

import pytest

from lambdaserve.local.iam_actions import ACTIONS, authorizations

BUCKET = "arn:aws:s3:::models-bucket"
KEY = f"{BUCKET}/models/m/1/model.onnx"

# (moto's name, the resource moto passes) -> what AWS checks
ROWS = [
    # moto 5.2.6 names the operation; AWS authorizes the bucket listing
    ("s3:ListObjectsV2", BUCKET, [("s3:ListBucket", BUCKET)]),
    ("s3:ListObjects", BUCKET, [("s3:ListBucket", BUCKET)]),
    ("s3:HeadBucket", BUCKET, [("s3:ListBucket", BUCKET)]),
    ("s3:HeadObject", KEY, [("s3:GetObject", KEY)]),
    ("s3:ListObjectVersions", BUCKET, [("s3:ListBucketVersions", BUCKET)]),
    ("s3:ListMultipartUploads", BUCKET, [("s3:ListBucketMultipartUploads", BUCKET)]),
    ("s3:ListParts", KEY, [("s3:ListMultipartUploadParts", KEY)]),
    ("s3:CreateMultipartUpload", KEY, [("s3:PutObject", KEY)]),
    ("s3:UploadPart", KEY, [("s3:PutObject", KEY)]),
    ("s3:CompleteMultipartUpload", KEY, [("s3:PutObject", KEY)]),
    ("s3:ListBuckets", "*", [("s3:ListAllMyBuckets", "*")]),
    (
        "s3:GetBucketNotificationConfiguration",
        BUCKET,
        [("s3:GetBucketNotification", BUCKET)],
    ),
    (
        "s3:PutBucketNotificationConfiguration",
        BUCKET,
        [("s3:PutBucketNotification", BUCKET)],
    ),
    ("lambda:Invoke", "arn:fn", [("lambda:InvokeFunction", "arn:fn")]),
    ("sqs:DeleteMessageBatch", "arn:q", [("sqs:DeleteMessage", "arn:q")]),
    ("sqs:SendMessageBatch", "arn:q", [("sqs:SendMessage", "arn:q")]),
    ("sqs:ChangeMessageVisibilityBatch", "arn:q", [("sqs:ChangeMessageVisibility", "arn:q")]),
    # moto 5.2.5's names are already AWS's: they pass through
    ("s3:ListBucket", BUCKET, [("s3:ListBucket", BUCKET)]),
    ("s3:GetObject", KEY, [("s3:GetObject", KEY)]),
    ("sqs:ReceiveMessage", "arn:q", [("sqs:ReceiveMessage", "arn:q")]),
]


@pytest.mark.parametrize(("moto_name", "resource", "checked"), ROWS, ids=[r[0] for r in ROWS])
def test_each_call_is_authorized_as_aws_names_it(moto_name, resource, checked):
    # Given a call moto names moto_name on resource
    # When the emulator asks what AWS authorizes
    # Then it is AWS's action, on AWS's resource
    assert authorizations(moto_name, resource, {}, b"") == checked


def test_every_row_of_the_table_has_a_case():
    covered = {row[0] for row in ROWS} | {"s3:DeleteObjects", "s3:CopyObject"}
    assert set(ACTIONS) <= covered


DELETE_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?><Delete><Object><Key>models/m/1/a.onnx</Key>'
    b"</Object><Object><Key>models/m/1/b &amp; c.txt</Key></Object></Delete>"
)


@pytest.mark.parametrize("moto_name", ["s3:DeleteObjects", "s3:DeleteObject"])
def test_a_delete_objects_is_a_delete_object_on_each_key(moto_name):
    # Given a DeleteObjects of two keys (5.2.6 names it DeleteObjects, 5.2.5 DeleteObject)
    # When authorized
    # Then s3:DeleteObject is checked on each key, not on the bucket
    assert authorizations(moto_name, BUCKET, {}, DELETE_BODY) == [
        ("s3:DeleteObject", f"{BUCKET}/models/m/1/a.onnx"),
        ("s3:DeleteObject", f"{BUCKET}/models/m/1/b & c.txt"),
    ]


@pytest.mark.parametrize("moto_name", ["s3:CopyObject", "s3:PutObject"])
def test_a_copy_reads_its_source_and_writes_its_target(moto_name):
    # Given a CopyObject (5.2.6 names it CopyObject, 5.2.5 PutObject with x-amz-copy-source)
    headers = {"X-Amz-Copy-Source": "/other-bucket/results/a%20b.json?versionId=3"}
    # When authorized
    # Then the source is read (s3:GetObject) and the target written (s3:PutObject)
    assert authorizations(moto_name, KEY, headers, b"") == [
        ("s3:GetObject", "arn:aws:s3:::other-bucket/results/a b.json"),
        ("s3:PutObject", KEY),
    ]


def test_a_plain_put_is_a_put():
    assert authorizations("s3:PutObject", KEY, {"Content-Type": "x"}, b"data") == [
        ("s3:PutObject", KEY)
    ]
