"""Every peer's gRPC service on one port, in the HTTP server's own event loop.

The gRPC server starts and stops with the ASGI app's lifespan (``GrpcRunner``'s steps), so
``lambdaserve serve`` and ``lambdaserve dev`` run it beside uvicorn in one loop: gRPC and HTTP
requests meet in the same dynamic batcher lanes and statistics. With ``--workers N`` each
worker process binds the port too (gRPC sets SO_REUSEPORT), and the kernel spreads
connections across them as it spreads HTTP ones.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from lambdaserve.publishing.management import ModelManager
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.serving.readiness import Readiness

logger = logging.getLogger(__name__)
# gRPC's own default is 4 MB each way; requests take the HTTP body limit, answers more room.
MIN_SEND_BYTES = 64 * 1024**2
# Services named in grpc.health.v1 (the empty name is the whole server, as load balancers ask).
SERVICES = (
    "",
    "inference.GRPCInferenceService",
    "tensorflow.serving.PredictionService",
    "tensorflow.serving.ModelService",
    "org.pytorch.serve.grpc.inference.InferenceAPIsService",
    "org.pytorch.serve.grpc.management.ManagementAPIsService",
    "baidu.paddle_serving.pipeline_serving.PipelineService",
)


@dataclass(frozen=True)
class GrpcOptions:
    host: str
    port: int
    max_request_bytes: int
    # Triton's repository RPCs and TorchServe's management service; off in ``serve`` unless
    # asked for, as the HTTP management API is IAM-guarded when deployed
    management: Callable[[], ModelManager] | None = None
    grace_s: float = 10.0
    # ``--workers N``: every worker binds the port (SO_REUSEPORT); alone, a port in use fails
    share_port: bool = False
    # ``serve``: health says SERVING only while ready (warm, not draining); None: always
    readiness: Readiness | None = None
    # whose server: grpcio's or pygrpc-native's (``new_server``)
    server: str = "grpcio"


async def build_server(plane: InferenceDataPlane, options: GrpcOptions) -> grpc.aio.Server:
    """The gRPC server with every service added and the port bound (not started)."""
    from tritonclient.grpc import service_pb2_grpc

    from lambdaserve.apps.grpc.kserve import KServeServicer

    server = new_server(
        options.server,
        [
            ("grpc.max_receive_message_length", options.max_request_bytes),
            ("grpc.max_send_message_length", max(options.max_request_bytes, MIN_SEND_BYTES)),
            ("grpc.so_reuseport", 1 if options.share_port else 0),
        ],
    )
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
        KServeServicer(plane, options.management), server
    )
    _add_peer_services(server, plane, options)
    checker = health.aio.HealthServicer()
    await _follow_readiness(checker, options.readiness)
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    server.add_insecure_port(f"{options.host}:{options.port}")
    return server


def new_server(kind: str, settings: list[tuple[str, Any]]) -> grpc.aio.Server:
    """An asyncio gRPC server of ``kind``: grpcio's, or pygrpc-native's, which takes the same
    servicers and options and runs HTTP/2 and gRPC framing in Rust outside the GIL (unary and
    server-streaming calls; it hands bidirectional ones, ModelStreamInfer's, to a grpcio
    server behind it)."""
    if kind == "grpcio":
        return grpc.aio.server(options=settings)
    if kind != "native":
        raise ValueError(f"LAMBDASERVE_GRPC_SERVER is grpcio or native, not {kind!r}")
    try:
        import pygrpc_native.aio
    except ImportError:
        raise ValueError(
            "--grpc-server native needs pygrpc-native installed (pip install pygrpc-native, "
            "or the lock's serve image); or leave the flag out for grpcio"
        ) from None
    return pygrpc_native.aio.server(options=settings)


# A Unix socket's path holds at most 107 bytes (sockaddr_un). pygrpc-native starts its
# grpcio server for bidirectional calls on <temp dir>/pygrpc-native-XXXXXXXX/fallback.sock,
# so a long temp dir (a task's or a test's own) would leave gRPC unable to start.
_SOCKET_PATH_MAX = 107
_FALLBACK_PATH = len("/pygrpc-native-XXXXXXXX/fallback.sock")


@contextmanager
def short_temp_dir() -> Iterator[None]:
    """The temp dir as it is, or /tmp while it is too long to hold that socket."""
    before = tempfile.tempdir
    if len(tempfile.gettempdir()) + _FALLBACK_PATH > _SOCKET_PATH_MAX and os.path.isdir("/tmp"):
        tempfile.tempdir = "/tmp"
    try:
        yield
    finally:
        tempfile.tempdir = before


async def _follow_readiness(
    checker: health.aio.HealthServicer, readiness: Readiness | None
) -> None:
    """Every service's status follows ``readiness`` (changed from any thread); once draining,
    NOT_SERVING for good, as grpc's graceful shutdown has it."""
    serving, not_serving = (
        health_pb2.HealthCheckResponse.SERVING,
        health_pb2.HealthCheckResponse.NOT_SERVING,
    )

    async def apply(ready: bool) -> None:
        if readiness is not None and readiness.draining:
            await checker.enter_graceful_shutdown()
            return
        for name in SERVICES:
            await checker.set(name, serving if ready else not_serving)

    if readiness is not None:
        loop = asyncio.get_running_loop()
        pending: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak references

        def changed(ready: bool) -> None:
            task = loop.create_task(apply(ready))
            pending.add(task)
            task.add_done_callback(pending.discard)

        def from_any_thread(ready: bool) -> None:
            if not loop.is_closed():  # a warm-up finishing after shutdown has no one to tell
                loop.call_soon_threadsafe(changed, ready)

        # listening before the first look: a change in between is not missed
        readiness.listen(from_any_thread)
    await apply(readiness is None or readiness.ready)


def _add_peer_services(
    server: grpc.aio.Server, plane: InferenceDataPlane, options: GrpcOptions
) -> None:
    """TF Serving's, TorchServe's and Paddle's services, from their generated stubs."""
    from lambdaserve.apps.grpc import paddle, tfserving, torchserve

    tfserving.add_to(server, plane)
    torchserve.add_to(server, plane, options.management)
    paddle.add_to(server, plane)


class GrpcRunner:
    """The gRPC server of one process: ``start`` binds and starts it (a port in use fails,
    saying how to choose another); ``stop`` stops taking calls and gives in-flight ones
    ``grace_s`` to finish. Both are lifespan steps (``processes.asgi.lifespan``)."""

    def __init__(self, plane: Callable[[], InferenceDataPlane], options: GrpcOptions) -> None:
        self._plane = plane
        self._options = options
        self.server: grpc.aio.Server | None = None

    async def start(self) -> None:
        options = self._options
        try:
            self.server = await build_server(self._plane(), options)
            with short_temp_dir():
                await self.server.start()
        except Exception as exc:
            raise RuntimeError(
                f"gRPC could not listen on {options.host}:{options.port} ({exc}); free the "
                "port or choose another with --grpc-port (0 turns gRPC off)"
            ) from exc
        logger.info("gRPC on %s:%d", options.host, options.port)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(self._options.grace_s)
            self.server = None
