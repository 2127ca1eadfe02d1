"""Queued inference: envelopes from the requests queue -> batches -> infer -> results.

Per-request problems (bad envelope fields, wrong shapes, unknown models, a stored body
that is gone) end as that request's ERROR result and are not retried. A transient failure
that belongs to one request (reading its stored body) retries that request alone; only
failures of the batch itself (the invoke) retry every member. On the last delivery before
the DLQ the request gets an ERROR result too, so every accepted id ends in exactly one
terminal state and nothing is lost silently.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import orjson

from lambdaserve.batching.assembly import check_invariant
from lambdaserve.errors import InvalidInput, LambdaServeError, StorageUnavailable
from lambdaserve.protocol.http_status import status_for
from lambdaserve.protocol.v2 import (
    HEADER_LENGTH,
    EncodedResponse,
    encode_infer_response,
    parse_infer_document,
    parse_infer_request,
)
from lambdaserve.queued.results import (
    ERROR,
    SUCCESS,
    TIMEOUT,
    PayloadStore,
    RequestEnvelope,
    ResultStore,
    parse_envelope,
    request_key,
)
from lambdaserve.serving.capture.capture_offers import JSON, Payload, offer_served
from lambdaserve.serving.capture.data_capture import DataCapture
from lambdaserve.serving.capture.shadow import record_shadow, shadow_error
from lambdaserve.serving.model_server import BatchItem, ModelServer
from lambdaserve.tracing import propagation
from lambdaserve.tracing.propagation import TraceContext

logger = logging.getLogger(__name__)
# a reply larger than this names where its body lies instead: 256 KiB, the message size every
# SQS queue takes (a queue may be set to take up to 1 MiB; a client's reply queue is its own)
SQS_MESSAGE_LIMIT = 256 * 1024


class RetryableError(Exception):
    """Infrastructure trouble: the messages involved go back to the queue."""


@dataclass(frozen=True)
class Outcome:
    """The answer to one request: a v2 response body (inline, or stored under ``body_key``),
    or an error with its HTTP status; ``retry`` marks a transient failure of this request."""

    http_status: int
    body: bytes | None = None
    error: str = ""
    retry: bool = False
    body_key: str | None = None
    # Binary tensors follow the JSON header: its length, as Inference-Header-Content-Length.
    header_length: int | None = None

    @property
    def succeeded(self) -> bool:
        return self.body is not None or self.body_key is not None


class Invoker(Protocol):
    """Runs requests: in this process, or in the infer function (Lambda invoke)."""

    def invoke(self, envelopes: Sequence[RequestEnvelope]) -> list[Outcome]: ...


def run_envelopes(
    server: ModelServer,
    payloads: PayloadStore,
    envelopes: Sequence[RequestEnvelope],
    capture: DataCapture | None = None,
) -> list[Outcome]:
    """N envelopes in, N outcomes out, in order; compatible requests run in batches. Each
    answered exchange goes to ``capture`` where its version's config asks for it."""
    outcomes: list[Outcome | None] = [None] * len(envelopes)
    items, positions, sent = [], [], []
    for index, envelope in enumerate(envelopes):
        try:
            item, body = _item(payloads, envelope)
            items.append(item)
            sent.append(body)
            positions.append(index)
        except LambdaServeError as exc:
            retry = isinstance(exc, StorageUnavailable)
            outcomes[index] = Outcome(status_for(exc), error=exc.message, retry=retry)
    began = time.perf_counter()
    results = server.infer_batch(items)
    latency_ms = (time.perf_counter() - began) * 1000
    answered = zip(positions, items, sent, results, strict=True)
    for index, item, body, result in answered:
        shadow_of = envelopes[index].shadow_of
        if result.error is not None or result.outputs is None or result.version is None:
            error = result.error or LambdaServeError("no result")
            outcomes[index] = Outcome(status_for(error), error=error.message)
            if capture is not None and shadow_of is not None:
                answer = shadow_error(error.message)
                _record_shadow(
                    capture, item, body, answer=answer, primary=shadow_of, latency_ms=latency_ms
                )
            continue
        encoded = encode_infer_response(item.model, result.version, item.request, result.outputs)
        if capture is not None and shadow_of is not None:
            _record_shadow(
                capture, item, body, answer=encoded.body, primary=shadow_of, latency_ms=latency_ms
            )
        elif capture is not None:
            _offer(capture, server, item, result.version, body=body, encoded=encoded)
        length = encoded.headers.get(HEADER_LENGTH)
        outcomes[index] = Outcome(
            200, body=encoded.body, header_length=int(length) if length else None
        )
    done = [o for o in outcomes if o is not None]
    check_invariant(len(envelopes), done)
    return done


