"""A handler loaded by TorchServe's own worker code (the ``ts`` package, ``torchserve`` on
PyPI): ``TsModelLoader`` reads the manifest, imports the handler from the model directory
(helper modules beside it import too), builds TorchServe's ``Context`` (manifest,
``system_properties``, ``model_yaml_config`` from the archive's ``model-config.yaml``) and
calls ``initialize(context)`` / ``handle(None, context)``, as TorchServe's worker does.

Differences from a TorchServe worker, and why: one process serves every model, so each
handler's modules are imported from its own directory under a lock and the names it ships
are taken out of ``sys.modules`` first (two archives may both ship ``handler.py``);
``context.metrics`` records into this process's ``/metrics`` instead of log lines; state
dicts load with ``weights_only`` forced on (``TORCH_FORCE_WEIGHTS_ONLY_LOAD``), never as
pickles.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lambdaserve.errors import ModelNotReady
from lambdaserve.metrics.custom import CUSTOM_METRICS, CustomMetrics
from lambdaserve.runtimes.torchserve import torchvision_ops
from lambdaserve.runtimes.torchserve.context import Answer, encode_answer
from lambdaserve.runtimes.torchserve.manifest import MANIFEST, Manifest

MISSING = (
    "this model is a TorchServe archive and TorchServe's handler code (the ts package) is not "
    "installed where it serves: run `make dev TORCHSERVE=1` locally, or deploy `make build "
    "VARIANT=torchserve` with EnablePythonModels=true (lambdaserve[torchserve]: "
    "torchserve==0.12.0 and torch==2.13.0)"
)
_IMPORTS = threading.Lock()
logger = logging.getLogger(__name__)


class TorchServeSession:
    """TorchServe's context around one call: request headers in, statuses and content
    types out, as the worker reads them after ``handle``."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self.handler_context = service.context

    def call(self, rows: list[dict[str, Any]], context: Any) -> Any:
        return self.service._entry_point(rows, context)

    def close(self) -> None:
        forget(Path(str(self.handler_context.system_properties["model_dir"])))

    def begin(self, headers: list[Mapping[str, str]]) -> None:
        from ts.context import RequestProcessor

        context = self.handler_context
        ids = {i: str(uuid.uuid4()) for i in range(len(headers))}
        context.request_ids = ids
        context.request_processor = [RequestProcessor(dict(h)) for h in headers]
        if context.metrics is not None:
            context.metrics.set_request_ids(ids)

    def answer(self, idx: int, result: Any) -> Answer:
        """As TorchServe's worker encodes, with the status and type the handler set."""
        context = self.handler_context
        status, _ = context.get_response_status(idx)
        return encode_answer(result, context.get_response_content_type(idx), status)


def installed() -> bool:
    """Whether TorchServe's ``ts`` package can be imported here."""
    import importlib.util

    try:
        return importlib.util.find_spec("ts.model_loader") is not None
    except (ImportError, ValueError):
        return False


