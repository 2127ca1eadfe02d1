"""``lambdaserve serve``: the inference API (HTTP and gRPC) with the dynamic batcher, for ECS
tasks."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from starlette.types import ASGIApp

from lambdaserve.apps.inference import create_inference_app
from lambdaserve.processes import siblings
from lambdaserve.processes.asgi.access_log import AccessLog
from lambdaserve.processes.asgi.front_door import FrontDoor
from lambdaserve.processes.asgi.slow_clients import KEEP_ALIVE_S, BodyTimeout
from lambdaserve.processes.drain import DrainOnSigterm
from lambdaserve.processes.replica_contract import (
    BATCHING_ENV,
    GRPC_ENV,
    LOGGING_ENV,
    ServeOptions,
)
from lambdaserve.processes.serve_banner import banner
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.serving.readiness import warm_up_in_background
from lambdaserve.serving.residency.prefetch import Prefetcher
from lambdaserve.settings import get_settings
from lambdaserve.wiring.process import current

if TYPE_CHECKING:  # imported where a server beside serve starts
    from lambdaserve.processes.background import BackgroundServer


def build_serving_app(
    batching: bool = True,
    prefetch: bool = False,
    grpc: GrpcFlags | None = None,
    own_process: bool = False,
) -> ASGIApp:
    """The inference app behind its front door; with ``batching``, v2 infer goes through the
    dynamic batcher; with ``prefetch``, newly READY default versions are downloaded into the
    cache in the background (LAMBDASERVE_PREFETCH_INTERVAL_S); with ``grpc``, every peer's
    gRPC service starts with the app, over the same data plane and batchers (the process's
    one, ``Process.serving_plane``; the first call decides its batching). With
    ``own_process`` (``serve``, each of its replicas) the app owns its process, whose garbage
    collector it tunes for serving; an app hosted in another process (a test's) leaves it be."""
    process = current()
    settings = process.settings
    # built before the model server, so the models' calls to models take this plane too
    plane = process.serving_plane(batching=batching, readiness=True)
    refresher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="catalog-refresh")
    process.server().resolver.refresh_in_background(refresher.submit)
    if prefetch and settings.prefetch_interval_s > 0:
        Prefetcher(lambda: process.server().residency, settings.prefetch_interval_s).start()
    http = inference_app_over(plane)
    app: ASGIApp = BodyTimeout(
        FrontDoor(http, lambda: settings.max_request_bytes), settings.client_timeout_s
    )
    app = with_trace_context(app, plane)
    group = siblings.from_env()
    if group is not None:  # one replica of several: /metrics answers for them all
        from lambdaserve.apps.metrics_route import queued_in
        from lambdaserve.metrics.cpu_cost import CpuCost, CpuCostMetrics
        from lambdaserve.metrics.prometheus import metrics_registry
        from lambdaserve.processes.asgi.shared_metrics import SharedMetrics

        pending = queued_in(plane.batcher, plane) if plane.batcher else None
        own = metrics_registry(lambda: process.server().stats, pending)
        own.register(CpuCostMetrics(CpuCost(lambda: process.server().stats)))
        app = SharedMetrics(app, own, group)
    return with_lifespan(app, plane, grpc, own_process)


def with_trace_context(app: ASGIApp, plane: InferenceDataPlane) -> ASGIApp:
    """In OpenTelemetry mode, ``app`` reading each request's W3C traceparent, so its spans
    are the caller's trace's; as it is otherwise."""
    if plane.tracer is None or plane.tracer.exporter is None:
        return app
    from lambdaserve.processes.asgi.trace_context import TraceContext

    return TraceContext(app)


def inference_app_over(plane: InferenceDataPlane) -> FastAPI:
    """The inference app over the process's serving plane (``Process.serving_plane``): its
    routes batch with the gRPC services' calls, as they share the plane's batchers."""
    process = current()
    return create_inference_app(
        plane, lambda: process.settings.max_request_bytes, process.submitter
    )