def _record_shadow(
    capture: DataCapture,
    item: BatchItem,
    body: tuple[Payload, str],
    *,
    answer: bytes,
    primary: int,
    latency_ms: float,
) -> None:
    """A shadow copy's exchange (its batch's latency), recorded as a shadow's."""
    payload = body[0]
    request = payload() if callable(payload) else bytes(payload)
    version = item.version if item.version is not None else 0
    record_shadow(
        capture,
        item.model,
        version,
        request=request,
        answer=answer,
        primary=primary,
        latency_ms=latency_ms,
    )


def _offer(
    capture: DataCapture,
    server: ModelServer,
    item: BatchItem,
    version: int,
    *,
    body: tuple[Payload, str],
    encoded: EncodedResponse,
) -> None:
    try:
        served = server.resolver.resolve(item.model, version)  # cached: it just ran
    except LambdaServeError:
        return
    answer = (encoded.body, encoded.headers.get("content-type", JSON))
    offer_served(capture, served, body, answer)


def _item(
    payloads: PayloadStore, envelope: RequestEnvelope
) -> tuple[BatchItem, tuple[Payload, str]]:
    """The envelope's request, and its body as sent: the stored bytes of a large (or
    binary) request, else the v2 document the envelope carries (serialized if captured)."""
    if envelope.payload_key:
        if envelope.payload_key != request_key(envelope.id):
            # A request may only name its own stored body, never another client's.
            raise InvalidInput(
                f"payload_key must be {request_key(envelope.id)!r} (requests/<id>), "
                f"got {envelope.payload_key!r}"
            )
        body = payloads.get(envelope.payload_key)
        request = parse_infer_request(body, envelope.header_length)
        kind = JSON if envelope.header_length is None else "application/octet-stream"
        return BatchItem(envelope.model_name, envelope.model_version, request), (body, kind)
    document = envelope.request_document()
    request = parse_infer_document(document, memoryview(b""))
    sent: tuple[Payload, str] = (partial(orjson.dumps, envelope.request), JSON)
    return BatchItem(envelope.model_name, envelope.model_version, request), sent


class InProcessInvoker:
    """Locally (and in ECS workers) the batch runs in the same process."""

    def __init__(
        self,
        server: Callable[[], ModelServer],
        payloads: PayloadStore,
        capture: DataCapture | None = None,
    ) -> None:
        self._server = server
        self._payloads = payloads
        self._capture = capture

    def invoke(self, envelopes: Sequence[RequestEnvelope]) -> list[Outcome]:
        return run_envelopes(self._server(), self._payloads, envelopes, self._capture)


@dataclass(frozen=True)
class QueueMessage:
    """One SQS message as the batcher sees it."""

    message_id: str
    body: str
    receive_count: int = 1
    # the sender's trace context (its ``traceparent`` attribute, else ``AWSTraceHeader``)
    trace: TraceContext | None = None


@dataclass(frozen=True)
class Accepted:
    message: QueueMessage
    envelope: RequestEnvelope


def message_trace(traceparent: str | None, aws_trace_header: str | None) -> TraceContext | None:
    """A queued request's trace context, from its message's ``traceparent`` attribute, else
    its ``AWSTraceHeader`` system attribute (``queued.submit`` sets both)."""
    return propagation.from_traceparent(traceparent) or propagation.from_xray(aws_trace_header)


