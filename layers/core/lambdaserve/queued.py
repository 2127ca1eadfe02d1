"""Queued inference: envelopes from the requests queue -> batches -> infer -> results.

Per-request problems (bad envelope fields, wrong shapes, unknown models) end as that
request's ERROR result and are not retried. Infrastructure failures (the infer function
throttled or timing out, the store unavailable) are reported back so SQS redelivers; on
the last delivery before the DLQ the request gets an ERROR result too, so every accepted
id ends in exactly one terminal state and nothing is lost silently.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from botocore.exceptions import ClientError

from lambdaserve.apps.errors import status_for
from lambdaserve.batching import check_invariant
from lambdaserve.errors import InferenceError, InvalidInput, LambdaServeError, ModelNotFound
from lambdaserve.protocol.v2 import (
    encode_infer_response,
    parse_infer_document,
    parse_infer_request,
)
from lambdaserve.results import (
    ERROR,
    INLINE_LIMIT,
    SUCCESS,
    TIMEOUT,
    PayloadStore,
    RequestEnvelope,
    ResultRecord,
    ResultStore,
    parse_envelope,
)
from lambdaserve.serving import BatchItem, ModelServer, bind_inputs, select_outputs

logger = logging.getLogger(__name__)


class RetryableError(Exception):
    """Infrastructure trouble: the messages involved go back to the queue."""


@dataclass(frozen=True)
class Outcome:
    """The answer to one request: a v2 response body, or an error with its HTTP status."""

    http_status: int
    body: bytes | None = None
    error: str = ""


class Invoker(Protocol):
    """Runs requests: in this process, or in the infer function (Lambda invoke)."""

    def invoke(self, envelopes: Sequence[RequestEnvelope]) -> list[Outcome]: ...


def run_envelopes(
    server: ModelServer, payloads: PayloadStore, envelopes: Sequence[RequestEnvelope]
) -> list[Outcome]:
    """N envelopes in, N outcomes out, in order; compatible requests run in batches."""
    outcomes: list[Outcome | None] = [None] * len(envelopes)
    items, positions = [], []
    for index, envelope in enumerate(envelopes):
        try:
            items.append(_item(payloads, envelope))
            positions.append(index)
        except LambdaServeError as exc:
            outcomes[index] = Outcome(status_for(exc), error=exc.message)
    for index, item, result in zip(positions, items, server.infer_batch(items), strict=True):
        if result.error is not None or result.outputs is None or result.version is None:
            error = result.error or LambdaServeError("no result")
            outcomes[index] = Outcome(status_for(error), error=error.message)
            continue
        encoded = encode_infer_response(item.model, result.version, item.request, result.outputs)
        outcomes[index] = Outcome(200, body=encoded.body)
    done = [o for o in outcomes if o is not None]
    check_invariant(len(envelopes), done)
    return done


def _item(payloads: PayloadStore, envelope: RequestEnvelope) -> BatchItem:
    if envelope.payload_key:
        body = payloads.get(envelope.payload_key)
        request = parse_infer_request(body, envelope.header_length)
    else:
        request = parse_infer_document(envelope.request_document(), memoryview(b""))
    return BatchItem(envelope.model_name, envelope.model_version, request)


class InProcessInvoker:
    """Locally (and in ECS workers) the batch runs in the same process."""

    def __init__(self, server: Callable[[], ModelServer], payloads: PayloadStore) -> None:
        self._server = server
        self._payloads = payloads

    def invoke(self, envelopes: Sequence[RequestEnvelope]) -> list[Outcome]:
        return run_envelopes(self._server(), self._payloads, envelopes)


class LambdaInvoker:
    """Deployed: the infer function's batch entry point, invoked synchronously."""

    def __init__(self, lambda_client: Any, function_name: str) -> None:
        self._lambda = lambda_client
        self._function = function_name

    def invoke(self, envelopes: Sequence[RequestEnvelope]) -> list[Outcome]:
        payload = {"requests": [e.to_message() for e in envelopes]}
        try:
            response = self._lambda.invoke(
                FunctionName=self._function, Payload=orjson.dumps(payload)
            )
        except Exception as exc:  # throttling, network
            raise RetryableError(f"invoking {self._function} failed: {exc}") from exc
        body = orjson.loads(response["Payload"].read())
        if response.get("FunctionError"):
            raise RetryableError(f"{self._function} failed: {body.get('errorMessage', body)}")
        outcomes = [
            Outcome(
                int(r["status"]),
                body=orjson.dumps(r["response"]) if "response" in r else None,
                error=r.get("error", ""),
            )
            for r in body["results"]
        ]
        check_invariant(len(envelopes), outcomes)
        return outcomes


