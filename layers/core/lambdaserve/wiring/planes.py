"""The serving plane of a long-running process (``serve``, ``dev``): the one data plane that
its HTTP app, gRPC services, metrics and model-to-model calls share, with both batchers.

Kept apart from ``wiring.process`` so the infer function's cold start, whose plane has no
batcher, never imports the batching modules.
"""

from __future__ import annotations

from collections.abc import Callable

from lambdaserve.serving.capture.data_capture import DataCapture
from lambdaserve.serving.capture.shadow import shadow_runner
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.serving.model_server import ModelServer
from lambdaserve.serving.readiness import Readiness
from lambdaserve.serving.server_batcher import handler_batcher, server_batcher
from lambdaserve.tensors.shared_memory import SystemSharedMemory
from lambdaserve.tracing.config import config_from_env
from lambdaserve.tracing.tracer import Tracer


def build_serving_plane(
    server: Callable[[], ModelServer],
    default_max_batch_size: int,
    *,
    batching: bool,
    readiness: bool,
    capture: DataCapture | None = None,
) -> InferenceDataPlane:
    """With ``batching``, the tensor batcher (v2 infer) and the raw one (TorchServe handlers'
    rows, as their archives' ``batchSize`` asks); without, each request runs alone. With
    ``readiness``, ready once the versions are warm and no longer while draining (``serve``);
    without, ready whenever live (``dev``). Models calling models reach it through the port
    installed where the process builds its model server (``wiring.inference``): a call meets
    the called model's batcher as a client's request does, unless that model's run holds the
    calling thread (``pipelines.bls``). Its tracer takes the ``--trace-config`` the command
    line put in the environment (Triton's defaults: off)."""
    waits_for_warm = Readiness() if readiness else None
    tracer = Tracer(config_from_env())
    shadows = shadow_runner(server, capture) if capture is not None else None
    # clients on this host may share memory with a long-running server (Triton's extension)
    shared = SystemSharedMemory()
    if batching:
        tensors, rows = server_batcher(server, default_max_batch_size), handler_batcher(server)
        plane = InferenceDataPlane(
            server,
            tensors,
            waits_for_warm,
            rows,
            shared_memory=shared,
            capture=capture,
            tracer=tracer,
            shadows=shadows,
        )
    else:
        plane = InferenceDataPlane(
            server,
            None,
            waits_for_warm,
            shared_memory=shared,
            capture=capture,
            tracer=tracer,
            shadows=shadows,
        )
    return plane