@dataclass(frozen=True)
class GrpcFlags:
    """The command line's gRPC choices: the port (0: off), and the management RPCs."""

    host: str
    port: int
    management: bool = False
    share_port: bool = False


async def _process_started() -> None:
    """The process's own start, from its interpreter's: the first load's cold start has it."""
    from lambdaserve.metrics.cold_starts import INIT, process_age_ms

    current().cold_starts.process_ready(INIT, process_age_ms())


def with_lifespan(
    app: ASGIApp, plane: InferenceDataPlane, flags: GrpcFlags | None, own_process: bool = False
) -> ASGIApp:
    """``app`` whose lifespan runs the gRPC services on ``flags.port`` (0 or None: off) and,
    at shutdown, unloads the loaded models (Python models' ``finalize`` runs). With the
    plane's readiness, startup begins the warm-up (ready once it ends) and SIGTERM drains;
    with ``own_process`` too, the process's garbage collector is tuned and frozen at ready
    (``gc.freeze`` is the whole process's: never in a process that hosts other things)."""
    from lambdaserve.processes.asgi.lifespan import Lifespan, Step

    async def unload_all() -> None:
        await asyncio.to_thread(plane.server().residency.close)
        if plane.tracer is not None:  # the traces held go to the trace file, as at Triton's exit
            plane.tracer.close()

    async def size_thread_pool() -> None:
        # the data plane's blocking calls (downloads, loads, catalog reads, model runs) go
        # to the loop's default executor: as many threads as Starlette's pool had, not
        # asyncio's cores + 4, so slow loads do not queue the fast calls behind them
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(_THREADS, thread_name_prefix="plane"))

    start: list[Step] = [size_thread_pool, _process_started] if own_process else [size_thread_pool]
    stop: list[Step] = [unload_all]
    readiness = plane.readiness
    group = siblings.from_env()
    if readiness is not None:
        settings = get_settings()

        async def warm_up() -> None:
            # in the background: live at once, ready once warm (the health check's grace
            # period covers the download); the budget is the disk cache's; one replica of
            # several is ready once all are (the health check reaches any one of them)
            then = group.warmed_then_wait if group is not None else None
            warm_up_in_background(plane.server, readiness, settings.cache_bytes, then)

        async def tune_gc() -> None:
            from lambdaserve.processes.gc_tuning import tune_for_serving

            tune_for_serving(readiness)  # before the warm-up: it freezes once ready

        start += [DrainOnSigterm(readiness, settings.drain_delay_s)]
        start += [tune_gc, warm_up] if own_process else [warm_up]
    if flags is not None and flags.port:
        from lambdaserve.apps.grpc.server import GrpcOptions, GrpcRunner

        runner = GrpcRunner(
            lambda: plane,
            GrpcOptions(
                host=flags.host,
                port=flags.port,
                max_request_bytes=get_settings().max_request_bytes,
                management=(lambda: current().manage.manager) if flags.management else None,
                share_port=flags.share_port,
                readiness=readiness,
                server=get_settings().grpc_server,
            ),
        )
        start.append(runner.start)
        stop.append(runner.stop)  # stopped first: in-flight calls drain, then models unload
    interval_s = get_settings().cost_interval_s
    if interval_s > 0:  # cost per model as EMF lines (an ECS task's logs reach CloudWatch)
        from lambdaserve.metrics.cpu_cost import CpuCost, emf_lines

        cost = CpuCost(lambda: plane.server().stats)
        writing: list[asyncio.Task[None]] = []

        async def write_cost() -> None:
            while True:
                await asyncio.sleep(interval_s)
                emf_lines(cost.update(), "lambdaserve-serve")

        async def start_cost() -> None:
            writing.append(asyncio.create_task(write_cost()))

        async def stop_cost() -> None:
            for task in writing:
                task.cancel()
            emf_lines(cost.update(), "lambdaserve-serve")  # the last period's share

        start.append(start_cost)
        stop.insert(0, stop_cost)
    if group is not None:  # last: the supervisor counts a replica that got here as started

        async def started() -> None:
            group.mark_started()

        start.append(started)
    return Lifespan(app, start, stop)


