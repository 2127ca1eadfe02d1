"""The worker pools of this process's loaded versions, as the doors read and change them:
TorchServe's describe (``workers``: id, pid, status, memory), its scaling
(``PUT /models/{m}?min_worker=``), and each model's worker memory for ``/metrics``."""

from __future__ import annotations

from typing import Any

from lambdaserve.errors import InvalidInput
from lambdaserve.serving.instances import InstancePool
from lambdaserve.serving.model_server import ModelServer
from lambdaserve.serving.residency.loading import pooled
from lambdaserve.workers.worker_model import WorkerModel


def worker_pools(server: ModelServer) -> dict[tuple[str, int], WorkerModel]:
    return {
        (model, version): loaded
        for model, version, loaded in server.residency.loaded_models()
        if isinstance(loaded, WorkerModel)
    }


def instance_pools(server: ModelServer) -> dict[tuple[str, int], InstancePool]:
    return {
        (model, version): loaded
        for model, version, loaded in server.residency.loaded_models()
        if isinstance(loaded, InstancePool)
    }


def described_workers(server: ModelServer, model: str, version: int) -> list[dict[str, Any]] | None:
    """The version's workers (a tensor model's instances); None when it has none here."""
    pool = worker_pools(server).get((model, version)) or instance_pools(server).get(
        (model, version)
    )
    return pool.describe() if pool is not None else None


def worker_limits(server: ModelServer, model: str, version: int) -> tuple[int, int] | None:
    pool = worker_pools(server).get((model, version))
    if pool is not None:
        return (pool.spec.min_workers, pool.spec.max_workers)
    instances = instance_pools(server).get((model, version))
    return (instances.target, instances.target) if instances is not None else None


def worker_memory(server: ModelServer) -> dict[tuple[str, str], tuple[int, int]]:
    """(model, version) -> (live workers, their resident bytes)."""
    return {
        (model, str(version)): (len(pool.describe()), pool.memory_bytes())
        for (model, version), pool in worker_pools(server).items()
    }


def scale_workers(
    server: ModelServer, model: str, version: int | None, min_worker: int, max_worker: int | None
) -> WorkerModel | InstancePool | None:
    """TorchServe's scaling of the version (the default one when ``version`` is None): its
    workers (a tensor model's instances, its ``instance_group`` count) loaded if they were
    not, then brought to ``min_worker``. None where the version has neither here (the caller
    answers what it answered before)."""
    served = server.resolver.resolve(model, version)
    if server.workers is None or server.workers.per_version:
        return None
    if not server.workers.enabled and not pooled(served.record.runtime, server.workers):
        return None
    loaded = server.load(served)
    if not isinstance(loaded, WorkerModel | InstancePool):
        return None
    if server.workers.shared_by > 1:
        raise InvalidInput(
            f"scaling {model!r} is refused: `serve --workers {server.workers.shared_by}` runs "
            f"{server.workers.shared_by} processes, each with its own workers of the model, and "
            "this call reaches one of them. Serve with --workers 1 to scale a model's workers "
            "with min_worker (or minWorkers in model-config.yaml), or scale out by tasks"
        )
    if min_worker < 1 or (max_worker is not None and max_worker < min_worker):
        raise InvalidInput(
            f"min_worker={min_worker} max_worker={max_worker}: ask for at least one worker, "
            "and max_worker no lower than min_worker"
        )
    server.residency.scale(served, min_worker, max_worker)
    return loaded