def _batcher_span(entry: Accepted) -> tuple[str, TraceContext, str] | None:
    """The batcher's span of a request that carries a trace: (the traceparent the batch
    invoke carries, the span, its parent); None for an untraced request."""
    sender = entry.message.trace or propagation.from_traceparent(entry.envelope.traceparent)
    if sender is None:
        return None
    span = sender.child()
    return span.traceparent, span, sender.span_id


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
        if envelope.shadow_of is not None:
            return Accepted(message, envelope)  # no result to look up, no deadline to keep
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
        started = self._clock()
        spans = [_batcher_span(a) for a in accepted]
        envelopes = [
            a.envelope if span is None else a.envelope.model_copy(update={"traceparent": span[0]})
            for a, span in zip(accepted, spans, strict=True)
        ]
        try:
            return self._run_traced(accepted, envelopes)
        finally:
            ended = self._clock()
            for span in spans:
                if span is not None:
                    propagation.record(
                        "lambdaserve-batcher",
                        span[1],
                        span[2],
                        (started, ended),
                        {"batch_size": len(accepted)},
                    )

    def _run_traced(self, accepted: list[Accepted], envelopes: list[RequestEnvelope]) -> set[str]:
        try:
            outcomes = self._invoker.invoke(envelopes)
        except Exception as exc:  # throttling, timeouts, the infer function failing
            logger.warning("invoking inference failed: %s", exc)
            return self._retry_or_give_up(accepted, f"inference failed: {exc}")
        if len(outcomes) != len(accepted):
            raise AssertionError(f"{len(outcomes)} results for {len(accepted)} requests")
        retry = set()
        for entry, outcome in zip(accepted, outcomes, strict=True):
            if outcome.retry:
                retry |= self._retry_or_give_up([entry], outcome.error, outcome.http_status)
                continue
            try:
                self._deliver(entry, outcome)
            except Exception as exc:
                logger.warning("storing the result of %s failed: %s", entry.envelope.id, exc)
                retry.add(entry.message.message_id)
        return retry

    def _deliver(self, entry: Accepted, outcome: Outcome) -> None:
        """The result written (and replied): the end of the request's trace."""
        if outcome.succeeded:
            self._finish(
                entry.envelope,
                SUCCESS,
                200,
                outcome.body,
                "",
                body_key=outcome.body_key,
                header_length=outcome.header_length,
            )
        else:
            self._finish(entry.envelope, ERROR, outcome.http_status, None, outcome.error)

    def _retry_or_give_up(
        self, accepted: list[Accepted], reason: str, http_status: int = 503
    ) -> set[str]:
        retry = set()
        for entry in accepted:
            if entry.envelope.shadow_of is not None:
                # a shadow is never retried: it would run late, and its copy is only a sample
                logger.warning("shadow copy %s dropped: %s", entry.envelope.id, reason)
                self._finish(entry.envelope, ERROR, http_status, None, reason)
                continue
            retry.add(entry.message.message_id)
            if entry.message.receive_count >= self._max_receive_count:
                # Last delivery: the message goes to the DLQ, the request gets its answer.
                self._finish(
                    entry.envelope,
                    ERROR,
                    http_status,
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
        *,
        body_key: str | None = None,
        header_length: int | None = None,
    ) -> None:
        if envelope.shadow_of is not None:  # recorded as it ran (run_envelopes): no result
            if envelope.payload_key and envelope.payload_key == request_key(envelope.id):
                self._payloads.delete(envelope.payload_key)
            return
        if not self._results.complete(
            envelope.id,
            status,
            http_status,
            body,
            error,
            model=envelope.model_name,
            body_key=body_key,
            header_length=header_length,
        ):
            return  # another delivery finished it first
        if envelope.payload_key and envelope.payload_key == request_key(envelope.id):
            self._payloads.delete(envelope.payload_key)
        if envelope.reply_to and self._send_reply is not None:
            reply: dict[str, Any] = {
                "id": envelope.id,
                "status": status,
                "http_status": http_status,
            }
            if error:
                reply["error"] = error
            inline = self._payloads.get(body_key) if body_key is not None else body
            # a body over the limit on its own is never parsed and written again to find out
            too_large = inline is not None and len(inline) > SQS_MESSAGE_LIMIT
            message = b"" if too_large else orjson.dumps(_with_body(reply, inline, header_length))
            if too_large or len(message) > SQS_MESSAGE_LIMIT:
                # too large for one message: where the result's body lies (stored now if the
                # status kept it inline)
                stored = body_key or self._payloads.put_result(envelope.id, inline or b"")
                message = orjson.dumps({**reply, "body_key": stored, "too_large_to_inline": True})
            self._send_reply(envelope.reply_to, message)


def _with_body(
    reply: dict[str, Any], body: bytes | None, header_length: int | None
) -> dict[str, Any]:
    """The reply with the response inline: v2 JSON as JSON, a binary body base64."""
    if body is None:
        return reply
    if header_length is not None:
        return {
            **reply,
            "response_base64": base64.b64encode(body).decode(),
            "header_length": header_length,
        }
    return {**reply, "response": orjson.loads(body)}
