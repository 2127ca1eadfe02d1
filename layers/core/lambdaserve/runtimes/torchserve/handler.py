"""TorchServe handlers, unchanged: an unpacked archive (``MAR-INF/MANIFEST.json`` with the
files torch-model-archiver packed: a custom ``handler.py``, a ``BaseHandler`` subclass or a
built-in handler name, an eager ``model.py`` with its state dict, ``model-config.yaml``), or
a bare ``<v>/handler.py``.

Where TorchServe's ``ts`` package is installed (``lambdaserve[torchserve]``), TorchServe's own
loader and ``Context`` run the handler (``torchserve_worker``). Without it, handlers that do not
import ``ts`` still run: a module-level ``handle(data, context)`` (called with ``None`` at load,
as TorchServe's worker does) or one class with ``initialize(context)`` and ``handle`` (or
``preprocess`` / ``inference`` / ``postprocess``), over a context of the same shape.

``data`` is TorchServe's: one dict per request, ``{"body": ...}`` for a raw body (parsed
JSON for ``application/json``) or one key per multipart field. Like Python models, handlers
run only where they serve and only when ``LAMBDASERVE_PYTHON_MODELS`` allows it; publishing
reads them without running them.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import orjson

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.runtime_names import HANDLER_RUNTIME, RuntimeName
from lambdaserve.errors import (
    InferenceError,
    LambdaServeError,
    ModelNotReady,
)
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.runtimes.code_errors import (
    current_request_ids,
    load_failure,
    log_code_failure,
)
from lambdaserve.runtimes.model_code import DISABLED, new_module, run_one
from lambdaserve.runtimes.torchserve import workflow as torchserve_workflow
from lambdaserve.runtimes.torchserve.context import Answer, Context
from lambdaserve.runtimes.torchserve.manifest import (
    MANIFEST,
    FrontendBatching,
    Manifest,
    check_archive,
    check_handler,
    frontend_batching,
    read_manifest,
    synthesized_manifest,
)
from lambdaserve.tensors.signature import Arrays, Signature, TensorSpec

# The tensor face of a handler (v2 infer, queues): one BYTES element per request body in,
# one answer and its content type per request out.
SIGNATURE = Signature(
    inputs=(TensorSpec("data", "BYTES", (-1,)),),
    outputs=(TensorSpec("output", "BYTES", (-1,)), TensorSpec("content_type", "BYTES", (-1,))),
)
_STAGES = ("preprocess", "inference", "postprocess")


class Session(Protocol):
    """The context of one call: what the handler is given, and how its answers are read."""

    handler_context: Any

    def begin(self, headers: list[Mapping[str, str]]) -> None: ...

    def call(self, rows: list[dict[str, Any]], context: Any) -> Any: ...

    def answer(self, idx: int, result: Any) -> Answer: ...

    def close(self) -> None: ...


class TorchServeHandlerRuntime:
    name: RuntimeName = HANDLER_RUNTIME

    def inspect(self, model_path: Path, config: ModelConfig) -> Signature:
        """Static checks only: the manage function never runs handler code."""
        if _is_workflow(model_path):
            torchserve_workflow.read_spec(model_path)
        elif model_path.name == Path(MANIFEST).name:
            check_archive(read_manifest(model_path), _model_dir(model_path))
        else:
            check_handler(model_path)
        return SIGNATURE

    def load(
        self, model_path: Path, config: ModelConfig, signature: Signature, options: LoadOptions
    ) -> HandlerModel:
        if not options.python_models:
            raise ModelNotReady(DISABLED)
        model_dir = _model_dir(model_path)
        batching = FrontendBatching()
        try:
            if _is_workflow(model_path):
                session: Session = _load_workflow(model_path, model_dir, config, options.version)
            else:
                manifest = _manifest(model_path, config.name)
                batching = frontend_batching(manifest, model_dir)
                session = _load_session(manifest, model_dir, config, options.version, batching)
        except LambdaServeError:
            raise
        except Exception as exc:
            log_code_failure("the handler", config.name, options.version, exc)
            raise load_failure("the handler", config.name, exc) from exc
        return HandlerModel(session, batching, (config.name, options.version))


def _load_session(
    manifest: Manifest,
    model_dir: Path,
    config: ModelConfig,
    version: int,
    batching: FrontendBatching,
) -> Any:
    from lambdaserve.runtimes.torchserve import worker as torchserve_worker

    if torchserve_worker.installed():
        try:
            # the context's batch_size: model-config.yaml's, as TorchServe's frontend passes it
            batch_size = batching.batch_size or max(1, config.max_batch_size)
            service = torchserve_worker.load_service(manifest, model_dir, batch_size)
            return torchserve_worker.TorchServeSession(service)
        except ValueError as exc:
            # TorchServe's loader refuses a class of stages only (no handle); lambdaserve
            # runs its stages in order, as it always has
            if not manifest.handler_file or "Expect handle method" not in str(exc):
                raise
    if not manifest.handler_file:
        raise ModelNotReady(torchserve_worker.MISSING)
    context = Context(config.name, version, model_dir, config.max_batch_size, manifest.document)
    with torchserve_worker.imports_from(model_dir):
        module, loader = new_module(model_dir / manifest.handler_file, config.name)
        loader.exec_module(module)
        entry = _entry_point(module, context, manifest.handler)
    return _PlainSession(entry, context)


def _is_workflow(model_path: Path) -> bool:
    return model_path.parent.name == Path(torchserve_workflow.WORKFLOW_MANIFEST).parent.name


def _load_workflow(model_path: Path, model_dir: Path, config: ModelConfig, version: int) -> Any:
    from lambdaserve.runtimes.torchserve import worker as torchserve_worker

    spec = torchserve_workflow.read_spec(model_path, parse_handler=False)
    context = Context(config.name, version, model_dir, config.max_batch_size)
    with torchserve_worker.imports_from(model_dir):
        return torchserve_workflow.WorkflowSession(spec, model_dir, context)


def _model_dir(model_path: Path) -> Path:
    return model_path.parent.parent if model_path.name == Path(MANIFEST).name else model_path.parent


def _manifest(model_path: Path, model: str) -> Manifest:
    if model_path.name == Path(MANIFEST).name:
        return read_manifest(model_path)
    return synthesized_manifest(model, model_path.parent)


class _PlainSession:
    """A handler run without ``ts``: its entry point over lambdaserve's context."""

    def __init__(self, entry: Any, context: Context) -> None:
        self._entry = entry
        self.handler_context = context

    def call(self, rows: list[dict[str, Any]], context: Any) -> Any:
        return self._entry(rows, context)

    def close(self) -> None:
        from lambdaserve.runtimes.torchserve import worker as torchserve_worker

        torchserve_worker.forget(self.handler_context.model_dir)

    def begin(self, headers: list[Mapping[str, str]]) -> None:
        self.handler_context.begin(headers)

    def answer(self, idx: int, result: Any) -> Answer:
        return self.handler_context.answer(idx, result)


