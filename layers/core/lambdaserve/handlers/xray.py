"""The functions' traces: AWS X-Ray through Powertools' Tracer (docs/operations.md, "One
trace across the serverless path", says why X-Ray and not the ADOT layer: the infer function
is a container image, which takes no layer, and the cold start it costs).

Where the template's ``Tracing`` parameter is Active (or PassThrough), Lambda samples the
invocation and passes its trace header in ``_X_AMZN_TRACE_ID``; the Tracer (created at
init, here) patches botocore and http.client, so each S3, DynamoDB, SQS and Lambda call and
each forwarded request is a subsegment of the handler's. Where it is Disabled the template
sets ``POWERTOOLS_TRACE_DISABLED`` and nothing of X-Ray is imported.

Either way the entry point sets the hop's trace context (``tracing.propagation.CURRENT``)
for what it sends on (the SQS message's attributes, the forwarded request's traceparent):
- an HTTP request with a W3C ``traceparent`` joins the caller's trace: the invocation's
  X-Ray entities are made under the caller's span (Lambda's own segment stays where API
  Gateway's ``X-Amzn-Trace-Id`` put it);
- otherwise it continues Lambda's trace header, which holds API Gateway's trace.
The batcher and the batch invoke run requests of many traces at once: their spans are
recorded per request as segments of the request's trace (``XRaySegments``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import wraps
from typing import Any

from lambdaserve.tracing import propagation
from lambdaserve.tracing.propagation import TraceContext

Handler = Callable[[dict[str, Any], Any], Any]
LAMBDA_HEADER = "_X_AMZN_TRACE_ID"
_tracer: list[Any] = []  # the process's Tracer, once made


def enabled() -> bool:
    """Powertools' own rule: its Tracer works in Lambda (``LAMBDA_TASK_ROOT``), unless
    ``POWERTOOLS_TRACE_DISABLED`` (the template's ``Tracing: Disabled``) switches it off."""
    disabled = os.environ.get("POWERTOOLS_TRACE_DISABLED", "false").lower() in ("1", "true")
    return bool(os.environ.get("LAMBDA_TASK_ROOT")) and not disabled


def tracer() -> Any | None:
    """The process's Tracer (made once, at the function's init), or None when tracing is
    off. Only botocore and http.client are patched: the calls the path makes."""
    if not _tracer and enabled():
        from aws_lambda_powertools import Tracer

        made = Tracer(patch_modules=("botocore", "httplib"))
        propagation.set_sink(XRaySegments(made.provider))
        _tracer.append(made)
    return _tracer[0] if _tracer else None


class XRaySegments:
    """Spans recorded per request (``propagation.record``) as X-Ray segments of the
    request's trace, sent through the recorder's emitter (UDP to the daemon Lambda runs)."""

    def __init__(self, recorder: Any) -> None:
        self._recorder = recorder

    def record(
        self,
        name: str,
        span: TraceContext,
        parent_id: str,
        times: tuple[float, float],
        annotations: Mapping[str, str | int],
    ) -> None:
        from aws_xray_sdk.core.models.segment import Segment

        segment = Segment(name, entityid=span.span_id, traceid=span.xray_root, parent_id=parent_id)
        segment.start_time = times[0]
        segment.origin = "AWS::Lambda::Function"
        for key, value in annotations.items():
            segment.put_annotation(key, value)
        segment.close(times[1])
        self._recorder.emitter.send_entity(segment)


def capture(handler: Handler) -> Handler:
    """``handler`` run under its hop's trace context (and, tracing on, as Powertools'
    ``## handler`` subsegment, boto3's calls under it)."""
    active = tracer()

    @wraps(handler)
    def untraced(event: dict[str, Any], context: Any) -> Any:
        token = propagation.CURRENT.set(_incoming(event))
        try:
            return handler(event, context)
        finally:
            propagation.CURRENT.reset(token)

    if active is None:
        return untraced

    @wraps(handler)
    def inside(event: dict[str, Any], context: Any) -> Any:
        entity = active.provider.get_trace_entity()
        here = (
            TraceContext(entity.trace_id[2:].replace("-", ""), entity.id, bool(entity.sampled))
            if entity is not None and entity.trace_id
            else _incoming(event)
        )
        token = propagation.CURRENT.set(here)
        try:
            return handler(event, context)
        finally:
            propagation.CURRENT.reset(token)

    captured = active.capture_lambda_handler(inside)

    @wraps(handler)
    def traced(event: dict[str, Any], context: Any) -> Any:
        caller = _caller(event)
        lambdas = os.environ.get(LAMBDA_HEADER)
        if caller is not None:  # the X-Ray SDK makes its facade from this header
            os.environ[LAMBDA_HEADER] = caller.xray_header
        try:
            return captured(event, context)
        finally:
            if caller is not None:
                _restore(lambdas)

    return traced


def _caller(event: dict[str, Any]) -> TraceContext | None:
    """An HTTP API request's own ``traceparent`` (a caller's trace to join)."""
    headers = event.get("headers") if isinstance(event, dict) else None
    if not isinstance(headers, dict):
        return None
    for name, value in headers.items():
        if name.lower() == "traceparent":
            return propagation.from_traceparent(value)
    return None


def _incoming(event: dict[str, Any]) -> TraceContext | None:
    """The hop's context without X-Ray: the caller's traceparent, else API Gateway's
    ``X-Amzn-Trace-Id``, else Lambda's trace header."""
    headers = event.get("headers") if isinstance(event, dict) else None
    lowered = {k.lower(): v for k, v in headers.items()} if isinstance(headers, dict) else {}
    return propagation.from_headers(lowered) or propagation.from_xray(os.environ.get(LAMBDA_HEADER))


def _restore(value: str | None) -> None:
    if value is None:
        os.environ.pop(LAMBDA_HEADER, None)
    else:
        os.environ[LAMBDA_HEADER] = value
