"""``Prefer: respond-async``: validate now, record PENDING, enqueue, answer the id.

The envelope's routing fields are the server's alone: the model and version come from
the route, the deadline from ``parameters.timeout``, the payload key is generated here,
and ``reply_to`` is taken only when the deployment's allow-list names it. A client body
carries a v2 request (``id``, ``inputs``, ``outputs``, ``parameters``) and nothing else.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from lambdaserve.config.dynamic_batching import DynamicBatching
from lambdaserve.errors import InferenceError, InvalidInput, ModelNotFound
from lambdaserve.protocol.v2 import (
    HEADER_LENGTH,
    REQUEST_FIELDS,
    InferRequest,
    encode_infer_response,
    parse_infer_document,
    split_body,
)
from lambdaserve.queued.results import (
    ERROR,
    INLINE_LIMIT,
    SUCCESS,
    PayloadStore,
    RequestEnvelope,
    ResultRecord,
    ResultStore,
)
from lambdaserve.serving.binding import bind_inputs, check_batch_size, select_outputs
from lambdaserve.serving.data_plane import InferenceDataPlane, client_signature
from lambdaserve.serving.sequences.controls import flags_of
from lambdaserve.serving.version_resolver import ServedVersion
from lambdaserve.tracing.propagation import CURRENT, TraceContext

REPLY_TO = "reply_to"


def reply_to_allowed(queue_url: str, allowed: Sequence[str]) -> bool:
    """Exact queue URLs, or prefixes written with a trailing ``*``."""
    return any(
        queue_url.startswith(entry[:-1]) if entry.endswith("*") else queue_url == entry
        for entry in allowed
    )


def queue_level(batching: DynamicBatching | None, parameters: dict[str, Any], levels: int) -> int:
    """The priority level's queue (1 to ``levels``) a request waits in: its level as
    ``serve`` reads its ``priority`` parameter (0, absent or above the model's
    ``priority_levels``: ``default_priority_level``; a model without levels: 1), and a level
    below the deployment's last queue waits in that one."""
    level = batching.level_of(parameters) if batching is not None else 0
    return min(max(level, 1), max(levels, 1))


