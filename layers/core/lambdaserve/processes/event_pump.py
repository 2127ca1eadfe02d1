"""Deliver SQS messages to a handler the way a Lambda event source mapping does.

Batch size and batching window; records in Lambda's SQS event shape; the
handler's ``batchItemFailures`` (or an exception: the whole batch) stay on the
queue and come back after a retry delay; the queue's redrive policy moves a
message to its DLQ after ``maxReceiveCount`` receives, as in AWS.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Any]


@dataclass
class LocalContext:
    """The parts of Lambda's context object that handlers and Powertools read."""

    function_name: str
    timeout_s: float = 60.0
    memory_limit_in_mb: int = 1024
    function_version: str = "$LATEST"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    _deadline: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_s

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:000000000000:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        return "local"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


@dataclass(frozen=True)
class PumpConfig:
    batch_size: int = 10
    batching_window_s: float = 0.0
    poll_wait_s: int = 1
    retry_delay_s: int = 1
    function_timeout_s: float = 60.0
    # Batches handled at once, as Lambda's SQS pollers invoke several at a time (five to
    # start with): a slow batch (model code loading where it serves) holds only its own
    concurrency: int = 1


class EventPump:
    """``config.concurrency`` polling threads feeding one queue's messages to one handler."""

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        queue_arn: str,
        handler: Handler,
        function_name: str,
        *,
        config: PumpConfig | None = None,
        region: str = "us-east-1",
    ) -> None:
        self._sqs = sqs
        self._queue_url = queue_url
        self._queue_arn = queue_arn
        self._handler = handler
        self._function_name = function_name
        self._config = config or PumpConfig()
        self._region = region
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.invocations = 0

    def start(self) -> None:
        for index in range(max(1, self._config.concurrency)):
            thread = threading.Thread(
                target=self._run, name=f"pump-{self._function_name}-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:
                logger.exception("event pump for %s failed; retrying", self._function_name)
                self._stop.wait(1.0)

    def poll_once(self) -> int:
        """Receive one batch, invoke the handler, settle the messages; returns the count."""
        messages = self._receive(self._config.poll_wait_s, self._config.batch_size)
        deadline = time.monotonic() + self._config.batching_window_s
        while messages and len(messages) < self._config.batch_size and time.monotonic() < deadline:
            more = self._receive(0, self._config.batch_size - len(messages))
            if not more:
                time.sleep(0.01)
            messages.extend(more)
        if messages:
            self._invoke(messages)
        return len(messages)

    def _receive(self, wait_s: int, count: int) -> list[dict[str, Any]]:
        response = self._sqs.receive_message(
            QueueUrl=self._queue_url,
            MaxNumberOfMessages=min(count, 10),
            WaitTimeSeconds=wait_s,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        return list(response.get("Messages", []))

    def _invoke(self, messages: list[dict[str, Any]]) -> None:
        event = {"Records": [self._record(m) for m in messages]}
        context = LocalContext(self._function_name, self._config.function_timeout_s)
        self.invocations += 1
        try:
            result = self._handler(event, context) or {}
            failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
        except Exception:
            logger.exception("%s raised; the whole batch returns to the queue", self._function_name)
            failed = {m["MessageId"] for m in messages}
        done = [m for m in messages if m["MessageId"] not in failed]
        for start in range(0, len(done), 10):
            self._sqs.delete_message_batch(
                QueueUrl=self._queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(done[start : start + 10])
                ],
            )
        for message in messages:
            if message["MessageId"] in failed:
                self._sqs.change_message_visibility(
                    QueueUrl=self._queue_url,
                    ReceiptHandle=message["ReceiptHandle"],
                    VisibilityTimeout=self._config.retry_delay_s,
                )

    def _record(self, message: dict[str, Any]) -> dict[str, Any]:
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": message.get("Attributes", {}),
            "messageAttributes": {
                name: _lambda_attribute(value)
                for name, value in message.get("MessageAttributes", {}).items()
            },
            "md5OfBody": message.get("MD5OfBody", ""),
            "eventSource": "aws:sqs",
            "eventSourceARN": self._queue_arn,
            "awsRegion": self._region,
        }


def _lambda_attribute(value: dict[str, Any]) -> dict[str, Any]:
    return {
        "stringValue": value.get("StringValue"),
        "binaryValue": value.get("BinaryValue"),
        "stringListValues": value.get("StringListValues", []),
        "binaryListValues": value.get("BinaryListValues", []),
        "dataType": value.get("DataType", "String"),
    }
