"""How many workers a version gets and how long a request may take in one, read from what the
model ships: TorchServe's ``minWorkers`` / ``maxWorkers`` / ``responseTimeout`` in its
``model-config.yaml``, Triton's ``instance_group`` count for Python models and Paddle
pipelines, a TorchServe workflow's DAG timeouts; and the hook that names a version's own
Python environment."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lambdaserve.config.runtime_names import HANDLER_RUNTIME, PIPELINE_RUNTIME, PYTHON_RUNTIME

# (model, version, version directory) -> directories put first on the worker's sys.path
EnvironmentPaths = Callable[[str, int, Path], tuple[Path, ...]]

CODE_BACKENDS: frozenset[str] = frozenset({PYTHON_RUNTIME, HANDLER_RUNTIME, PIPELINE_RUNTIME})
WORKFLOW_DIRECTORY = "WAR-INF"  # an unpacked .war: its manifest is WAR-INF/MANIFEST.json
TORCHSERVE_TIMEOUT_S = 120.0  # TorchServe's default responseTimeout


def no_environment(model: str, version: int, version_dir: Path) -> tuple[Path, ...]:
    return ()


@dataclass(frozen=True)
class WorkerOptions:
    """The composition root's choices: whether model code runs in workers, the timeout
    where a model sets none, and ``per_version`` (1 in Lambda: one worker per version; 0:
    the counts the model asks for); ``shared_by``: how many ``serve`` processes share the
    ports, each with workers of its own (above 1, scaling is refused: it would reach one)."""

    enabled: bool = False
    timeout_s: float = TORCHSERVE_TIMEOUT_S
    per_version: int = 0
    shared_by: int = 1
    start_timeout_s: float = 300.0
    environment_paths: EnvironmentPaths = no_environment


@dataclass(frozen=True)
class Counts:
    min_workers: int = 1
    max_workers: int = 1
    timeout_s: float = TORCHSERVE_TIMEOUT_S


def counts_for(
    backend: str, model_path: Path, instance_count: int, options: WorkerOptions
) -> Counts:
    """The version's worker counts and timeout."""
    low = high = max(1, instance_count)
    timeout = options.timeout_s
    if backend == HANDLER_RUNTIME and model_path.parent.name == WORKFLOW_DIRECTORY:
        timeout = max(timeout, _workflow_bound_s(model_path))
    elif backend == HANDLER_RUNTIME:
        document = _model_yaml(model_path)
        low = _positive(document.get("minWorkers"), 1)
        high = max(low, _positive(document.get("maxWorkers"), low))
        timeout = float(_positive(document.get("responseTimeout"), int(timeout)))
    if options.per_version:
        low = high = options.per_version
    return Counts(low, high, timeout)


def _workflow_bound_s(manifest_path: Path) -> float:
    """The longest a workflow's DAG may legally run: its nodes run one after another, each
    up to its ``timeout-ms`` per attempt (0 where a node sets no limit: the options' timeout
    alone then bounds the worker)."""
    from lambdaserve.runtimes.torchserve.workflow import read_spec

    nodes = read_spec(manifest_path, parse_handler=False).nodes.values()
    if any(not node.timeout_ms for node in nodes):
        return 0.0
    return sum(node.timeout_ms * (node.retries + 1) for node in nodes) / 1000


def _positive(value: Any, default: int) -> int:
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
    )


def _model_yaml(model_path: Path) -> dict[str, Any]:
    """The archive's model-config.yaml (named by its manifest), or one beside a bare handler."""
    from lambdaserve.runtimes.torchserve.manifest import MANIFEST, read_manifest

    if model_path.name == Path(MANIFEST).name:
        model_dir = model_path.parent.parent
        name = read_manifest(model_path).config_file
    else:
        model_dir, name = model_path.parent, "model-config.yaml"
    path = model_dir / name if name else None
    if path is None or not path.is_file():
        return {}
    import yaml

    try:
        document = yaml.safe_load(path.read_bytes())
    except yaml.YAMLError:
        return {}
    return document if isinstance(document, dict) else {}