_THREADS = 40  # Starlette's (anyio's) default thread limit, which these calls had before


def serving_app_from_env() -> ASGIApp:
    """The app each replica serves (``serve --workers N``, N > 1)."""
    level, access = os.environ.get(LOGGING_ENV, "info:0").split(":")
    host, port, management = os.environ.get(GRPC_ENV, "127.0.0.1:0:0").rsplit(":", 2)
    grpc = GrpcFlags(host, int(port), management == "1", share_port=True)
    return _logged(
        build_serving_app(
            os.environ.get(BATCHING_ENV, "1") == "1", prefetch=True, grpc=grpc, own_process=True
        ),
        level,
        access == "1",
    )


def _logged(app: ASGIApp, log_level: str, access_log: bool) -> ASGIApp:
    from lambdaserve.processes.logs import use_text_logs

    use_text_logs(log_level)
    return AccessLog(app) if access_log else app


def serve(options: ServeOptions) -> None:
    """Serve the inference API with uvicorn until SIGINT/SIGTERM; with ``metrics_port``,
    TorchServe's metrics API beside it; with ``grpc_port``, every peer's gRPC services in the
    same event loop (and dynamic batcher); ``grpc_management`` adds the repository RPCs;
    ``management_port``, the management API (``make dev``'s, TorchServe's 8081).

    One process. ``serve --workers N`` is ``processes.supervisor.serve_replicas`` instead
    (the CLI chooses): N replicas share the ports, each with its own model copy and dynamic
    batcher, as TorchServe's workers and Triton's instances share a model.
    """
    import uvicorn

    host, port = options.host, options.port
    metrics_port, management_port = options.metrics_port, options.management_port
    print(banner(options, 1), flush=True)
    grpc = GrpcFlags(host, options.grpc_port, options.grpc_management)
    app: ASGIApp = build_serving_app(options.batching, prefetch=True, grpc=grpc, own_process=True)
    beside: list[BackgroundServer] = []
    if metrics_port:
        app = _with_metrics_api(app, host, metrics_port, beside)
    if management_port:
        from lambdaserve.processes.background import start_management_api

        beside.append(start_management_api(host, management_port, options.access_log))
    try:
        uvicorn.run(
            _logged(app, options.log_level, options.access_log), **uvicorn_options(host, port)
        )
    finally:
        # stopped before the interpreter exits: an event loop still running in a daemon
        # thread while Python finalizes can crash the process on its way out
        for server in beside:
            server.stop()


def uvicorn_options(host: str, port: int) -> dict[str, Any]:
    """uvicorn's settings for ``serve``, in its one process or in each replica."""
    return {
        "host": host,
        "port": port,
        "log_level": "warning",
        "access_log": False,
        # no X-Forwarded-* rewriting, Server or Date headers: work per request for no one
        "proxy_headers": False,
        "server_header": False,
        "date_header": False,
        "timeout_keep_alive": KEEP_ALIVE_S,
        # headers must arrive within LAMBDASERVE_CLIENT_TIMEOUT_S (uvicorn has no such timer)
        "http": "lambdaserve.processes.asgi.slow_clients:HeaderTimeoutHttp",
        # SIGTERM (processes.drain): what is in flight gets this long once the port closes
        "timeout_graceful_shutdown": get_settings().drain_timeout_s,
    }


def _with_metrics_api(
    app: ASGIApp, host: str, port: int, started: list[BackgroundServer]
) -> ASGIApp:
    """Start TorchServe's metrics API on ``port`` (added to ``started``); ``app``'s
    responses counted for it."""
    from lambdaserve.processes.background import start_metrics_api

    server, responses = start_metrics_api(host, port, lambda: current().server().stats)
    started.append(server)
    return responses.watch(app)