@dataclass(frozen=True)
class QueueMessage:
    """One SQS message as the batcher sees it."""

    message_id: str
    body: str
    receive_count: int = 1


@dataclass(frozen=True)
class Accepted:
    message: QueueMessage
    envelope: RequestEnvelope


class QueuedInference:
    """Processes one delivery of queued requests; returns the message ids to retry."""

    def __init__(
        self,
        results: ResultStore,
        payloads: PayloadStore,
        invoker: Invoker,
        *,
        max_receive_count: int,
        send_reply: Callable[[str, bytes], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._results = results
        self._payloads = payloads
        self._invoker = invoker
        self._max_receive_count = max_receive_count
        self._send_reply = send_reply
        self._clock = clock

    def process(self, messages: Sequence[QueueMessage]) -> set[str]:
        retry: set[str] = set()
        accepted: list[Accepted] = []
        for message in messages:
            try:
                prepared = self._prepare(message)
            except LambdaServeError as exc:
                logger.warning("dropping message %s: %s", message.message_id, exc.message)
                retry.add(message.message_id)  # unreadable: retries, then the DLQ keeps it
                continue
            except RetryableError:
                retry.add(message.message_id)
                continue
            if prepared is not None:
                accepted.append(prepared)
        if accepted:
            retry |= self._run(accepted)
        return retry

    def _prepare(self, message: QueueMessage) -> Accepted | None:
        envelope = parse_envelope(message.body)
        try:
            if self._results.is_terminal(envelope.id):
                return None  # a redelivery of a request that already has its result
            if envelope.deadline_ms is not None and envelope.deadline_ms < self._clock() * 1000:
                self._finish(
                    envelope,
                    TIMEOUT,
                    504,
                    None,
                    "the request's deadline passed before "
                    "it reached a model (it waited in the queue)",
                )
                return None
        except RetryableError:
            raise
        except Exception as exc:
            raise RetryableError(str(exc)) from exc
        return Accepted(message, envelope)

    def _run(self, accepted: list[Accepted]) -> set[str]:
        try:
            outcomes = self._invoker.invoke([a.envelope for a in accepted])
        except Exception as exc:  # throttling, timeouts, the infer function failing
            logger.warning("invoking inference failed: %s", exc)
            return self._retry_or_give_up(accepted, f"inference failed: {exc}")
        if len(outcomes) != len(accepted):
            raise AssertionError(f"{len(outcomes)} results for {len(accepted)} requests")
        retry = set()
        for entry, outcome in zip(accepted, outcomes, strict=True):
            try:
                self._deliver(entry, outcome)
            except Exception as exc:
                logger.warning("storing the result of %s failed: %s", entry.envelope.id, exc)
                retry.add(entry.message.message_id)
        return retry

    def _deliver(self, entry: Accepted, outcome: Outcome) -> None:
        if outcome.body is not None:
            self._finish(entry.envelope, SUCCESS, 200, outcome.body, "")
        else:
            self._finish(entry.envelope, ERROR, outcome.http_status, None, outcome.error)

    def _retry_or_give_up(self, accepted: list[Accepted], reason: str) -> set[str]:
        retry = set()
        for entry in accepted:
            retry.add(entry.message.message_id)
            if entry.message.receive_count >= self._max_receive_count:
                # Last delivery: the message goes to the DLQ, the request gets its answer.
                self._finish(
                    entry.envelope,
                    ERROR,
                    503,
                    None,
                    f"{reason} (after {entry.message.receive_count} attempts; the message is "
                    "in the dead-letter queue)",
                )
        return retry

    def _finish(
        self,
        envelope: RequestEnvelope,
        status: str,
        http_status: int,
        body: bytes | None,
        error: str,
    ) -> None:
        if not self._results.complete(
            envelope.id, status, http_status, body, error, model=envelope.model_name
        ):
            return  # another delivery finished it first
        if envelope.payload_key:
            self._payloads.delete(envelope.payload_key)
        if envelope.reply_to and self._send_reply is not None:
            reply: dict[str, Any] = {
                "id": envelope.id,
                "status": status,
                "http_status": http_status,
            }
            if body is not None:
                reply["response"] = orjson.loads(body)
            if error:
                reply["error"] = error
            self._send_reply(envelope.reply_to, orjson.dumps(reply))


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
            )
            batch = response.get("Messages", [])
            if not batch:
                break
            for message in batch:
                count = int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
                taken.append(
                    (
                        QueueMessage(message["MessageId"], message["Body"], count),
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


class AsyncSubmitter:
    """``Prefer: respond-async``: validate now, record PENDING, enqueue, answer the id.

    Models whose config asks for a GPU (``instance_group [{kind: KIND_GPU}]``) go to the GPU
    queue when there is one (ECS GPU workers); everything else to the requests queue.
    """

    def __init__(
        self,
        server: Callable[[], ModelServer],
        results: ResultStore,
        payloads: PayloadStore,
        sqs: Any,
        queue_url: Callable[[], str],
        *,
        gpu_queue_url: Callable[[], str] | None = None,
    ) -> None:
        self._server = server
        self._results = results
        self._payloads = payloads
        self._sqs = sqs
        self._queue_url = queue_url
        self._gpu_queue_url = gpu_queue_url

    def submit(
        self, model: str, version: int | None, body: bytes, header_length: int | None
    ) -> str:
        request = parse_infer_request(body, header_length)  # a bad request is a 400 now
        served = self._server().resolver.resolve(model, version)  # 404 / 503 now
        bind_inputs(request, served.signature)  # wrong shapes or names: 400 now, too
        select_outputs(request, served.signature)
        request_id = uuid.uuid4().hex
        deadline = _deadline_ms(request.parameters)
        if header_length is not None or len(body) > INLINE_LIMIT:
            envelope = RequestEnvelope(
                id=request_id,
                model_name=model,
                model_version=version,
                deadline_ms=deadline,
                payload_key=self._payloads.put(request_id, body),
                header_length=header_length,
            )
        else:
            document = orjson.loads(body)
            document.pop("id", None)
            envelope = RequestEnvelope(
                id=request_id,
                model_name=model,
                model_version=version,
                deadline_ms=deadline,
                request=document,
            )
        self._results.create_pending(envelope)
        queue_url = self._queue_url
        if served.config.instance_kind == "GPU" and self._gpu_queue_url is not None:
            queue_url = self._gpu_queue_url
        try:
            self._sqs.send_message(
                QueueUrl=queue_url(), MessageBody=orjson.dumps(envelope.to_message()).decode()
            )
        except Exception as exc:
            self._results.complete(request_id, ERROR, 503, None, f"could not enqueue: {exc}")
            raise InferenceError("the request could not be queued; retry") from exc
        return request_id

    def result(self, request_id: str) -> ResultRecord:
        record = self._results.get(request_id)
        if record is None:
            raise ModelNotFound(f"no request {request_id!r} (unknown, or its result expired)")
        return record


def _deadline_ms(parameters: dict[str, Any]) -> int | None:
    """KServe/Triton's ``timeout`` parameter is in microseconds from now."""
    timeout = parameters.get("timeout")
    if timeout is None:
        return None
    if not isinstance(timeout, int) or timeout <= 0:
        raise InvalidInput("parameters.timeout is a positive number of microseconds")
    return int(time.time() * 1000 + timeout / 1000)
