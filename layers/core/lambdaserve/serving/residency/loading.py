"""Loading one READY version: files from the local cache, the runtime's session, the config's
reshapes around it, and warm-up before the first request."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lambdaserve.batching.ragged import model_inputs
from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.model_files import CODE_FILES
from lambdaserve.config.runtime_names import (
    ONNX_RUNTIME,
    OPENVINO_RUNTIME,
    PADDLE_INFERENCE_RUNTIME,
    TORCHSCRIPT_RUNTIME,
)
from lambdaserve.metrics.cold_starts import ColdStart
from lambdaserve.runtimes.base import LoadedModel, LoadOptions, RequestsModel
from lambdaserve.runtimes.registry import runtime_named
from lambdaserve.serving.cache import ArtifactCache, CachedFile
from lambdaserve.serving.instances import InstancePool
from lambdaserve.serving.residency.environments import environment_file
from lambdaserve.serving.residency.progress import human_bytes
from lambdaserve.serving.residency.reshaped_model import ReshapedModel
from lambdaserve.serving.residency.warmup import warm_up, zero_inputs
from lambdaserve.serving.sequences.controls import warmup_inputs
from lambdaserve.workers.options import WorkerOptions

if TYPE_CHECKING:  # serving imports this module
    from lambdaserve.serving.version_resolver import ServedVersion

logger = logging.getLogger(__name__)
# the runtimes whose instances are sessions of their own (a TF SavedModel is one session,
# run by up to N executions at once; model code has a worker per instance)
POOLED = frozenset({ONNX_RUNTIME, OPENVINO_RUNTIME, TORCHSCRIPT_RUNTIME, PADDLE_INFERENCE_RUNTIME})


def version_files(served: ServedVersion) -> list[CachedFile]:
    """The version's files, and its environment's tarball where it has one (fetched and
    cached as they are; ``serving.residency.environments`` unpacks it)."""
    files = [
        CachedFile(f["path"], f["key"], f["sha256"], int(f["size"])) for f in served.record.files
    ]
    environment = environment_file(served.record.environment)
    return files if environment is None else [*files, environment]


def load_version(
    served: ServedVersion,
    cache: ArtifactCache,
    options: LoadOptions,
    workers: WorkerOptions | None = None,
    *,
    on_broken: Callable[[str], None] | None = None,
    on_loaded: Callable[[ColdStart], None] | None = None,
) -> LoadedModel:
    """Load ``served``: in this process, or (model code, where ``workers`` enables them) in
    its worker processes; ``on_broken`` hears when those keep crashing, ``on_loaded`` the
    load's phases. A tensor runtime's
    version in a long-running server is ``instance_group`` count instances
    (``serving.instances``)."""
    started = time.perf_counter()
    files = version_files(served)
    directory = cache.materialize(files)
    fetched = time.perf_counter()
    runtime = runtime_named(served.record.runtime)
    config = served.config
    batched = config.max_batch_size > 0
    model_path = directory / served.record.model_file
    own_environment = bool(served.record.environment)
    if workers is not None and _in_workers(
        served.record.runtime, model_path, config, workers, own_environment
    ):
        from lambdaserve.workers.start import start_workers

        loaded: LoadedModel = start_workers(
            model_path,
            config,
            served.signature,
            runtime.name,
            load=options,
            options=workers,
            on_broken=on_broken,
        )
    else:
        loaded = runtime.load(model_path, config, served.signature, options)
    if config.reshapes and not isinstance(loaded, RequestsModel):
        loaded = ReshapedModel(loaded, config.reshapes, batched)
    created = time.perf_counter()
    code = served.record.model_file in CODE_FILES
    label = f"{served.model} version {served.version}"

    def warmed(model: LoadedModel) -> LoadedModel:
        warm_up(
            model,
            served.signature,
            directory,
            config.warmup,
            batched,
            zeros=not code,
            label=label,
            fixed=_fixed_warmup_inputs(served),
        )
        return model

    warmed(loaded)
    if pooled(runtime.name, workers):

        def another() -> LoadedModel:
            made = runtime.load(model_path, config, served.signature, options)
            if config.reshapes:
                made = ReshapedModel(made, config.reshapes, batched)
            return warmed(made)

        loaded = InstancePool(another, config.instance_count, first=loaded, label=label)
    done = time.perf_counter()
    logger.info(
        "loaded %s version %s on %s in %.0f ms (files %s: %.0f ms, %s: %.0f ms, warm-up: %.0f ms)",
        served.model,
        served.version,
        loaded.device,
        (done - started) * 1000,
        human_bytes(sum(f.size for f in files)),
        (fetched - started) * 1000,
        runtime.name,
        (created - fetched) * 1000,
        (done - created) * 1000,
    )
    if on_loaded is not None:  # its cold start's phases (metrics.cold_starts)
        on_loaded(
            ColdStart(
                device=loaded.device,
                fetch_bytes=sum(f.size for f in files),
                fetch_ms=round((fetched - started) * 1000, 3),
                load_ms=round((created - fetched) * 1000, 3),
                warmup_ms=round((done - created) * 1000, 3),
            )
        )
    if config.instance_kind == "GPU" and loaded.device == "cpu":
        logger.warning(
            "%s version %s asks for a GPU (instance_group KIND_GPU) and runs on cpu: %s",
            served.model,
            served.version,
            "LAMBDASERVE_DEVICE=cpu"
            if options.device == "cpu"
            else f"{runtime.name} found no CUDA device here (the GPU service runs it on one)",
        )
    return loaded


def _fixed_warmup_inputs(served: ServedVersion) -> dict[str, Any] | None:
    """What warm-up feeds besides zeros: a sequence model's controls and states; a ragged
    model's zeros joined as a ragged batch of one, with its batch inputs."""
    config = served.config
    if config.sequence_batching is not None:
        return warmup_inputs(
            config.sequence_batching, config.max_batch_size > 0, served.initial_states
        )
    if config.ragged_batching is not None:
        zeros = zero_inputs(served.signature.inputs)
        return None if zeros is None else model_inputs(config.ragged_batching, [zeros])
    return None


def pooled(runtime: str, workers: WorkerOptions | None) -> bool:
    """Whether the version's instances are a pool: a tensor runtime in a long-running server
    (in Lambda each execution environment runs one request at a time: one instance)."""
    return runtime in POOLED and workers is not None and not workers.per_version


def _in_workers(
    backend: str,
    model_path: Path,
    config: ModelConfig,
    workers: WorkerOptions,
    own_environment: bool,
) -> bool:
    from lambdaserve.workers.start import runs_in_workers

    return runs_in_workers(backend, model_path, config, workers, own_environment)