class HandlerModel:
    """A loaded handler: every request of a batch in one call, as TorchServe batches; one
    call at a time (TorchServe's context holds the call's requests)."""

    device = "cpu"

    def __init__(
        self,
        session: Session,
        batching: FrontendBatching | None = None,
        served: tuple[str, int] = ("", 0),
    ) -> None:
        self._session = session
        self._calls = threading.Lock()
        self.batching = batching or FrontendBatching()
        self._served = served  # model and version, for the log

    def close(self) -> None:
        self._session.close()

    @property
    def overrun(self) -> str:
        """Why this process should end (a workflow's function node still running past its
        timeout-ms: a thread nothing can stop), else empty; a worker is then replaced."""
        return str(getattr(self._session, "overrun", ""))

    def handle_rows(
        self, rows: list[dict[str, Any]], headers: list[Mapping[str, str]] | None = None
    ) -> list[Answer]:
        """TorchServe's call: one dict per request in, one answer per request out."""
        session = self._session
        with self._calls:
            session.begin(headers or [{} for _ in rows])
            try:
                results = session.call(rows, session.handler_context)
            except Exception as exc:
                known = getattr(session.handler_context, "request_ids", None) or {}
                ids = current_request_ids(len(rows), [known[i] for i in sorted(known)])
                log_code_failure("the handler", *self._served, exc, ids)
                raise InferenceError(f"the handler raised {type(exc).__name__}: {exc}") from exc
            return self._answers(rows, results)

    def _answers(self, rows: list[dict[str, Any]], results: Any) -> list[Answer]:
        session = self._session
        if not isinstance(results, list) or len(results) != len(rows):
            got = len(results) if isinstance(results, list) else type(results).__name__
            raise InferenceError(
                f"the handler must return a list with one answer per request: it was given "
                f"{len(rows)} and returned {got}"
            )
        try:
            return [session.answer(i, result) for i, result in enumerate(results)]
        except TypeError as exc:
            raise InferenceError(f"the handler's answer cannot be sent as JSON: {exc}") from exc

    def run(self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]) -> Arrays:
        return run_one(self, inputs, outputs)

    def run_requests(
        self, requests: Sequence[tuple[Mapping[str, np.ndarray[Any, Any]], Sequence[str]]]
    ) -> list[Arrays | LambdaServeError]:
        rows, owners = [], []
        for index, (inputs, _) in enumerate(requests):
            for element in np.asarray(inputs["data"]).reshape(-1):
                rows.append({"body": _body(element)})
                owners.append(index)
        try:
            answers = self.handle_rows(rows)
        except LambdaServeError as exc:
            return [exc] * len(requests)
        results: list[Arrays | LambdaServeError] = []
        for index, (_, names) in enumerate(requests):
            mine = [a for a, owner in zip(answers, owners, strict=True) if owner == index]
            arrays = {
                "output": np.array([a.body for a in mine], dtype=object),
                "content_type": np.array([a.content_type.encode() for a in mine], dtype=object),
            }
            results.append({name: arrays[name] for name in names})
        return results


def _body(element: Any) -> Any:
    raw = element if isinstance(element, bytes) else str(element).encode()
    try:
        return orjson.loads(raw)  # TorchServe hands JSON bodies over parsed
    except orjson.JSONDecodeError:
        return bytearray(raw)


def _entry_point(module: Any, context: Context, handler: str) -> Any:
    """TorchServe's rule: the named (or a module-level ``handle``) function, called once with
    ``None`` at load; else the module's one handler class, initialized."""
    function = handler.split(":", 1)[1] if ":" in handler else "handle"
    if callable(getattr(module, function, None)):
        entry = getattr(module, function)
        entry(None, context)
        return entry
    classes = [
        c
        for _, c in inspect.getmembers(module, inspect.isclass)
        if c.__module__ == module.__name__ and (hasattr(c, "handle") or _has_stages(c))
    ]
    if len(classes) != 1:
        raise TypeError(f"expected one handler class in handler.py, found {len(classes)}")
    instance: Any = classes[0]()
    if hasattr(instance, "initialize"):
        instance.initialize(context)
    if hasattr(instance, "handle"):
        return instance.handle

    def staged(data: list[dict[str, Any]], ctx: Context) -> Any:
        return instance.postprocess(instance.inference(instance.preprocess(data)))

    return staged


def _has_stages(cls: type) -> bool:
    return all(callable(getattr(cls, stage, None)) for stage in _STAGES)
