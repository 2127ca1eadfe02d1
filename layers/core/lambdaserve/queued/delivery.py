"""Holding and settling the requests queue's messages around one batcher run."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import ClientError

from lambdaserve.queued.inference import QueueMessage, message_trace

logger = logging.getLogger(__name__)


class TopUp:
    """A short sub-second top-up from the queue, with its own deletes.

    Lambda's batching window is whole seconds, so the event source mapping delivers at
    once (window 0) and the handler tops the batch up: an idle queue costs one empty
    receive (milliseconds), a busy one fills batches without waiting a second.
    """

    def __init__(
        self,
        sqs: Any,
        queue_url: Callable[[], str],
        limit: int,
        window_s: float,
        retry_delay_s: float = 2.0,
    ) -> None:
        self._sqs = sqs
        self._queue_url = queue_url
        self._limit = limit
        self._window_s = window_s
        self._retry_delay_s = retry_delay_s

    def fetch(self) -> list[tuple[QueueMessage, str]]:
        """Extra messages (with receipt handles) received within the window."""
        taken: list[tuple[QueueMessage, str]] = []
        deadline = time.monotonic() + self._window_s
        while len(taken) < self._limit and time.monotonic() < deadline:
            response = self._sqs.receive_message(
                QueueUrl=self._queue_url(),
                MaxNumberOfMessages=min(10, self._limit - len(taken)),
                WaitTimeSeconds=0,
                AttributeNames=["ApproximateReceiveCount"],
                MessageSystemAttributeNames=["ApproximateReceiveCount", "AWSTraceHeader"],
                MessageAttributeNames=["traceparent"],
            )
            batch = response.get("Messages", [])
            if not batch:
                break
            for message in batch:
                attributes = message.get("Attributes", {})
                count = int(attributes.get("ApproximateReceiveCount", "1"))
                traceparent = message.get("MessageAttributes", {}).get("traceparent", {})
                trace = message_trace(
                    traceparent.get("StringValue"), attributes.get("AWSTraceHeader")
                )
                taken.append(
                    (
                        QueueMessage(message["MessageId"], message["Body"], count, trace),
                        message["ReceiptHandle"],
                    )
                )
        return taken

    def settle(self, taken: Sequence[tuple[QueueMessage, str]], retry: set[str]) -> None:
        """Delete what succeeded; the rest comes back after a short backoff."""
        self.retry_later([(m, h) for m, h in taken if m.message_id in retry])
        done = [handle for message, handle in taken if message.message_id not in retry]
        for start in range(0, len(done), 10):
            self._sqs.delete_message_batch(
                QueueUrl=self._queue_url(),
                Entries=[
                    {"Id": str(i), "ReceiptHandle": h}
                    for i, h in enumerate(done[start : start + 10])
                ],
            )

    def retry_later(self, failed: Sequence[tuple[QueueMessage, str]]) -> None:
        """Make failed messages visible again after 2^n x the retry delay (at most 5 min).

        Without this they would wait out the queue's visibility timeout (6x the function
        timeout, minutes) before a throttled infer function is tried again.
        """
        for message, handle in failed:
            delay = min(self._retry_delay_s * 2 ** (message.receive_count - 1), 300)
            try:
                self._sqs.change_message_visibility(
                    QueueUrl=self._queue_url(), ReceiptHandle=handle, VisibilityTimeout=int(delay)
                )
            except ClientError:
                logger.warning("could not shorten the retry of %s", message.message_id)


class VisibilityLease:
    """Keeps in-flight messages invisible for a short lease, renewed while work goes on.

    The queue's own visibility timeout must cover the function's whole timeout (Lambda
    requires it), so a crashed run would hide its messages for minutes. Holding them on a
    short lease instead brings them back within ``lease_s`` of a crash; a live run renews
    the lease every third of it.
    """

    def __init__(self, sqs: Any, queue_url: Callable[[], str], lease_s: int) -> None:
        self._sqs = sqs
        self._queue_url = queue_url
        self.lease_s = max(1, lease_s)

    @contextmanager
    def hold(self, handles: Sequence[str]) -> Iterator[None]:
        if not handles:
            yield
            return
        stop = threading.Event()
        self._extend(handles)
        renewer = threading.Thread(
            target=self._renew, args=(handles, stop), name="visibility-lease", daemon=True
        )
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join()

    def _renew(self, handles: Sequence[str], stop: threading.Event) -> None:
        while not stop.wait(self.lease_s / 3):
            self._extend(handles)

    def _extend(self, handles: Sequence[str]) -> None:
        for start in range(0, len(handles), 10):
            entries = [
                {"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": self.lease_s}
                for i, h in enumerate(handles[start : start + 10])
            ]
            try:
                self._sqs.change_message_visibility_batch(
                    QueueUrl=self._queue_url(), Entries=entries
                )
            except ClientError as exc:
                # The queue's own visibility timeout still hides them: only slower to return.
                logger.warning("could not renew the visibility lease: %s", exc)
