"""TorchServe custom handlers, unchanged: ``<v>/handler.py`` with a module-level
``handle(data, context)``, or one class with ``initialize(context)`` and ``handle`` (or
``preprocess`` / ``inference`` / ``postprocess``, called in that order as TorchServe's
BaseHandler does).

``data`` is TorchServe's: one dict per request, ``{"body": ...}`` for a raw body (parsed
JSON for ``application/json``) or one key per multipart field. Handlers that import ``ts``
internals (``ts.torch_handler.*``, ``ts.context``) are not supported: nothing of ``ts`` is
installed. Like Python models, handlers run only where they serve and only when
``LAMBDASERVE_PYTHON_MODELS`` allows it; publishing checks them statically.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.errors import InferenceError, LambdaServeError, ModelNotReady, ModelRejected
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.runtimes.handler_context import Answer, Context
from lambdaserve.runtimes.model_code import DISABLED, new_module, parse_source, run_one
from lambdaserve.tensors.signature import Arrays, Signature, TensorSpec

# The tensor face of a handler (v2 infer, queues): one BYTES element per request body in,
# one answer and its content type per request out.
SIGNATURE = Signature(
    inputs=(TensorSpec("data", "BYTES", (-1,)),),
    outputs=(TensorSpec("output", "BYTES", (-1,)), TensorSpec("content_type", "BYTES", (-1,))),
)
_STAGES = ("preprocess", "inference", "postprocess")


class TorchServeHandlerRuntime:
    name = "torchserve_handler"

    def inspect(self, model_path: Path, config: ModelConfig) -> Signature:
        """Static checks only: the manage function never runs handler code."""
        tree = parse_source(model_path)
        for node in ast.walk(tree):
            for module in _imported_modules(node):
                if module != "ts" and not module.startswith("ts."):
                    continue
                raise ModelRejected(
                    f"handler.py imports {module}: TorchServe's internals are not available "
                    "here; define handle(data, context) or a plain class instead"
                )
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
        if "handle" not in functions and not any(_handler_class(c) for c in classes):
            raise ModelRejected(
                "handler.py defines neither handle(data, context) nor a class with "
                "handle (or preprocess, inference and postprocess), as TorchServe requires"
            )
        return SIGNATURE

    def load(
        self, model_path: Path, config: ModelConfig, signature: Signature, options: LoadOptions
    ) -> HandlerModel:
        if not options.python_models:
            raise ModelNotReady(DISABLED)
        module, loader = new_module(model_path, config.name)
        context = Context(config.name, options.version, model_path.parent, config.max_batch_size)
        try:
            loader.exec_module(module)
            entry = _entry_point(module, context)
        except Exception as exc:
            raise ModelNotReady(
                f"handler.py of {config.name!r} failed to load: {type(exc).__name__}: {exc}"
            ) from exc
        return HandlerModel(entry, context)


class HandlerModel:
    """A loaded handler: every request of a batch in one call, as TorchServe batches."""

    device = "cpu"

    def __init__(self, entry: Any, context: Context) -> None:
        self._entry = entry
        self._context = context

    def handle_rows(
        self, rows: list[dict[str, Any]], headers: list[Mapping[str, str]] | None = None
    ) -> list[Answer]:
        """TorchServe's call: one dict per request in, one answer per request out."""
        self._context.begin(headers or [{} for _ in rows])
        try:
            results = self._entry(rows, self._context)
        except Exception as exc:
            raise InferenceError(f"the handler raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(results, list) or len(results) != len(rows):
            got = len(results) if isinstance(results, list) else type(results).__name__
            raise InferenceError(
                f"the handler must return a list with one answer per request: it was given "
                f"{len(rows)} and returned {got}"
            )
        try:
            return [self._context.answer(i, result) for i, result in enumerate(results)]
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


def _entry_point(module: Any, context: Context) -> Any:
    """TorchServe's rule: a module-level ``handle`` wins, else the module's handler class."""
    if callable(getattr(module, "handle", None)):
        return module.handle
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


def _handler_class(node: ast.ClassDef) -> bool:
    methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    return "handle" in methods or set(_STAGES) <= methods


def _imported_modules(node: ast.AST) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return []
