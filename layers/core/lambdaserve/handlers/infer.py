"""The infer function: the HTTP API (Mangum) and the batch entry point the batcher calls."""

from __future__ import annotations

import base64
import os
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import orjson
from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdaserve.apps.v2_calls import V2_INFER, check_body_size, header_length_value, v2_infer
from lambdaserve.catalog.repository import check_model_name
from lambdaserve.errors import InvalidInput, LambdaServeError
from lambdaserve.handlers.snapstart import register as register_snapstart_hooks
from lambdaserve.handlers.snapstart import renew_randomness
from lambdaserve.metrics.custom import CUSTOM_METRICS
from lambdaserve.metrics.emf import InvocationMetrics
from lambdaserve.metrics.stats import StatsRegistry
from lambdaserve.protocol.content_encoding import decode_body
from lambdaserve.protocol.http_status import status_for
from lambdaserve.protocol.limits import response_too_large
from lambdaserve.protocol.v2 import HEADER_LENGTH
from lambdaserve.runtimes.registry import runtime_named
from lambdaserve.services.inference import build_model_server
from lambdaserve.serving.model_server import ModelServer
from lambdaserve.serving.preload import preload_models
from lambdaserve.settings import get_settings

if TYPE_CHECKING:
    from fastapi import FastAPI
    from mangum import Mangum

    from lambdaserve.queued.invokers import Answered
    from lambdaserve.queued.results import PayloadStore, RequestEnvelope
    from lambdaserve.queued.server_mode import ServerModeRouter
    from lambdaserve.queued.submit import AsyncSubmitter

logger = Logger(service="lambdaserve-infer")
copy_config_to_registered_loggers(source_logger=logger, include={"lambdaserve"})


invocation_metrics = InvocationMetrics("lambdaserve-infer")
CUSTOM_METRICS.add_listener(invocation_metrics.record_custom)


@cache
def server() -> ModelServer:
    """Module-scope singleton: loaded models survive across warm invocations."""
    stats = StatsRegistry(invocation_metrics.record, invocation_metrics.record_cache)
    return build_model_server(get_settings(), stats=stats)


@cache
def submitter() -> AsyncSubmitter:
    """``Prefer: respond-async``: results store + requests queue."""
    from lambdaserve.queued.submit import AsyncSubmitter
    from lambdaserve.services.queues import build_queue_services

    settings = get_settings()
    queue = build_queue_services(settings)
    return AsyncSubmitter(
        server,
        queue.results,
        queue.payloads,
        queue.sqs,
        queue.requests_queue_url,
        gpu_queue_url=queue.gpu_queue_url,
        reply_to_allowed=settings.reply_to_allowed,
    )


@cache
def fastapi_app() -> FastAPI:
    """The inference app (every route), built on first use: a cold start that only serves
    the direct v2 path imports no FastAPI, pydantic or OpenAPI models."""
    from lambdaserve.apps.inference import create_inference_app

    return create_inference_app(
        _current_server, lambda: get_settings().max_request_bytes, _current_submitter
    )


def _current_server() -> ModelServer:
    """``server`` looked up when called, not captured when the app is built (tests swap it)."""
    return server()


def _current_submitter() -> AsyncSubmitter:
    return submitter()


@cache
def asgi() -> Mangum:
    """Every route but the direct v2 infer: the app behind Mangum."""
    from mangum import Mangum

    from lambdaserve.apps.response_limit import ResponseLimit

    return Mangum(ResponseLimit(fastapi_app(), get_settings().max_response_bytes), lifespan="off")


@cache
def server_mode() -> ServerModeRouter | None:
    """Where synchronous requests for KIND_GPU models go (LAMBDASERVE_SERVER_URL), or None."""
    settings = get_settings()
    if not settings.server_url:
        return None
    from lambdaserve.queued.server_mode import Queue, ServerModeRouter

    def wants_server(model: str) -> bool:
        return server().resolver.config(model).instance_kind == "GPU"

    # looked up per call: the singletons are built lazily (and swapped by tests)
    queue = Queue(
        submit=lambda *args: submitter().submit(*args),
        result=lambda request_id: submitter().result(request_id),
        number=lambda model, text: server().resolver.number(model, text),  # noqa: PLW0108
    )
    return ServerModeRouter(settings.server_url, wants_server, queue, wait_s=settings.server_wait_s)


def api_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """API Gateway (HTTP API): requests for server-mode models forwarded, v2 infer answered
    directly, every other route via FastAPI."""
    try:
        parsed = APIGatewayProxyEventV2(event)
        routed = _server_mode(parsed)
        if routed is not None:
            return routed
        direct = _direct_infer(parsed)
        return direct if direct is not None else dict(asgi()(event, context))
    finally:
        invocation_metrics.flush()


def _server_mode(event: APIGatewayProxyEventV2) -> dict[str, Any] | None:
    """A request for a model that server mode serves, answered there (or queued)."""
    router = server_mode()
    if router is None or event.get("version") != "2.0":
        return None
    from lambdaserve.queued.server_mode import HttpCall

    try:
        answer = router.route(
            HttpCall(
                method=event.request_context.http.method,
                path=event.raw_path,
                query=event.raw_query_string or "",
                headers={k.lower(): v for k, v in (event.headers or {}).items()},
                body=_body_bytes(event),
            )
        )
    except LambdaServeError as exc:
        return _http_response(status_for(exc), orjson.dumps({"error": exc.message}), {})
    if answer is None:
        return None
    return _http_response(answer.status, answer.body, answer.headers)