def load_service(manifest: Manifest, model_dir: Path, batch_size: int) -> Any:
    """TorchServe's ``Service`` for the archive in ``model_dir``, initialized."""
    try:
        from ts.model_loader import TsModelLoader
    except ImportError:
        raise ModelNotReady(MISSING) from None
    os.environ.setdefault("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "1")

    def load() -> Any:
        if not (model_dir / MANIFEST).is_file():
            return _load_bare(manifest, model_dir, batch_size)
        try:
            return TsModelLoader().load(
                manifest.model_name,
                str(model_dir),
                manifest.handler,
                gpu_id=_gpu_id(),
                batch_size=batch_size,
                envelope=None,
                limit_max_image_pixels=True,
                metrics_cache=metrics_cache(manifest.model_name),
            )
        except ImportError as error:
            raise _handler_import_error(error, manifest, model_dir) from None

    with imports_from(model_dir), _without_unasked_openvino(model_dir):
        try:
            return load()
        except RuntimeError as error:
            if not torchvision_ops.missing_operators(error):
                raise
        # the built-in vision handlers import torchvision: its Python serves without its C++ ops
        torchvision_ops.import_torchvision()
        return load()


def _load_bare(manifest: Manifest, model_dir: Path, batch_size: int) -> Any:
    """A bare ``<v>/handler.py``: TorchServe's loader steps, given the manifest
    torch-model-archiver would have written (its loader reads one only from MAR-INF)."""
    from ts.model_loader import TsModelLoader
    from ts.service import Service

    loader = TsModelLoader()
    module, function_name = loader._load_handler_file(manifest.handler)
    function_name = function_name or "handle"
    if hasattr(module, function_name):
        entry_point, initialize = loader._get_function_entry_point(module, function_name)
    else:
        entry_point, initialize = loader._get_class_entry_point(module)
    service = Service(
        manifest.model_name,
        str(model_dir),
        manifest.document,
        entry_point,
        _gpu_id(),
        batch_size,
        True,
        metrics_cache(manifest.model_name),
    )
    initialize(service.context)
    return service


def _handler_import_error(error: ImportError, manifest: Manifest, model_dir: Path) -> ImportError:
    """The handler file's own ImportError (a package it needs is missing), not the one of
    the built-in handler TorchServe's loader falls back to (``ts.torch_handler.<name>``)."""
    shipped = manifest.handler_file and (model_dir / manifest.handler_file).is_file()
    cause = error.__context__
    if shipped and isinstance(cause, ImportError) and "ts.torch_handler" in str(error):
        return cause
    return error


@contextmanager
def imports_from(model_dir: Path) -> Iterator[None]:
    """The model directory first on ``sys.path`` while its handler is imported (and after:
    handlers import lazily), the modules it ships imported afresh from it."""
    shipped = {p.stem for p in model_dir.glob("*.py")} | {
        p.name for p in model_dir.iterdir() if p.is_dir() and (p / "__init__.py").is_file()
    }
    with _IMPORTS:
        for name in shipped:
            module = sys.modules.get(name)
            if module is not None and not _from(module, model_dir):
                del sys.modules[name]
        directory = str(model_dir)
        if directory in sys.path:
            sys.path.remove(directory)
        sys.path.insert(0, directory)
        yield


_OPENVINO_TORCH = "openvino.torch"


@contextmanager
def _without_unasked_openvino(model_dir: Path) -> Iterator[None]:
    """TorchServe's BaseHandler imports OpenVINO's torch.compile backend whenever OpenVINO
    is installed (4-6 s of a handler's load, measured: docs/benchmarks.md); a model that does
    not ask for it (``pt2: {backend: openvino}`` in its model-config.yaml) loads without:
    the import fails as if OpenVINO were absent, which BaseHandler expects."""
    asks = any(
        "openvino" in path.read_text(errors="replace")
        for path in (*model_dir.glob("*.yaml"), *model_dir.glob("*.yml"))
        if path.is_file()
    )
    if asks or _OPENVINO_TORCH in sys.modules:
        yield
        return
    sys.modules[_OPENVINO_TORCH] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.modules.get(_OPENVINO_TORCH, "") is None:  # a later explicit import may load it
            del sys.modules[_OPENVINO_TORCH]


def forget(model_dir: Path) -> None:
    """Take an unloaded model's directory off ``sys.path``."""
    with _IMPORTS:
        while str(model_dir) in sys.path:
            sys.path.remove(str(model_dir))


def _from(module: Any, model_dir: Path) -> bool:
    location = getattr(module, "__file__", None)
    if not location:
        return False
    return Path(location).resolve().is_relative_to(model_dir.resolve())


def _gpu_id() -> int | None:
    try:
        import torch
    except ImportError:
        return None
    wanted = os.environ.get("LAMBDASERVE_DEVICE", "")
    return 0 if wanted != "cpu" and torch.cuda.is_available() else None


def metrics_cache(model: str, metrics: CustomMetrics = CUSTOM_METRICS) -> Any:
    """TorchServe's metrics cache interface over this process's custom metrics."""
    from ts.metrics.metric_cache_abstract import MetricCacheAbstract
    from ts.metrics.metric_cache_errors import MetricsCacheKeyError

    class RecordedMetric:
        def __init__(self, name: str, unit: str, labels: list[str], kind: str) -> None:
            self.metric_name, self.unit, self.labels, self.kind = name, unit, labels, kind

        def add_or_update(
            self, value: float, dimension_values: list[str] | None = None, request_id: str = ""
        ) -> None:
            values = [str(v) for v in dimension_values or []]
            try:
                metrics.record(
                    self.metric_name,
                    kind=self.kind,
                    unit=self.unit,
                    labels=self.labels,
                    values=values,
                    value=value,
                )
            except ValueError as exc:  # as TorchServe: a bad metric is logged, never raised
                logger.error("[METRICS] %s", exc)

        def update(self, value: float, request_id: str = "", dimensions: Any = None) -> None:
            self.add_or_update(value, [d.value for d in dimensions or []], request_id)

    class ProcessMetricsCache(MetricCacheAbstract):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(config_file_path="")
            self.model_name = model

        def initialize_cache(self) -> None:
            return None

        def get_metric(self, metric_name: str, metric_type: Any = None) -> Any:
            kind = getattr(metric_type, "value", "counter")
            try:
                return self.cache[(kind, metric_name)]
            except KeyError:
                raise MetricsCacheKeyError(f"no metric {metric_name!r}") from None

        def add_metric_to_cache(
            self,
            metric_name: str,
            unit: str,
            dimension_names: list[str] | None = None,
            metric_type: Any = None,
        ) -> Any:
            kind = getattr(metric_type, "value", "counter")
            metric = RecordedMetric(metric_name, unit, list(dimension_names or []), kind)
            self.cache[(kind, metric_name)] = metric
            return metric

    return ProcessMetricsCache()
