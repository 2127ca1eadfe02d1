"""Which versions run in workers, and starting them: model code (TorchServe handlers and
archives, TorchServe workflows, Triton Python models, decoupled ones included, Paddle Serving
pipelines) when the process enables workers, and always when the version has its own
environment. A workflow's whole DAG runs in its worker (its function nodes are the user's
code); its model nodes cross back to this process's data plane as a Python model's BLS calls
do (``workers.call_relay``). A Paddle pipeline's Ops and their local
predictors all run in its worker: their models are files of the version, not other models.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.errors import ModelNotReady
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.runtimes.model_code import DISABLED
from lambdaserve.tensors.signature import Signature
from lambdaserve.workers.options import (
    CODE_BACKENDS,
    WORKFLOW_DIRECTORY,
    WorkerOptions,
    counts_for,
)
from lambdaserve.workers.worker_model import WorkerModel, WorkerSpec


def runs_in_workers(
    backend: str,
    model_path: Path,
    config: ModelConfig,
    options: WorkerOptions,
    own_environment: bool = False,
) -> bool:
    """Model code runs in workers where the process enables them, and always when the
    version has an environment of its own: only a worker can put it first on its path."""
    return backend in CODE_BACKENDS and (options.enabled or own_environment)


def start_workers(
    model_path: Path,
    config: ModelConfig,
    signature: Signature,
    backend: str,
    *,
    load: LoadOptions,
    options: WorkerOptions,
    on_broken: Callable[[str], None] | None = None,
) -> WorkerModel:
    """The version's workers started, their code initialized (a failure raises as an
    in-process load does: ModelCodeFailed with the code's error)."""
    if not load.python_models:
        raise ModelNotReady(DISABLED)
    counts = counts_for(backend, model_path, config.instance_count, options)
    spec = WorkerSpec(
        model=config.name,
        version=load.version,
        backend=backend,
        model_path=model_path,
        config=config.to_triton_json(),
        signature=signature.to_json(),
        python_paths=options.environment_paths(config.name, load.version, _version_dir(model_path)),
        min_workers=counts.min_workers,
        max_workers=counts.max_workers,
        timeout_s=counts.timeout_s,
        start_timeout_s=options.start_timeout_s,
        decoupled=config.decoupled,
    )
    return WorkerModel(spec, on_broken)


def _version_dir(model_path: Path) -> Path:
    """``<v>/`` of ``<v>/model.py``, ``<v>/handler.py``, ``<v>/web_service.py``,
    ``<v>/MAR-INF/MANIFEST.json`` or ``<v>/WAR-INF/MANIFEST.json``."""
    archived = model_path.parent.name in ("MAR-INF", WORKFLOW_DIRECTORY)
    return model_path.parent.parent if archived else model_path.parent
