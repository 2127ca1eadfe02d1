"""Async requests: the queued envelope, payloads in S3 when large, and the result store.

A result item moves from PENDING to exactly one terminal state (SUCCESS, ERROR or
TIMEOUT) through a conditional write, so redelivered messages never produce a second
result. Items expire through DynamoDB TTL; large bodies live in S3 under ``requests/``
and ``results/`` (SQS takes 256 KB per message, DynamoDB 400 KB per item).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import orjson
from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lambdaserve.errors import Conflict, InvalidInput, StorageUnavailable

PENDING, SUCCESS, ERROR, TIMEOUT = "PENDING", "SUCCESS", "ERROR", "TIMEOUT"
TERMINAL = {SUCCESS, ERROR, TIMEOUT}
INLINE_LIMIT = 192 * 1024
_SK = "RESULT"


_ROUTING = (
    "id",
    "model_name",
    "model_version",
    "reply_to",
    "deadline_ms",
    "payload_key",
    "header_length",
    "traceparent",
    "request_id",
    "shadow_of",
)


class RequestEnvelope(BaseModel):
    """What travels on the requests queue: a v2 request plus where it goes.

    On the wire it is flat — the v2 request fields next to ``model_name``, optional
    ``model_version``, ``id`` and ``reply_to`` (a queue URL) — so producers may send it
    straight to the queue. Inside, the v2 fields stay in ``request`` as parsed (no copy).
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=lambda: uuid.uuid4().hex, min_length=1, max_length=128)
    model_name: str
    model_version: int | None = None
    reply_to: str | None = None
    deadline_ms: int | None = None
    payload_key: str | None = None
    header_length: int | None = None
    # the W3C trace context of the hop that runs it (the batcher's span, set as it invokes)
    traceparent: str | None = Field(default=None, max_length=64)
    # the client's own id for the request (v2's ``id``), where it gave one: what model code
    # and the answer are told; ``id`` is the queue's (the status URL's, the result's)
    request_id: str | None = Field(default=None, max_length=128)
    # a shadow copy of a request that version ``shadow_of`` answered (``queued.shadows``): it
    # is run and recorded through payload capture, and has no result, reply or retry
    shadow_of: int | None = None
    request: dict[str, Any] = Field(default_factory=dict)

    def request_document(self) -> dict[str, Any]:
        """The v2 request, with the client's id, else this envelope's."""
        return {**self.request, "id": self.request_id or self.id}

    def to_message(self) -> dict[str, Any]:
        """The flat wire form."""
        routing = {name: getattr(self, name) for name in _ROUTING}
        return {**self.request, **{k: v for k, v in routing.items() if v is not None}}


def parse_envelope(body: str | bytes) -> RequestEnvelope:
    """Validate a queue message body, or raise InvalidInput saying what is wrong."""
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"not a request envelope: {exc}") from None
    return envelope_from(raw)


def envelope_from(raw: Any) -> RequestEnvelope:
    """An envelope from its flat, already-decoded form."""
    if not isinstance(raw, dict):
        raise InvalidInput("not a request envelope: expected a JSON object")
    routing = {k: raw[k] for k in _ROUTING if k in raw}
    if isinstance(routing.get("model_version"), str):
        text = routing["model_version"]
        if text and not text.isdigit():
            raise InvalidInput(f"model_version must be a positive integer, got {text!r}")
        routing["model_version"] = int(text) if text else None
    request = {k: v for k, v in raw.items() if k not in _ROUTING}
    try:
        return RequestEnvelope.model_validate({**routing, "request": request})
    except ValidationError as exc:
        raise InvalidInput(f"not a request envelope: {exc}") from None


@dataclass(frozen=True)
class ResultRecord:
    id: str
    status: str
    model: str
    version: int | None
    http_status: int = 202
    body: bytes | None = None
    error: str = ""
    created_at_ms: int = 0
    finished_at_ms: int = 0
    header_length: int | None = None


