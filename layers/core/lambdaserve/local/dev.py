"""``lambdaserve dev``: the whole system on this machine, fed as Lambda would feed it."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import MutableMapping
from typing import Any

from starlette.types import ASGIApp

from lambdaserve.catalog.store import Catalog
from lambdaserve.local.catalog_state import CatalogState
from lambdaserve.local.demo import DEMO_MODEL, demo_mlp_bytes
from lambdaserve.local.dev_options import DevOptions
from lambdaserve.local.emulator import Emulator, ensure_port_free
from lambdaserve.local.mirror import RepositoryMirror
from lambdaserve.local.resources import LocalResources, QueuePair, ensure_resources
from lambdaserve.local.rollout_loop import RolloutLoop
from lambdaserve.processes.background import BackgroundServer, start_metrics_api
from lambdaserve.processes.event_pump import EventPump, Handler, PumpConfig
from lambdaserve.processes.logs import quiet_third_parties, use_text_logs
from lambdaserve.settings import Settings, get_settings
from lambdaserve.wiring.aws import AwsClients
from lambdaserve.wiring.process import Process, install


def point_environment_at(endpoint: str, region: str = "us-east-1") -> Settings:
    """Make every boto3 client of this process use ``endpoint`` with the local credentials."""
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    os.environ["AWS_REGION"] = os.environ["AWS_DEFAULT_REGION"] = region
    # EMF metric lines are for CloudWatch; locally they only bury the logs.
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    # Locally the code is the developer's own: Python models are on (off when deployed).
    os.environ.setdefault("LAMBDASERVE_PYTHON_MODELS", "1")
    # Residency bounded by memory, not by a count: a developer's folder of models stays
    # loaded (and scaled workers with it) while half of this machine's memory holds them
    os.environ.setdefault("LAMBDASERVE_MAX_LOADED_VERSIONS", "0")
    os.environ.setdefault("LAMBDASERVE_MAX_LOADED_BYTES", str(half_of_memory()))
    # state changes on the emulator's default bus, as deployed (a rule can target a queue)
    os.environ.setdefault("LAMBDASERVE_EVENT_BUS", "default")
    get_settings.cache_clear()
    return get_settings()


# Batches of repository events handled at once, as Lambda's SQS pollers start with five
MANAGE_CONCURRENCY = 5


def half_of_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


class DevStack:
    """Emulator (or a given endpoint), resources, event pump and the APIs."""

    def __init__(self, options: DevOptions) -> None:
        self.options = options
        self._emulator: Emulator | None = None
        self._pumps: list[EventPump] = []
        self._servers: list[BackgroundServer] = []
        self.resources: LocalResources | None = None
        self.endpoint = options.aws_endpoint or ""
        self.mirror: RepositoryMirror | None = None
        self._mirror_stop: threading.Event | None = None
        self._serve: Any = None  # --server-mode: the `serve` process
        self._state_thread: threading.Thread | None = None
        self._rollouts: RolloutLoop | None = None

    def start(self) -> DevStack:
        options = self.options
        _check_ports(options)
        if options.server_mode_port:
            # read once by the infer function's settings: set before they are
            os.environ["LAMBDASERVE_SERVER_URL"] = (
                f"http://{options.host}:{options.server_mode_port}"
            )
        quiet_third_parties()
        if not options.response_limit:
            lift_lambda_limits(os.environ)
        if not options.aws_endpoint:
            self._emulator = Emulator(options.host, options.aws_port).start()
            self.endpoint = self._emulator.endpoint
        settings = point_environment_at(self.endpoint)
        clients = AwsClients(settings)
        self.resources = ensure_resources(clients, settings)

        # The Lambda handlers give lambdaserve's loggers Powertools' JSON format when they are
        # imported: import them first, so the text logs replace it
        import lambdaserve.handlers.batcher
        import lambdaserve.handlers.infer
        import lambdaserve.handlers.manage  # noqa: F401
        from lambdaserve.apps.one_url import RepositoryOnInferenceUrl
        from lambdaserve.apps.response_limit import ResponseLimit
        from lambdaserve.processes.serve import (
            GrpcFlags,
            inference_app_over,
            with_lifespan,
            with_trace_context,
        )

        use_text_logs(options.log_level)
        # One process object for every function dev runs: the batcher runs batches on the
        # inference API's loaded models, as one Lambda sandbox would.
        process = Process(settings, clients=clients)
        install(process)
        # dev as serve runs it: HTTP, gRPC and the models' calls to models share one data
        # plane and its batchers (built before the checks below build the model server)
        plane = process.serving_plane(batching=True)
        check_model_code_in(process)
        process.manage.registrar.reconcile_all(concurrency=MANAGE_CONCURRENCY)
        self.start_event_pumps()
        # the rollouts function's schedule (process.rollouts: built on its first tick)
        self._rollouts = RolloutLoop(process, settings.rollout_interval_s).start()
        counted = _as_is
        if options.metrics_port:
            metrics, responses = start_metrics_api(
                options.host, options.metrics_port, lambda: process.server().stats
            )
            self._servers.append(metrics)
            counted = responses.watch
        self._servers.append(
            BackgroundServer(
                counted(process.management_app),
                options.host,
                options.management_port,
                access_log=options.access_log,
            ).start()
        )
        # management RPCs on, as the management API is open locally
        inference: ASGIApp = ResponseLimit(
            RepositoryOnInferenceUrl(inference_app_over(plane), process.management_app, plane),
            settings.max_response_bytes,
        )
        inference = with_trace_context(inference, plane)  # --trace-config mode=opentelemetry
        grpc = GrpcFlags(options.host, options.grpc_port, management=True)
        self._servers.append(
            BackgroundServer(
                with_lifespan(counted(inference), plane, grpc),
                options.host,
                options.inference_port,
                access_log=options.access_log,
            ).start()
        )
        if options.model_repository is not None:
            # the catalog's own facts first, so versions validate under the saved policy
            state = CatalogState(
                Catalog(clients.dynamodb, settings.table), options.model_repository
            )
            state.restore()
            self.mirror = RepositoryMirror(
                options.model_repository, clients.s3, settings.bucket, settings.models_prefix
            )
            self.mirror.sync()
            _, self._mirror_stop = self.mirror.start()
            self._state_thread = state.keep(self._mirror_stop)
        if options.server_mode_port:
            from lambdaserve.local.deployed_api import start_server_mode

            self._serve, api = start_server_mode(
                options.host, options.server_mode_port, options.http_api_port, options.access_log
            )
            self._servers.append(api)
        if options.demo:
            clients.s3.put_object(
                Bucket=settings.bucket,
                Key=f"{settings.models_prefix}{DEMO_MODEL}/1/model.onnx",
                Body=demo_mlp_bytes(),
            )
        return self

    def start_event_pumps(self) -> None:
        """Feed each queue to its handler, as the event source mappings would."""
        from lambdaserve.handlers import batcher, manage

        assert self.resources is not None, "start() creates the resources first"
        self._start_pump(
            self.resources.repository_events,
            manage.events_handler,
            "lambdaserve-manage",
            MANAGE_CONCURRENCY,
        )
        self._start_pump(self.resources.requests, batcher.handler, "lambdaserve-batcher")

    def _start_pump(
        self, queue: QueuePair, handler: Handler, function: str, concurrency: int = 1
    ) -> None:
        """``queue`` fed to ``handler`` as ``function``'s event source mapping would."""
        settings = get_settings()
        pump = EventPump(
            AwsClients(settings).sqs,
            queue.url,
            queue.arn,
            handler,
            function,
            config=PumpConfig(batch_size=10, batching_window_s=0.0, concurrency=concurrency),
            region=settings.region,
        )
        pump.start()
        self._pumps.append(pump)

    def stop_event_pumps(self) -> None:
        for pump in self._pumps:
            pump.stop()
        self._pumps.clear()

    def stop(self) -> None:
        if self._rollouts is not None:
            self._rollouts.stop()
        if self._mirror_stop is not None:
            self._mirror_stop.set()
        if self._state_thread is not None:
            self._state_thread.join(timeout=5)
        if self._serve is not None:
            self._serve.stop()
        for server in self._servers:
            server.stop()
        self.stop_event_pumps()
        if self._emulator is not None:
            self._emulator.stop()

    def banner(self) -> str:
        from lambdaserve.local.dev_banner import dev_banner

        serve_pid = self._serve.pid if self._serve is not None else None
        return dev_banner(self.options, get_settings(), self.endpoint, serve_pid)


