"""``lambdaserve serve``: the inference API (HTTP) with the dynamic batcher, for ECS tasks."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp

from lambdaserve.apps.access_log import AccessLog
from lambdaserve.apps.front_door import FrontDoor
from lambdaserve.apps.inference import create_inference_app
from lambdaserve.apps.slow_clients import BodyTimeout
from lambdaserve.errors import InvalidInput
from lambdaserve.serving.prefetch import Prefetcher
from lambdaserve.serving.server_batcher import server_batcher
from lambdaserve.settings import get_settings


def build_serving_app(batching: bool = True, prefetch: bool = False) -> BodyTimeout:
    """The inference app behind its front door; with ``batching``, v2 infer goes through the
    dynamic batcher; with ``prefetch``, newly READY default versions are downloaded into the
    cache in the background (LAMBDASERVE_PREFETCH_INTERVAL_S)."""
    from lambdaserve.handlers import infer

    settings = get_settings()
    refresher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="catalog-refresh")
    infer.server().resolver.refresh_in_background(refresher.submit)
    if prefetch and settings.prefetch_interval_s > 0:
        Prefetcher(infer.server, settings.prefetch_interval_s).start()
    if not batching:
        return BodyTimeout(
            FrontDoor(infer.fastapi_app(), lambda: settings.max_request_bytes),
            settings.client_timeout_s,
        )

    return BodyTimeout(
        FrontDoor(batching_inference_app(), lambda: settings.max_request_bytes),
        settings.client_timeout_s,
    )


def batching_inference_app() -> FastAPI:
    """The inference app with v2 infer going through a dynamic batcher per model version."""
    from lambdaserve.handlers import infer

    settings = get_settings()
    batcher = server_batcher(infer.server, settings.default_max_batch_size)
    return create_inference_app(
        infer.server, lambda: settings.max_request_bytes, infer.submitter, batcher
    )


_BATCHING_ENV = "LAMBDASERVE_SERVE_BATCHING"
_LOGGING_ENV = "LAMBDASERVE_SERVE_LOGGING"


def serving_app_from_env() -> ASGIApp:
    """The app factory each uvicorn worker process calls (``serve`` with ``workers > 1``)."""
    level, access = os.environ.get(_LOGGING_ENV, "info:0").split(":")
    return _logged(
        build_serving_app(os.environ.get(_BATCHING_ENV, "1") == "1", prefetch=True),
        level,
        access == "1",
    )


def _logged(app: ASGIApp, log_level: str, access_log: bool) -> ASGIApp:
    from lambdaserve.server.logs import use_text_logs

    use_text_logs(log_level)
    return AccessLog(app) if access_log else app


def serve(
    host: str,
    port: int,
    *,
    batching: bool = True,
    workers: int = 1,
    log_level: str = "info",
    access_log: bool = False,
    metrics_port: int | None = None,
) -> None:
    """Serve the inference API with uvicorn until SIGINT/SIGTERM; with ``metrics_port``,
    TorchServe's metrics API beside it.

    One process runs Python on one core at a time: ``workers`` processes share the port
    (each with its own model copy and dynamic batcher), as TorchServe's workers and Triton's
    instances share a model.
    """
    import uvicorn

    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_level": "warning",
        "access_log": False,
        # no X-Forwarded-* rewriting, Server or Date headers: work per request for no one
        "proxy_headers": False,
        "server_header": False,
        "date_header": False,
        # headers must arrive within LAMBDASERVE_CLIENT_TIMEOUT_S (uvicorn has no such timer)
        "http": "lambdaserve.apps.slow_clients:HeaderTimeoutHttp",
    }
    if metrics_port and workers > 1:
        raise InvalidInput(
            "--metrics-port needs --workers 1: each worker process counts only what it served, "
            "and a scrape would reach one of them; scale out by tasks with one worker each"
        )
    print(_banner(host, port, batching, workers, access_log, metrics=metrics_port), flush=True)
    if workers <= 1:
        app: ASGIApp = build_serving_app(batching, prefetch=True)
        if metrics_port:
            app = _with_metrics_api(app, host, metrics_port)
        uvicorn.run(_logged(app, log_level, access_log), **options)
        return
    os.environ[_BATCHING_ENV] = "1" if batching else "0"
    os.environ[_LOGGING_ENV] = f"{log_level}:{int(access_log)}"
    uvicorn.run(
        "lambdaserve.server.serve:serving_app_from_env", factory=True, workers=workers, **options
    )


def _with_metrics_api(app: ASGIApp, host: str, port: int) -> ASGIApp:
    """Start TorchServe's metrics API on ``port``; ``app``'s responses counted for it."""
    from lambdaserve.handlers import infer
    from lambdaserve.server.background import start_metrics_api

    _, responses = start_metrics_api(host, port, lambda: infer.server().stats)
    return responses.watch(app)


def _banner(
    host: str, port: int, batching: bool, workers: int, access_log: bool, *, metrics: int | None
) -> str:
    settings = get_settings()
    where = settings.endpoint_url or f"AWS ({settings.region})"
    return "\n".join(
        [
            "lambdaserve serve is running",
            f"  inference API     http://{host}:{port}/v2  (KServe v2 + Triton extensions; "
            "/predictions/<model>; /docs)",
            f"  catalog           {settings.table} via {where}; models from s3://"
            f"{settings.bucket}/{settings.models_prefix}",
            f"  batching          {'dynamic, per model version' if batching else 'off'}; "
            f"{workers} worker process{'es' if workers > 1 else ''}",
            f"  access log        {'on' if access_log else 'off (--access-log)'}",
            f"  metrics           http://{host}:{port}/metrics (Triton's names)"
            + (f"; http://{host}:{metrics}/metrics (TorchServe's)" if metrics else ""),
            "Ctrl-C stops it.",
        ]
    )
