"""The composition root: one ``Process`` per running process, built once from ``Settings``.

Every entry point (the three Lambda functions' handlers, ``serve``, ``worker``, ``dev``)
takes its objects from the process object: the inference side (the model server, the data
plane, the inference app, async submission, the GPU forwarder), the management side and the
queue side. A process serves through one data plane: the infer function's (no batcher), or
a long-running server's (``serving_plane``: its batchers and readiness), which every door,
the metrics and the models' calls to models share. Each side is built on first use, so a
cold start imports and pays only for the side it serves. ``current()`` is the process's own
object; ``dev`` and the tests build theirs from their settings and ``install`` it instead of
patching module globals.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from lambdaserve.metrics.emf import InvocationMetrics
from lambdaserve.metrics.stats import StatsRegistry
from lambdaserve.settings import Settings, get_settings
from lambdaserve.wiring.aws import AwsClients
from lambdaserve.workers.options import EnvironmentPaths

if TYPE_CHECKING:
    from fastapi import FastAPI
    from mangum import Mangum

    from lambdaserve.forwarding.forwarder import ServerModeRouter
    from lambdaserve.metrics.cold_starts import ColdStarts
    from lambdaserve.metrics.tallies import Tallies
    from lambdaserve.queued.results import PayloadStore
    from lambdaserve.queued.submit import AsyncSubmitter
    from lambdaserve.rollouts.service import Rollouts
    from lambdaserve.serving.capture.data_capture import DataCapture
    from lambdaserve.serving.capture.shadow import ShadowSink
    from lambdaserve.serving.data_plane import InferenceDataPlane
    from lambdaserve.serving.model_server import ModelServer
    from lambdaserve.wiring.manage import ManageServices
    from lambdaserve.wiring.queues import ConsumerServices, QueueServices

T = TypeVar("T")


class Process:
    """The objects one process serves with. ``service`` names its EMF metrics
    (``lambdaserve-infer``, or ``lambdaserve-worker`` for ``lambdaserve worker``)."""

    def __init__(
        self,
        settings: Settings,
        *,
        service: str = "lambdaserve-infer",
        clients: AwsClients | None = None,
        on_config_rejected: Callable[[str, str], None] | None = None,
        environment_paths: EnvironmentPaths | None = None,
    ) -> None:
        self.settings = settings
        # a version's own Python environment, first on its workers' path (None: the one
        # published with it, from the model cache)
        self.environment_paths = environment_paths
        # in a Lambda function, each invocation's billed compute split among its models
        self.metrics = InvocationMetrics(service, memory_mb=settings.lambda_memory_mb or None)
        self.on_config_rejected = on_config_rejected
        self._given_clients = clients
        self._built: dict[str, Any] = {}
        self._lock = threading.RLock()

    def _once(self, name: str, build: Callable[[], T]) -> T:
        found = self._built.get(name)
        if found is None:
            with self._lock:
                found = self._built.get(name)
                if found is None:
                    found = self._built[name] = build()
        return found

    # -- shared ---------------------------------------------------------------------------
    @property
    def clients(self) -> AwsClients:
        return self._once("clients", lambda: self._given_clients or AwsClients(self.settings))

    # -- the inference side ---------------------------------------------------------------
    def server(self) -> ModelServer:
        """The loaded-version LRU; a method, so consumers can hold ``process.server`` and
        look it up per call (a SnapStart restore renews it in place)."""
        return self._once("server", self._build_server)

    def _build_server(self) -> ModelServer:
        # imported on first use: the handlers import this module at a cold start, and the
        # inference side (data plane, model server, pipelines, protobuf) waits for a request
        from lambdaserve.wiring.inference import build_model_server

        tallies, emf = self.tallies, self.metrics

        def counted(model: str, version: int, execution: Any, fail_ns: int) -> None:
            emf.record(model, version, execution, fail_ns)
            tallies.record(model, version, execution, fail_ns)  # a rollout's analysis

        return build_model_server(
            self.settings,
            self.clients,
            StatsRegistry(counted, self.metrics.record_cache, self.cold_starts),
            self.environment_paths,
            self._plane_here(),  # models calling models: the plane the doors use
        )

    @property
    def cold_starts(self) -> ColdStarts:
        """Each load's phases and first inference, into the catalog (describe's p50/p99) and
        as EMF lines; the process's own start (init, restore) joins its first load's."""
        return self._once("cold_starts", self._build_cold_starts)

    def flush_records(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for the records written in the background so far
        (cold starts): before a snapshot, or before what they are written to goes away."""
        built: ColdStarts | None = self._built.get("cold_starts")
        if built is not None:
            built.flush(timeout_s)

    def _build_cold_starts(self) -> ColdStarts:
        from lambdaserve.catalog.cold_starts import ColdStartStore
        from lambdaserve.metrics.cold_starts import ColdStarts
        from lambdaserve.metrics.emf import write_cold_start

        def write(model: str, version: int, sample: str, fields: Any) -> None:
            ColdStartStore(self.clients.dynamodb, self.settings.table).put(
                model, version, sample, fields
            )

        in_lambda = self.settings.in_lambda
        where = "infer function" if in_lambda else "server"
        # as EMF where this process writes EMF at all: Lambda, an ECS task (its logs reach
        # CloudWatch) or as LAMBDASERVE_COST_INTERVAL_S asks; not on a `dev` terminal
        writes_emf = in_lambda or self.settings.cost_interval_s > 0
        emit = write_cold_start(self.metrics.service) if writes_emf else None
        return ColdStarts(write, where, background=True, emit=emit)

    @property
    def tallies(self) -> Tallies:
        """Each judged version's requests, failures and latencies, for its rollout's analysis
        (``metrics.tallies``): written to the catalog once a second, by a thread in a
        long-running process, as an invocation ends in a Lambda function."""
        from lambdaserve.metrics.tallies import Tallies

        def write(model: str, version: int, when: int, tally: Any) -> None:
            from lambdaserve.catalog.tallies import TallyStore

            TallyStore(self.clients.dynamodb, self.settings.table).add(model, version, when, tally)

        def watched(model: str) -> bool:
            server: ModelServer | None = self._built.get("server")
            return server is not None and server.resolver.weighed(model)

        background = not self.settings.in_lambda
        return self._once("tallies", lambda: Tallies(write, watched, background=background))

    @property
    def plane(self) -> InferenceDataPlane:
        """The infer function's data plane, without a batcher: each request runs alone
        (Lambda; in ``dev``, its emulated infer function)."""
        from lambdaserve.serving.data_plane import InferenceDataPlane

        capture = self.data_capture  # built first: _once holds its lock while building
        # the shadow sink built once with the plane, not on every look-up (one per request)
        return self._once(
            "plane",
            lambda: InferenceDataPlane(
                self.server, capture=capture, shadows=self._shadows(capture)
            ),
        )

    def _shadows(self, capture: DataCapture) -> ShadowSink:
        """Shadow traffic after the answer: run here in a long-running process (dev); sent to
        the requests queue from a Lambda function, whose instance freezes once it answers
        (the batcher runs and records it)."""
        if not self.settings.in_lambda:
            from lambdaserve.serving.capture.shadow import shadow_runner

            return shadow_runner(self.server, capture)
        from lambdaserve.queued.shadows import QueuedShadows

        def send(body: str) -> None:
            queue = self.queue
            url = queue.level_queue_urls[-1] if queue.level_queue_urls else queue.requests_queue_url
            queue.sqs.send_message(QueueUrl=url(), MessageBody=body)

        def store(key: str, body: bytes) -> str:
            return self.queue.payloads.put(key, body)

        return QueuedShadows(send, store)

    @property
    def data_capture(self) -> DataCapture:
        """The process's payload capture (``serving.capture.data_capture``), into the model bucket
        under ``captures/``; written by its own thread, flushed as an invocation ends."""
        from lambdaserve.serving.capture.data_capture import DataCapture, s3_put

        # the S3 client on the first write: no invocation's cold start pays for it
        put = s3_put(lambda: self.clients.s3, self.settings.bucket)
        metrics = self.metrics

        def build() -> DataCapture:
            capture = DataCapture(put, "captures")
            metrics.watch_capture(capture.snapshot)  # Lambda's EMF lines report its losses
            return capture

        return self._once("data_capture", build)

    def serving_plane(
        self, *, batching: bool = True, readiness: bool = False
    ) -> InferenceDataPlane:
        """A long-running server's one data plane (``serve``, ``dev``): HTTP, gRPC, the
        metrics and the models' calls to models share its tensor and raw batchers, so a
        request batches with others whichever door it came by. The first call builds it
        (its ``batching`` and ``readiness``, see ``wiring.planes``); later ones return it."""

        from lambdaserve.wiring.planes import build_serving_plane

        size = self.settings.default_max_batch_size
        capture = self.data_capture  # built first: _once holds its lock while building
        return self._once(
            "serving_plane",
            lambda: build_serving_plane(
                self.server, size, batching=batching, readiness=readiness, capture=capture
            ),
        )

    def _plane_here(self) -> InferenceDataPlane:
        """The plane this process serves through: the long-running server's where it has
        built one, else the infer function's."""
        found: InferenceDataPlane | None = self._built.get("serving_plane")
        return found if found is not None else self.plane

    def submitter(self) -> AsyncSubmitter:
        """``Prefer: respond-async``: the results store and the requests queue."""
        from lambdaserve.queued.submit import AsyncSubmitter

        def build() -> AsyncSubmitter:
            queue = self.queue
            return AsyncSubmitter(
                self._plane_here(),
                queue.results,
                queue.payloads,
                queue.sqs,
                queue.requests_queue_url,
                gpu_queue_url=queue.gpu_queue_url,
                level_queue_urls=queue.level_queue_urls,
                reply_to_allowed=self.settings.reply_to_allowed,
            )

        return self._once("submitter", build)

    @property
    def inference_app(self) -> FastAPI:
        """Every inference route (FastAPI), built on first use: a cold start that only serves
        the direct v2 path imports no FastAPI, pydantic or OpenAPI models."""
        from lambdaserve.apps.inference import create_inference_app

        return self._once(
            "inference_app",
            lambda: create_inference_app(
                self.plane, lambda: self.settings.max_request_bytes, self.submitter
            ),
        )

    @property
    def lambda_app(self) -> Mangum:
        """Every inference route but the direct v2 infer, behind Mangum (the infer function)."""

        def build() -> Mangum:
            from mangum import Mangum

            from lambdaserve.apps.response_limit import ResponseLimit

            limit = self.settings.max_response_bytes
            return Mangum(ResponseLimit(self.inference_app, limit), lifespan="off")

        return self._once("lambda_app", build)

    @property
    def forwarder(self) -> ServerModeRouter | None:
        """Where synchronous requests for KIND_GPU models go (LAMBDASERVE_SERVER_URL)."""
        if not self.settings.server_url:
            return None
        return self._once("forwarder", self._build_forwarder)

    def _build_forwarder(self) -> ServerModeRouter:
        from lambdaserve.forwarding.forwarder import Queue, ServerModeRouter

        def wants_server(model: str) -> bool:
            return self.server().resolver.config(model).instance_kind == "GPU"

        def number(model: str, text: str | None) -> int | None:
            return self.server().resolver.number(model, text)  # per call: a restore renews it

        queue = Queue(
            submit=lambda *args: self.submitter().submit(*args),
            result=lambda request_id: self.submitter().result(request_id),
            number=number,
        )
        url = self.settings.server_url
        return ServerModeRouter(url, wants_server, queue, wait_s=self.settings.server_wait_s)

    # -- the queue side -------------------------------------------------------------------
    @property
    def queue(self) -> QueueServices:
        from lambdaserve.wiring.queues import build_queue_services

        return self._once("queue", lambda: build_queue_services(self.settings, self.clients))

    @property
    def payloads(self) -> PayloadStore:
        return self.queue.payloads

    @property
    def consumer(self) -> ConsumerServices:
        """The queue consumer's services: the batcher function's (and ``lambdaserve worker``'s)
        path; batches run on this process's model server unless LAMBDASERVE_INFER_FUNCTION
        names the infer function."""
        from lambdaserve.wiring.queues import build_consumer_services

        capture = self.data_capture  # built first: _once holds its lock while building
        return self._once(
            "consumer",
            lambda: build_consumer_services(
                self.settings, self.queue, self.server, self.clients, capture
            ),
        )

    # -- the management side --------------------------------------------------------------
    @property
    def manage(self) -> ManageServices:
        from lambdaserve.wiring.manage import build_manage_services

        def build() -> ManageServices:
            services = build_manage_services(self.settings, self.clients, self._config_rejected)
            # dev and serve: a load or unload answered 200 is what this process serves
            # right after it (the catalog's refresh interval is only the fallback)
            services.watchers.watch(self._catalog_changed)
            return services

        return self._once("manage", build)

    @property
    def rollouts(self) -> Rollouts:
        """Rollouts: the management API's routes, the judge's tick (the rollouts function,
        ``dev``'s loop)."""
        from lambdaserve.wiring.rollouts import build_rollouts

        return self._once(
            "rollouts", lambda: build_rollouts(self.settings, self.clients, self.manage.manager)
        )

    def _catalog_changed(self, model: str) -> None:
        server = self._serving_here()
        if server is not None:
            server.residency.catalog_changed(model)

    @property
    def management_app(self) -> FastAPI:
        """The management API, built on first use: the events and reconcile functions start
        without FastAPI, pydantic or the OpenAPI models."""
        from lambdaserve.apps.management import create_management_app

        return self._once(
            "management_app",
            lambda: create_management_app(
                lambda: self.manage.manager, self._serving_here, lambda: self.rollouts
            ),
        )

    def _serving_here(self) -> ModelServer | None:
        """The model server, where this process has built one (``serve``, ``dev``): the
        management doors describe and scale its workers; None in the manage function."""
        server: ModelServer | None = self._built.get("server")
        return server

    @property
    def management_lambda_app(self) -> Mangum:
        from mangum import Mangum

        return self._once(
            "management_lambda_app", lambda: Mangum(self.management_app, lifespan="off")
        )

    def _config_rejected(self, model: str, reason: str) -> None:
        if self.on_config_rejected is not None:  # looked up per call: the manage function's
            self.on_config_rejected(model, reason)

    def forget(self, *names: str, settings: Settings | None = None) -> None:
        """Drop the named objects (``"server"``, ``"submitter"``, ``"forwarder"``...), and
        take ``settings`` when given: the next use builds them again. Apps already built keep
        answering, as they look the objects up per call."""
        with self._lock:
            if settings is not None:
                self.settings = settings
            for name in names:
                self._built.pop(name, None)

    # -- SnapStart ------------------------------------------------------------------------
    def renew_connections(self) -> None:
        """After a SnapStart restore: new AWS clients (connections and credentials are not
        carried over) and fresh catalog views; the loaded models are kept."""
        with self._lock:
            snapshotted = self._built.get("server")
            for name in ("clients", "server", "plane", "submitter", "queue", "consumer", "manage"):
                self._built.pop(name, None)
        if snapshotted is not None:
            self.server().residency.adopt(snapshotted.residency)


_current: Process | None = None
_current_lock = threading.Lock()


def current() -> Process:
    """This process's object, built from the environment's settings on first use."""
    global _current  # noqa: PLW0603 (the one process-wide object, by design)
    if _current is None:
        with _current_lock:
            if _current is None:
                _current = Process(get_settings())
    return _current


def install(process: Process | None) -> Process | None:
    """Make ``process`` this process's object (``dev``, ``serve``, ``worker``, tests); None
    forgets it, so the next ``current()`` builds one from the settings. Returns the old one."""
    global _current
    with _current_lock:
        previous, _current = _current, process
    return previous
