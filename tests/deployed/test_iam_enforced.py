"""Each service's call is checked against the caller's role: action and resource ARN."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from lambdaserve.local.emulator import Emulator, free_port
from lambdaserve.local.iam import Credentials, Enforcement
from lambdaserve.local.moto_authorization import dynamodb_authorizations
from lambdaserve.local.stack_shape import Role

REGION = "us-east-1"
TABLE_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/"


@dataclass
class Sandbox:
    enforcement: Enforcement
    queues: dict[str, str]

    def client(self, service: str, credentials: Credentials | None = None) -> Any:
        return self.enforcement.client(service, credentials)


ROLE = Role(
    logical="InferFunctionRole",
    policies={
        "narrow": {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": "s3:GetObject",
                    "Resource": "arn:aws:s3:::models-b/models/*",
                },
                {
                    "Effect": "Allow",
                    "Action": "sqs:SendMessage",
                    "Resource": "arn:aws:sqs:us-east-1:123456789012:requests",
                },
                {
                    "Effect": "Allow",
                    "Action": ["dynamodb:GetItem", "dynamodb:UpdateItem"],
                    "Resource": TABLE_ARN + "catalog",
                },
            ],
        }
    },
    managed=("arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",),
    trusted=("lambda.amazonaws.com",),
)


@pytest.fixture(scope="module")
def enforced() -> Iterator[Sandbox]:
    # (moto's accounts are the process's, not a server's: one sandbox for the module)
    emulator = Emulator("127.0.0.1", free_port()).start()
    try:
        enforcement = Enforcement(emulator.endpoint, REGION, Credentials("testing", "testing"))
        s3, sqs, dynamodb = (enforcement.client(s) for s in ("s3", "sqs", "dynamodb"))
        s3.create_bucket(Bucket="models-b")
        for key in ("models/m/1/model.onnx", "results/r.json"):
            s3.put_object(Bucket="models-b", Key=key, Body=b"x")
        queues = {q: sqs.create_queue(QueueName=q)["QueueUrl"] for q in ("requests", "other")}
        for table in ("catalog", "elsewhere"):
            dynamodb.create_table(
                TableName=table,
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
        with enforcement.enforced():
            yield Sandbox(enforcement, queues)
    finally:
        emulator.stop()


@pytest.fixture
def sandbox(enforced: Sandbox) -> Sandbox:
    enforced.enforcement.denials.clear()
    return enforced


def _denied(call: object) -> bool:
    try:
        call()  # type: ignore[operator]
    except ClientError as error:
        return error.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    return False


def test_each_service_allows_what_the_role_grants_and_denies_the_rest(sandbox: Sandbox):
    # Given the infer function's role, narrowed to one key prefix, one queue and one table
    credentials = sandbox.enforcement.assume(ROLE, "InferFunction")
    s3, sqs, dynamodb = (sandbox.client(s, credentials) for s in ("s3", "sqs", "dynamodb"))
    key = {"pk": {"S": "m"}}

    # When it calls inside and outside what it was granted
    # Then S3 is checked on the object's ARN
    s3.get_object(Bucket="models-b", Key="models/m/1/model.onnx")
    assert _denied(lambda: s3.get_object(Bucket="models-b", Key="results/r.json"))
    # and SQS on the queue's
    sqs.send_message(QueueUrl=sandbox.queues["requests"], MessageBody="{}")
    assert _denied(lambda: sqs.send_message(QueueUrl=sandbox.queues["other"], MessageBody="{}"))
    # and DynamoDB on the table's (moto alone would check it against "*" and deny both)
    dynamodb.get_item(TableName="catalog", Key=key)
    assert _denied(lambda: dynamodb.get_item(TableName="elsewhere", Key=key))
    assert _denied(lambda: dynamodb.put_item(TableName="catalog", Item=key))

    # And each denial names the function, the action and the resource
    said = [str(d) for d in sandbox.enforcement.denials]
    assert any(
        "InferFunction" in s and "s3:GetObject" in s and "results/r.json" in s for s in said
    ), said
    assert any("sqs:SendMessage" in s and ":other" in s for s in said), said
    assert any("dynamodb:GetItem" in s and "table/elsewhere" in s for s in said), said
    assert any("dynamodb:PutItem" in s and "table/catalog" in s for s in said), said
    assert len(said) == 4, said
    # and the harness's administrator still reaches everything
    admin = sandbox.client("dynamodb")
    admin.put_item(TableName="elsewhere", Item=key)


def test_a_transaction_is_authorized_item_by_item(sandbox: Sandbox):
    # Given a role that may update the catalog but not check a condition on it
    credentials = sandbox.enforcement.assume(ROLE, "ManageEventsFunction")
    dynamodb = sandbox.client("dynamodb", credentials)
    update = {
        "Update": {
            "TableName": "catalog",
            "Key": {"pk": {"S": "m"}},
            "UpdateExpression": "SET s = :s",
            "ExpressionAttributeValues": {":s": {"S": "READY"}},
        }
    }
    check = {
        "ConditionCheck": {
            "TableName": "catalog",
            "Key": {"pk": {"S": "m"}},
            "ConditionExpression": "attribute_not_exists(pk)",
        }
    }
    # When it writes a transaction of updates only, it passes
    dynamodb.transact_write_items(TransactItems=[update])
    # Then one that also checks a condition is denied, naming ConditionCheckItem
    assert _denied(lambda: dynamodb.transact_write_items(TransactItems=[check, update]))
    assert [d.action for d in sandbox.enforcement.denials] == ["dynamodb:ConditionCheckItem"]


def test_a_managed_policy_the_harness_cannot_evaluate_is_refused(sandbox: Sandbox):
    # Given a role that attaches a managed policy granting data access
    role = Role(
        "Wide", {}, ("arn:aws:iam::aws:policy/AmazonS3FullAccess",), ("lambda.amazonaws.com",)
    )
    # When it is assumed / Then the harness refuses, naming the policy
    with pytest.raises(Exception, match="AmazonS3FullAccess"):
        sandbox.enforcement.assume(role, "Wide")


def test_dynamodb_authorizations_name_indexes_batches_and_items():
    assert dynamodb_authorizations(
        "Query", {"TableName": "t", "IndexName": "by-state"}, TABLE_ARN
    ) == [("Query", TABLE_ARN + "t/index/by-state")]
    assert dynamodb_authorizations(
        "BatchWriteItem", {"RequestItems": {"a": [], "b": []}}, TABLE_ARN
    ) == [("BatchWriteItem", TABLE_ARN + "a"), ("BatchWriteItem", TABLE_ARN + "b")]
    assert dynamodb_authorizations("ListTables", {}, TABLE_ARN) == [("ListTables", "*")]


def test_a_presigned_url_carries_its_signers_permission(sandbox: Sandbox):
    # Given the role's presigned PUT URLs, inside and outside what it may write
    role = Role(
        "Signer",
        {
            "put": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Action": "s3:PutObject",
                        "Resource": "arn:aws:s3:::models-b/environments/*",
                    }
                ],
            }
        },
        (),
        ("lambda.amazonaws.com",),
    )
    s3 = sandbox.client("s3", sandbox.enforcement.assume(role, "ManageEventsFunction"))
    urls = {
        key: s3.generate_presigned_url("put_object", Params={"Bucket": "models-b", "Key": key})
        for key in ("environments/e.tar.gz", "results/r.json")
    }
    # When another process PUTs through each (the code validator through the manage side's URL)
    status = {
        key: httpx.put(url, content=b"x", timeout=30).status_code for key, url in urls.items()
    }
    # Then the one the signer may write passes, and the other is denied, naming the signer
    assert status == {"environments/e.tar.gz": 200, "results/r.json": 403}
    assert [d.action for d in sandbox.enforcement.denials] == ["s3:PutObject"]
