"""Triton's sequence batcher as template.yaml deploys it: one sequence whose steps go through
the HTTP API by turns synchronously (the infer function) and queued (Prefer: respond-async:
the batcher, then the infer batch function), each under its role, the running sum kept in
the sequence's record in the catalog table between them (SequenceStore=dynamodb); and a
state over a DynamoDB item's 400 KB, kept in the bucket's sequence-state/ behind a pointer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from lambdaserve.local.http_api_event import http_api_event
from tests import sequence_models
from tests.deployed.stack import DeployedStack, deployed

MODEL = "accumulator"
# a minute between steps: a queued step through a cold function under load takes seconds, and
# an idle-released sequence would answer the START message instead of what a test looks for
IDLE_US = 60_000_000
WIDE = "wide_accumulator"  # its state: 480 KB
PATH = f"/v2/models/{MODEL}/infer"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeployedStack]:
    # Given the stack with the template's defaults, an accumulator (implicit state) published
    with deployed(tmp_path_factory.mktemp("sequences")) as running:
        running.publish(MODEL, sequence_models.simple_string_dyna_sequence(MODEL, idle_us=IDLE_US))
        running.publish(WIDE, sequence_models.wide_accumulator(WIDE))
        yield running


def step_body(value: int, sequence_id: str, *, start: bool = False, end: bool = False) -> bytes:
    return json.dumps(
        {
            "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [value]}],
            "parameters": {
                "sequence_id": sequence_id,
                "sequence_start": start,
                "sequence_end": end,
            },
        }
    ).encode()


def output_of(answer: dict[str, Any]) -> int:
    [output] = answer["outputs"]
    return int(output["data"][0])


def synchronously(stack: DeployedStack, body: bytes, path: str = PATH) -> int:
    answer = stack.http(http_api_event("POST", path, body))
    assert answer["statusCode"] == 200, answer
    return output_of(json.loads(answer["body"]))


def queued(stack: DeployedStack, body: bytes, path: str = PATH) -> int:
    event = http_api_event("POST", path, body)
    event["headers"]["prefer"] = "respond-async"
    accepted = stack.http(event)
    assert accepted["statusCode"] == 202, accepted
    status = http_api_event("GET", json.loads(accepted["body"])["status_url"], b"")
    answers: list[dict[str, Any]] = []

    def done() -> bool:
        answers.append(stack.http(status))
        return bool(answers[-1]["statusCode"] != 202)

    stack.pump("BatcherFunction", done, timeout_s=120)
    assert answers[-1]["statusCode"] == 200, answers[-1]
    return output_of(json.loads(answers[-1]["body"]))


def alternate(stack: DeployedStack) -> list[int]:
    """Sequence "42"'s steps sync, queued, sync, queued (the last one END)."""
    return [
        synchronously(stack, step_body(20, "42", start=True)),
        queued(stack, step_body(-11, "42")),
        synchronously(stack, step_body(-7, "42")),
        queued(stack, step_body(-1, "42", end=True)),
    ]


def test_a_sequences_steps_alternate_between_the_sync_and_queued_paths(stack: DeployedStack):
    # When the steps of sequence "42" go sync, queued, sync, queued (the last one END)
    got = alternate(stack)
    # Then each step continued the running sum the other path left (END adds the id 42),
    # and no role was denied a call the steps made
    assert got == [20, 9, 2, 1 + 42]
    stack.assert_no_denials()
    # and the END left the record ended: a next step without START is refused
    refused = stack.http(http_api_event("POST", PATH, step_body(5, "42")))
    assert refused["statusCode"] == 400, refused
    assert "must specify the START flag" in refused["body"]


def test_a_state_over_400_kb_crosses_the_paths_through_the_bucket(stack: DeployedStack):
    # When a sequence of the model whose state is 480 KB goes sync, queued, sync (END)
    path = f"/v2/models/{WIDE}/infer"
    got = [synchronously(stack, step_body(5, "w", start=True), path)]
    got.append(queued(stack, step_body(7, "w"), path))
    s3, bucket = stack.clients.s3, stack.settings.bucket
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="sequence-state/").get("Contents", [])
    got.append(synchronously(stack, step_body(11, "w", end=True), path))
    # Then the running sum carried across (the state in S3 under each role's grant), one
    # object held the state between steps, and the END removed it
    assert got == [5, 12, 23]
    assert [o["Key"].split("/")[:3] for o in listed] == [["sequence-state", WIDE, "1"]]
    assert not s3.list_objects_v2(Bucket=bucket, Prefix="sequence-state/").get("Contents")
    stack.assert_no_denials()
