"""The infer function: the HTTP API (requests for server-mode models forwarded, v2 infer
answered directly, every other route through the inference app behind Mangum) and the batch
entry point the batcher calls. Each handler parses its event, makes one call on this
process's objects (``wiring.process``) and shapes the answer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

from lambdaserve.metrics.custom import CUSTOM_METRICS
from lambdaserve.publishing.serving_check import EVENT_KEY as CHECK_EVENT
from lambdaserve.wiring.process import Process, current

if TYPE_CHECKING:  # imported by the first request (or Lambda's init), not by this import
    from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from lambdaserve.apps.v2_calls import HttpAnswer

logger = Logger(service="lambdaserve-infer")
copy_config_to_registered_loggers(source_logger=logger, include={"lambdaserve"})
# a model's own metrics (pb_utils.MetricFamily, context.metrics) reach this process's EMF lines
CUSTOM_METRICS.add_listener(lambda *args, **kw: current().metrics.record_custom(*args, **kw))  # noqa: PLW0108 (per call: tests install their own process)


def api_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """API Gateway (HTTP API) events, and the manage function's load check (direct invoke)."""
    process = current()
    if CHECK_EVENT in event:  # imported only for the check: no request pays for it
        from lambdaserve.handlers import load_check

        return load_check.handle(event, process.server())
    from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2

    from lambdaserve.handlers.http_api import lambda_answer

    try:
        parsed = APIGatewayProxyEventV2(event)
        answer = _forwarded(process, parsed) or _direct_infer(process, parsed)
        return (
            lambda_answer(answer)
            if answer is not None
            else dict(process.lambda_app(event, context))
        )
    finally:
        process.metrics.flush()


def _forwarded(process: Process, event: APIGatewayProxyEventV2) -> HttpAnswer | None:
    """A request for a model that server mode serves, answered there (or queued)."""
    router = process.forwarder
    if router is None or event.get("version") != "2.0":
        return None
    from lambdaserve.apps.v2_calls import HttpAnswer, error_answer
    from lambdaserve.handlers.http_api import http_call_of

    call = http_call_of(event)
    try:
        answer = router.route(call)
    except Exception as exc:
        return error_answer(exc, call.method, event.raw_path)
    return None if answer is None else HttpAnswer(answer.status, answer.body, answer.headers)


def _direct_infer(process: Process, event: APIGatewayProxyEventV2) -> HttpAnswer | None:
    """``POST /v2/models/{m}[/versions/{v}]/infer`` through the one v2 door, without the
    ASGI stack (Mangum, middleware and routing cost several times a small model's run)."""
    if event.get("version") != "2.0" or event.request_context.http.method != "POST":
        return None
    from lambdaserve.apps.v2_calls import (
        V2_INFER,
        answer_v2_now,
        encoded_answer,
        error_answer,
        read_v2_call,
    )
    from lambdaserve.handlers.http_api import body_of, check_answer_size, headers_of

    headers = headers_of(event)
    match = V2_INFER.match(event.raw_path)
    if match is None or "respond-async" in headers.get("prefer", ""):
        return None  # async submission goes through the app
    settings = process.settings
    try:
        call = read_v2_call(
            unquote(match.group(1)),
            unquote(match.group(2) or ""),
            headers,
            body_of(event),
            settings.max_request_bytes,
        )
        answer = encoded_answer(answer_v2_now(process.plane, call))
        check_answer_size(answer, settings.max_response_bytes)
    except Exception as exc:
        return error_answer(exc, "POST", event.raw_path)
    return answer


def batch_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """``{"requests": [envelope, ...]}`` -> ``{"results": [...]}``, the batcher's call: N in,
    N out, in order, errors per item (``queued.invokers.answer_envelopes`` says the shapes)."""
    from lambdaserve.queued.invokers import answer_envelopes

    process = current()
    try:
        return {"results": answer_envelopes(process.server(), process.payloads, event)}
    finally:
        process.metrics.flush()
