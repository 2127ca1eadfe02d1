"""What Python models and TorchServe handlers share: model code read without running it (at
publish), imported where it serves, and one request served through the batch call."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import symtable
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Outline:
    """What model code defines at its top level, read without running it."""

    functions: frozenset[str]
    # class name -> the methods it defines itself
    classes: dict[str, frozenset[str]]
    # classes declared with base classes (``class H(BaseHandler):``)
    derived: frozenset[str]


def outline(path: Path) -> Outline:
    """The file's top-level functions and classes, or ModelRejected saying where it does not
    parse. Read through ``symtable``, not ``ast.parse``: CPython 3.11 keeps the AST object
    builder's recursion depth per interpreter, so ``ast.parse`` in two threads at once (a
    validation beside a traceback being formatted) fails with "AST constructor recursion
    depth mismatch"; the symbol table is built without AST objects."""
    source = path.read_bytes()
    try:
        table = symtable.symtable(source.decode("utf-8"), path.name, "exec")
    except SyntaxError as exc:
        raise ModelRejected(f"{path.name} line {exc.lineno}: {exc.msg}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelRejected(f"{path.name} is not Python source: {exc}") from None
    functions, classes = set(), {}
    for child in table.get_children():
        if child.get_type() == "function":
            functions.add(child.get_name())
        elif child.get_type() == "class":
            classes[child.get_name()] = frozenset(
                c.get_name() for c in child.get_children() if c.get_type() == "function"
            )
    text = source.decode("utf-8")
    derived = {name for name in classes if re.search(rf"^class\s+{name}\s*\(\s*[^)\s]", text, re.M)}
    return Outline(frozenset(functions), classes, frozenset(derived))


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
