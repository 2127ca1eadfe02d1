"""The embedded AWS emulator keeps DynamoDB's promise that a conditional write is atomic:
the catalog's "newer observation wins" writes (config, versions, leases) rely on it, and
`lambdaserve dev` and these tests run on the emulator with the manage function's events
handled on several threads at once."""

from __future__ import annotations

import sys
import threading
import uuid

import boto3
from botocore.exceptions import ClientError

WRITERS, ROUNDS = 6, 40


def test_compare_and_set_from_many_threads_loses_no_update(aws_endpoint):
    """Given one item and six threads each adding one to its counter ROUNDS times by
    compare-and-set (a conditional update on the value read, retried when it fails),
    When they all run at once against the emulator,
    Then the counter equals every successful write: no two writers won the same value."""
    db = boto3.client(
        "dynamodb",
        endpoint_url=aws_endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    table = f"atomic-{uuid.uuid4().hex[:8]}"
    db.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    db.put_item(TableName=table, Item={"pk": {"S": "counter"}, "n": {"N": "0"}})
    won: list[int] = []

    def writer() -> None:
        for _ in range(ROUNDS):
            while True:
                item = db.get_item(
                    TableName=table, Key={"pk": {"S": "counter"}}, ConsistentRead=True
                )
                seen = int(item["Item"]["n"]["N"])
                try:
                    db.update_item(
                        TableName=table,
                        Key={"pk": {"S": "counter"}},
                        UpdateExpression="SET n = :next",
                        ConditionExpression="n = :seen",
                        ExpressionAttributeValues={
                            ":seen": {"N": str(seen)},
                            ":next": {"N": str(seen + 1)},
                        },
                    )
                except ClientError as exc:
                    assert exc.response["Error"]["Code"] == "ConditionalCheckFailedException"
                    continue
                won.append(seen)
                break

    threads = [threading.Thread(target=writer) for _ in range(WRITERS)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the emulator runs in this process: switch threads often
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    final = int(db.get_item(TableName=table, Key={"pk": {"S": "counter"}})["Item"]["n"]["N"])
    assert sorted(won) == list(range(WRITERS * ROUNDS)), "two writers won the same value"
    assert final == WRITERS * ROUNDS