class AsyncSubmitter:
    """Accepts async requests. Models whose config asks for a GPU (``instance_group
    [{kind: KIND_GPU}]``) go to the GPU queue when there is one; the rest to the queue of
    their priority level (``level_queue_urls``, level 1 first; one level: the requests
    queue)."""

    def __init__(
        self,
        plane: InferenceDataPlane,
        results: ResultStore,
        payloads: PayloadStore,
        sqs: Any,
        queue_url: Callable[[], str],
        *,
        gpu_queue_url: Callable[[], str] | None = None,
        level_queue_urls: Sequence[Callable[[], str]] = (),
        reply_to_allowed: Sequence[str] = (),
    ) -> None:
        self._plane = plane
        self._results = results
        self._payloads = payloads
        self._sqs = sqs
        self._queue_url = queue_url
        self._gpu_queue_url = gpu_queue_url
        self._level_queue_urls = tuple(level_queue_urls) or (queue_url,)
        self._reply_to_allowed = tuple(reply_to_allowed)

    def submit(
        self, model: str, version: int | None, body: bytes, header_length: int | None
    ) -> str:
        document, binary = split_body(body, header_length)
        reply_to = self._reply_to(document)
        request = parse_infer_document(document, binary)  # a bad request is a 400 now
        served = self._plane.resolve_now(model, version)  # 404 / 503 now
        inputs = bind_inputs(request, client_signature(served))  # wrong shapes or names: 400 now
        if served.config.sequence_batching is not None:
            flags_of(model, request.parameters)  # a step without a sequence id: 400 now
        check_batch_size(inputs, model, served.config.max_batch_size)
        select_outputs(request, served.signature)
        request_id = uuid.uuid4().hex
        if reply_to is None and self._answered_from_cache(request_id, served, request):
            return request_id
        routing: dict[str, Any] = {
            "id": request_id,
            "model_name": model,
            "model_version": version,
            "deadline_ms": _deadline_ms(request.parameters),
            "reply_to": reply_to,
            "request_id": request.id or None,
        }
        if header_length is not None or len(body) > INLINE_LIMIT:
            envelope = RequestEnvelope(
                **routing,
                payload_key=self._payloads.put(request_id, body),
                header_length=header_length,
            )
        else:
            fields = {k: v for k, v in document.items() if k in REQUEST_FIELDS and k != "id"}
            envelope = RequestEnvelope(**routing, request=fields)
        self._results.create_pending(envelope)
        queue_url = self._queue_of(served, request.parameters)
        try:
            self._sqs.send_message(
                QueueUrl=queue_url(),
                MessageBody=orjson.dumps(envelope.to_message()).decode(),
                **_trace_attributes(CURRENT.get()),
            )
        except Exception as exc:
            self._results.complete(request_id, ERROR, 503, None, f"could not enqueue: {exc}")
            raise InferenceError("the request could not be queued; retry") from exc
        return request_id

    def _queue_of(self, served: ServedVersion, parameters: dict[str, Any]) -> Callable[[], str]:
        if served.config.instance_kind == "GPU" and self._gpu_queue_url is not None:
            return self._gpu_queue_url  # one level: the GPU service's own queue
        levels = self._level_queue_urls
        return levels[queue_level(served.config.dynamic_batching, parameters, len(levels)) - 1]

    def _answered_from_cache(
        self, request_id: str, served: ServedVersion, request: InferRequest
    ) -> bool:
        """A request the response cache holds is answered before it queues: its result is
        written at once, as the batch would have written it. (With ``reply_to`` it queues:
        the batch delivers the reply.)"""
        server = self._plane.server()
        cache = server.response_cache
        outputs = (
            None if cache is None else cache.answer_before_queueing(served, request, server.stats)
        )
        if outputs is None:
            return False
        encoded = encode_infer_response(served.model, served.version, request, outputs)
        length = encoded.headers.get(HEADER_LENGTH)
        self._results.complete(
            request_id,
            SUCCESS,
            200,
            encoded.body,
            model=served.model,
            header_length=int(length) if length else None,
        )
        return True

    def result(self, request_id: str) -> ResultRecord:
        record = self._results.get(request_id)
        if record is None:
            raise ModelNotFound(f"no request {request_id!r} (unknown, or its result expired)")
        return record

    def _reply_to(self, document: dict[str, Any]) -> str | None:
        """Refuse fields a v2 request does not have; ``reply_to`` only when allowed."""
        unknown = sorted(set(document) - REQUEST_FIELDS - {REPLY_TO})
        if unknown:
            raise InvalidInput(
                f"unknown top-level field(s) {', '.join(unknown)}: a v2 request has id, inputs, "
                "outputs and parameters; the model and version come from the URL, a deadline "
                "from parameters.timeout (microseconds)"
            )
        reply_to = document.get(REPLY_TO)
        if reply_to is None:
            return None
        if not isinstance(reply_to, str) or not reply_to_allowed(reply_to, self._reply_to_allowed):
            raise InvalidInput(
                f"reply_to {reply_to!r} is not a reply queue this deployment allows "
                "(LAMBDASERVE_REPLY_TO_ALLOWED); leave it out and poll status_url"
            )
        return reply_to


def _trace_attributes(context: TraceContext | None) -> dict[str, Any]:
    """The request's trace context on its message, for the batcher to continue: as X-Ray's
    ``AWSTraceHeader`` system attribute (what X-Ray's SQS integration reads) and as a W3C
    ``traceparent`` message attribute (what OpenTelemetry consumers read)."""
    if context is None:
        return {}
    return {
        "MessageSystemAttributes": {
            "AWSTraceHeader": {"DataType": "String", "StringValue": context.xray_header}
        },
        "MessageAttributes": {
            "traceparent": {"DataType": "String", "StringValue": context.traceparent}
        },
    }


def _deadline_ms(parameters: dict[str, Any]) -> int | None:
    """KServe/Triton's ``timeout`` parameter is in microseconds from now."""
    timeout = parameters.get("timeout")
    if timeout is None:
        return None
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout <= 0:
        raise InvalidInput("parameters.timeout is a positive number of microseconds")
    return int(time.time() * 1000 + timeout / 1000)