def check_model_code_in(process: Process) -> None:
    """Model code is loaded by the inference side of ``process`` before it is READY, through
    the event the deployed infer function answers (``handlers.load_check``)."""
    from lambdaserve.handlers import load_check
    from lambdaserve.publishing.serving_check import InProcessCheck

    process.manage.registrar.check_where_it_serves(
        InProcessCheck(lambda event: load_check.handle(event, process.server()))
    )


def _check_ports(options: DevOptions) -> None:
    """Every port dev would listen on is free (else a clear error naming its flag)."""
    wanted = [
        (options.management_port, "--management-port"),
        (options.inference_port, "--inference-port"),
        (options.metrics_port, "--metrics-port"),
        (options.grpc_port, "--grpc-port"),
    ]
    if options.server_mode_port:
        wanted += [
            (options.server_mode_port, "--server-port"),
            (options.http_api_port, "--http-api-port"),
        ]
    for port, flag in wanted:
        if port:
            ensure_port_free(options.host, port, flag)


def _as_is(app: ASGIApp) -> ASGIApp:
    return app


def run_dev(options: DevOptions) -> None:
    """Start the stack, print where everything is, and run until SIGINT/SIGTERM."""
    stop = threading.Event()

    def _request_stop(*_: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, _request_stop)
    signal.signal(signal.SIGTERM, _request_stop)
    stack = DevStack(options)
    try:
        stack.start()
    except BaseException:
        stack.stop()  # what started before the failure (a `serve` process, the emulator)
        raise
    try:
        print(stack.banner(), flush=True)
        # A signal the kernel hands another thread runs its handler only when the main
        # thread next runs bytecode: a wait without timeout would sleep through SIGTERM.
        while not stop.wait(0.5):
            pass
    finally:
        print("stopping ...", flush=True)
        stack.stop()


# Triton's default limit on a request body, for local experiments past Lambda's
UNLIMITED_REQUEST_BYTES = 64 * 1024**2


def lift_lambda_limits(environ: MutableMapping[str, str]) -> None:
    """``dev --no-lambda-limits``: no limit on a synchronous answer, and requests up to
    Triton's 64 MB (unless the environment already says otherwise)."""
    environ["LAMBDASERVE_MAX_RESPONSE_BYTES"] = "0"
    environ.setdefault("LAMBDASERVE_MAX_REQUEST_BYTES", str(UNLIMITED_REQUEST_BYTES))