def _direct_infer(event: APIGatewayProxyEventV2) -> dict[str, Any] | None:
    """``POST /v2/models/{m}[/versions/{v}]/infer`` without the ASGI stack.

    The same domain call as the FastAPI route; the ASGI round trip (Mangum, middleware,
    routing) cost several times a small model's run on the warm path.
    """
    if event.get("version") != "2.0" or event.request_context.http.method != "POST":
        return None
    if "respond-async" in (event.headers or {}).get("prefer", ""):
        return None  # async submission goes through the app
    match = V2_INFER.match(event.raw_path)
    if match is None:
        return None
    headers = {k.lower(): v for k, v in (event.headers or {}).items()}
    try:
        body = _body_bytes(event)
        limit = get_settings().max_request_bytes
        check_body_size(len(body), limit)
        body = decode_body(body, headers.get("content-encoding"), limit)
        model = check_model_name(unquote(match.group(1)))
        version = server().resolver.number(model, unquote(match.group(2) or "") or None)
        encoded = v2_infer(
            server(), model, version, body, header_length_value(headers.get(HEADER_LENGTH))
        )
        answer = _http_response(200, encoded.body, encoded.headers)
        limit = get_settings().max_response_bytes
        if limit and len(answer["body"]) > limit:
            raise response_too_large(len(answer["body"]), limit)
    except LambdaServeError as exc:
        return _http_response(status_for(exc), orjson.dumps({"error": exc.message}), {})
    except Exception:
        logger.exception("unhandled error on POST %s", event.raw_path)
        error = {"error": "internal error; the server log has the details"}
        return _http_response(500, orjson.dumps(error), {})
    return answer


def _body_bytes(event: APIGatewayProxyEventV2) -> bytes:
    if event.is_base64_encoded:
        return base64.b64decode(event.body or "")
    return (event.body or "").encode()


def _http_response(status: int, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    headers = {"content-type": "application/json", **headers}
    binary = headers["content-type"] != "application/json"
    return {
        "statusCode": status,
        "headers": headers,
        "body": base64.b64encode(body).decode() if binary else body.decode(),
        "isBase64Encoded": binary,
    }


def batch_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """``{"requests": [envelope, ...]}`` -> ``{"results": [...]}``, the batcher's call.

    An envelope is a v2 request plus ``model_name`` (and optional ``model_version``, ``id``),
    or ``payload_key`` pointing at a large request in S3. N in, N out, in order; each result
    is ``{"status": 200, "response": <v2 response>}`` (binary: ``body_base64`` and
    ``header_length``; moved to S3 to stay under 6 MB: ``body_key``) or
    ``{"status": 4xx/5xx, "error": ...}``.
    """
    from lambdaserve.queued.inference import run_envelopes
    from lambdaserve.queued.invokers import answer_batch
    from lambdaserve.queued.results import parse_envelope

    requests = event.get("requests")
    if not isinstance(requests, list):
        raise InvalidInput('the batch event needs "requests": a list of request envelopes')
    envelopes: list[RequestEnvelope] = []
    answers: list[Answered | None] = []
    for raw in requests:
        try:
            envelopes.append(parse_envelope(orjson.dumps(raw)))
            answers.append(None)
        except LambdaServeError as exc:
            answers.append({"status": status_for(exc), "error": exc.message})
    outcomes = iter(run_envelopes(server(), payloads(), envelopes))
    pending = iter(envelopes)
    filled: list[Answered] = [
        answer if answer is not None else (next(pending).id, next(outcomes)) for answer in answers
    ]
    results = answer_batch(filled, payloads())
    invocation_metrics.flush()
    return {"results": results}


@cache
def payloads() -> PayloadStore:
    from lambdaserve.queued.results import PayloadStore
    from lambdaserve.services.aws import AwsClients

    settings = get_settings()
    return PayloadStore(AwsClients(settings).s3, settings.bucket)


def before_snapshot() -> None:
    """SnapStart, before the snapshot: import every route's code and load the models to
    preload, so a restored instance starts with them in memory."""
    asgi()
    prepare_instance()
    preload_models(server(), get_settings().preload_bytes)


def after_restore() -> None:
    """SnapStart, after a restore: new AWS clients (connections and credentials are not
    carried over), fresh catalog views and randomness; the loaded models are kept."""
    snapshotted = server()
    server.cache_clear()
    submitter.cache_clear()
    payloads.cache_clear()
    server().adopt_loaded(snapshotted)
    renew_randomness()


def prepare_instance() -> None:
    """Lambda's init phase: the AWS clients (botocore loading its service models: 0.1-0.2 s)
    and the default runtime's import, so the first request pays only the catalog read, the
    download and the session."""
    server()
    runtime_named("onnxruntime")


if get_settings().cold_start == "snapstart":
    register_snapstart_hooks(before_snapshot, after_restore)
elif os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
    prepare_instance()
