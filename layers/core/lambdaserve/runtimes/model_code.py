"""What Python models and TorchServe handlers share: model code read without running it (at
publish), imported where it serves, and one request served through the batch call."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from lambdaserve.errors import LambdaServeError, ModelNotReady, ModelRejected
from lambdaserve.runtimes.base import RequestsModel
from lambdaserve.tensors.signature import Arrays

DISABLED = (
    "Python models are disabled here: they run their own code with the serving function's "
    "permissions; enable them with LAMBDASERVE_PYTHON_MODELS=1 (template parameter "
    "EnablePythonModels=true; `lambdaserve dev` enables them)"
)


def parse_source(path: Path) -> ast.Module:
    """The file's syntax tree, or ModelRejected saying where it does not parse."""
    try:
        return ast.parse(path.read_bytes(), filename=path.name)
    except SyntaxError as exc:
        raise ModelRejected(f"{path.name} line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:
        raise ModelRejected(f"{path.name} is not Python source: {exc}") from None


def new_module(path: Path, model: str) -> tuple[ModuleType, Any]:
    """A fresh module for ``path`` (named by its location, so versions never share one) and
    its loader; ModelNotReady when it cannot be imported."""
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(f"lambdaserve_{path.stem}_{digest}", path)
    if spec is None or spec.loader is None:
        raise ModelNotReady(f"{path.name} of {model!r} cannot be imported")
    return importlib.util.module_from_spec(spec), spec.loader


def run_one(
    model: RequestsModel, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]
) -> Arrays:
    """One request through a model whose call takes several."""
    [answer] = model.run_requests([(inputs, outputs)])
    if isinstance(answer, LambdaServeError):
        raise answer
    return answer