class ResultStore:
    """Result items in the catalog table (``pk = RESULT#<id>``) with S3 for large bodies."""

    def __init__(
        self,
        dynamodb: Any,
        table: str,
        s3: Any,
        bucket: str,
        ttl_s: int,
        *,
        clock: Any = time.time,
    ) -> None:
        self._db = dynamodb
        self._table = table
        self._s3 = s3
        self._bucket = bucket
        self._ttl_s = ttl_s
        self._clock = clock

    def create_pending(self, envelope: RequestEnvelope) -> None:
        """Record an accepted request; a reused id is a Conflict."""
        now = self._clock()
        item = {
            "pk": {"S": f"RESULT#{envelope.id}"},
            "sk": {"S": _SK},
            "status": {"S": PENDING},
            "model": {"S": envelope.model_name},
            "created_at_ms": {"N": str(int(now * 1000))},
            "expires_at": {"N": str(int(now + self._ttl_s))},
        }
        if envelope.model_version is not None:
            item["version"] = {"N": str(envelope.model_version)}
        try:
            self._db.put_item(
                TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(pk)"
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise Conflict(f"request id {envelope.id!r} is already in use") from None
            raise

    def complete(
        self,
        request_id: str,
        status: str,
        http_status: int,
        body: bytes | None,
        error: str = "",
        *,
        model: str = "",
        body_key: str | None = None,
        header_length: int | None = None,
    ) -> bool:
        """Write the terminal state once; False when another delivery already did.

        Requests sent straight to the queue have no PENDING item; this creates it.
        """
        names = {"#status": "status"}
        values: dict[str, Any] = {
            ":status": {"S": status},
            ":http": {"N": str(http_status)},
            ":error": {"S": error},
            ":done": {"N": str(int(self._clock() * 1000))},
            ":pending": {"S": PENDING},
            ":expires": {"N": str(int(self._clock() + self._ttl_s))},
            ":model": {"S": model},
        }
        # The status goes last: an emulator (moto) applies SET actions in order on the live
        # item, and a reader that sees a terminal status must also see its body.
        sets = [
            "http_status = :http",
            "error_message = :error",
            "finished_at_ms = :done",
            "expires_at = :expires",
            "model = if_not_exists(model, :model)",
            "created_at_ms = if_not_exists(created_at_ms, :done)",
        ]
        if header_length is not None:
            values[":hl"] = {"N": str(header_length)}
            sets.append("header_length = :hl")
        if body_key is not None:
            values[":key"] = {"S": body_key}
            sets.append("body_key = :key")
        elif body is not None:
            if len(body) > INLINE_LIMIT:
                key = f"results/{request_id}"
                self._s3.put_object(Bucket=self._bucket, Key=key, Body=body)
                values[":key"] = {"S": key}
                sets.append("body_key = :key")
            else:
                values[":body"] = {"B": body}
                sets.append("body = :body")
        try:
            self._db.update_item(
                TableName=self._table,
                Key={"pk": {"S": f"RESULT#{request_id}"}, "sk": {"S": _SK}},
                UpdateExpression="SET " + ", ".join([*sets, "#status = :status"]),
                ConditionExpression="attribute_not_exists(pk) OR #status = :pending",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def is_terminal(self, request_id: str) -> bool:
        record = self.get(request_id, with_body=False)
        return record is not None and record.status in TERMINAL

    def get(self, request_id: str, with_body: bool = True) -> ResultRecord | None:
        item = self._db.get_item(
            TableName=self._table,
            Key={"pk": {"S": f"RESULT#{request_id}"}, "sk": {"S": _SK}},
            ConsistentRead=True,
        ).get("Item")
        if item is None:
            return None
        body = None
        if with_body and "body" in item:
            body = bytes(item["body"]["B"])
        elif with_body and "body_key" in item:
            body = self._s3.get_object(Bucket=self._bucket, Key=item["body_key"]["S"])[
                "Body"
            ].read()
        return ResultRecord(
            id=request_id,
            # An emulator may show an item mid-update (keys before attributes): still pending.
            status=item.get("status", {}).get("S", PENDING),
            model=item.get("model", {}).get("S", ""),
            version=int(item["version"]["N"]) if "version" in item else None,
            http_status=int(item.get("http_status", {}).get("N", "202")),
            body=body,
            error=item.get("error_message", {}).get("S", ""),
            created_at_ms=int(item.get("created_at_ms", {}).get("N", "0")),
            finished_at_ms=int(item.get("finished_at_ms", {}).get("N", "0")),
            header_length=int(item["header_length"]["N"]) if "header_length" in item else None,
        )


class PayloadStore:
    """Bodies too large for a message: requests under ``requests/``, results under
    ``results/`` (each keyed by the request id, so one request can only name its own)."""

    def __init__(self, s3: Any, bucket: str) -> None:
        self._s3 = s3
        self._bucket = bucket

    def put(self, request_id: str, body: bytes) -> str:
        key = request_key(request_id)
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=body)
        return key

    def get(self, key: str) -> bytes:
        """A stored body; InvalidInput when it is gone, StorageUnavailable on other errors."""
        if not key.startswith(("requests/", "results/")):
            raise InvalidInput("a payload key points under requests/ or results/")
        try:
            body: bytes = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("NoSuchKey", "404", "NotFound"):
                raise InvalidInput(
                    f"the request's stored body {key} is gone (deleted, or already answered); "
                    "submit the request again"
                ) from None
            raise StorageUnavailable(f"reading {key} failed: {exc}") from exc
        except Exception as exc:
            raise StorageUnavailable(f"reading {key} failed: {exc}") from exc
        return body

    def put_result(self, request_id: str, body: bytes) -> str:
        key = f"results/{request_id}"
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=body)
        return key

    def delete(self, key: str) -> None:
        self._s3.delete_object(Bucket=self._bucket, Key=key)


def request_key(request_id: str) -> str:
    return f"requests/{request_id}"
