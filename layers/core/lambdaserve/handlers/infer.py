"""The infer function: the HTTP API (requests for server-mode models forwarded, v2 infer
answered directly, every other route through the inference app behind Mangum) and the batch
entry point the batcher calls. Each handler parses its event, makes one call on this
process's objects (``wiring.process``) and shapes the answer."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

from lambdaserve.handlers import xray
from lambdaserve.metrics.custom import CUSTOM_METRICS
from lambdaserve.protocol.invocation import invocation_deadline
from lambdaserve.serving.residency.check_event import EVENT_KEY as CHECK_EVENT
from lambdaserve.tracing.propagation import from_traceparent, record, recording
from lambdaserve.wiring.process import current

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

logger = Logger(service="lambdaserve-infer")
copy_config_to_registered_loggers(source_logger=logger, include={"lambdaserve"})
# a model's own metrics (pb_utils.MetricFamily, context.metrics) reach this process's EMF lines
CUSTOM_METRICS.add_listener(lambda *args, **kw: current().metrics.record_custom(*args, **kw))  # noqa: PLW0108 (per call: tests install their own process)


@xray.capture
def api_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """API Gateway (HTTP API) events, and the manage function's load check (direct invoke)."""
    process = current()
    if CHECK_EVENT in event:  # imported only for the check: no request pays for it
        from lambdaserve.handlers import load_check

        return load_check.handle(event, process.server())
    # the request path (the v2 door, the data plane, the event classes): imported by the
    # first request, or by Lambda's init (snapstart.prepare_instance), not by this import
    from lambdaserve.handlers import http_api

    process.metrics.begin()
    try:
        with invocation_deadline(_remaining_ms(context)):
            answer = http_api.answer_without_app(process, event)
            return (
                http_api.lambda_answer(answer)
                if answer is not None
                else dict(process.lambda_app(event, context))
            )
    finally:
        process.metrics.flush()
        process.tallies.flush_if_due()  # a rollout judges the versions it serves


@xray.capture
def batch_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """``{"requests": [envelope, ...]}`` -> ``{"results": [...]}``, the batcher's call: N in,
    N out, in order, errors per item (``queued.invokers.answer_envelopes`` says the shapes)."""
    from lambdaserve.queued.invokers import answer_envelopes

    process = current()
    process.metrics.begin()
    started = time.time()
    try:
        with invocation_deadline(_remaining_ms(context)):
            answers = answer_envelopes(
                process.server(), process.payloads, event, process.data_capture
            )
        return {"results": answers}
    finally:
        process.metrics.flush()
        process.tallies.flush_if_due()  # a rollout judges the versions it serves
        if recording():
            _record_batch(event, (started, time.time()))


def _remaining_ms(context: LambdaContext | None) -> int | None:
    """How long this invocation may still run (None where the caller gave no context)."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return int(remaining()) if callable(remaining) else None


def _record_batch(event: dict[str, Any], times: tuple[float, float]) -> None:
    """The batch run as a span of each traced request's trace, under the batcher's span its
    envelope carries: one invoke serves requests of many traces."""
    requests = event.get("requests")
    envelopes = [e for e in requests if isinstance(e, dict)] if isinstance(requests, list) else []
    for envelope in envelopes:
        caller = from_traceparent(envelope.get("traceparent"))
        if caller is not None:
            annotations: dict[str, str | int] = {
                "model": str(envelope.get("model_name")),
                "batch_size": len(envelopes),
            }
            record("lambdaserve-infer", caller.child(), caller.span_id, times, annotations)
