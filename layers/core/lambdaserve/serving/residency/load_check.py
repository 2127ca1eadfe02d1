"""A version with model code, loaded where it serves before it may be READY.

The manage function reads model code without running it; whether a handler imports, its
``initialize`` runs and its warm-up answers is learnt only where it serves. The registrar
asks this environment (the infer function, or the dev stack's infer process) to load the
validated version — the same cache, runtime and warm-up a request's load goes through — and
records READY or the code's own error. The loaded version stays loaded: its first request
is warm.
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass, replace

from lambdaserve.catalog.configs import effective_config
from lambdaserve.catalog.store import VersionRecord
from lambdaserve.config.runtime_names import HANDLER_RUNTIME
from lambdaserve.errors import LambdaServeError, first_line
from lambdaserve.serving.residency.residency import Residency
from lambdaserve.serving.version_resolver import ServedVersion
from lambdaserve.tensors.signature import Signature

logger = logging.getLogger(__name__)

# What a missing package means, and the fix where we know it.
_FIXES = {
    "ts": (
        "TorchServe's handler code (the ts package) is not installed where it serves: run "
        "`make dev TORCHSERVE=1` locally, or deploy `make build VARIANT=torchserve` with "
        "EnablePythonModels=true"
    ),
    "torch": (
        "PyTorch is not installed where it serves: run `make dev TORCH=1` (or TORCHSERVE=1 for "
        "TorchServe archives) locally, or deploy `make build VARIANT=torchserve` with "
        "EnablePythonModels=true"
    ),
}

# A TorchServe archive or handler missing torch: the flag that installs both first
_TORCH_FOR_HANDLERS = (
    "PyTorch is not installed where it serves: run `make dev TORCHSERVE=1` (TorchServe's ts "
    "and torch) locally, or deploy `make build VARIANT=torchserve` with EnablePythonModels=true"
)


@dataclass(frozen=True)
class LoadCheck:
    """What loading a version here found: ``reason`` is empty when it loaded and warmed up."""

    reason: str
    environment: str

    @property
    def loaded(self) -> bool:
        return not self.reason


def environment_name() -> str:
    """Which environment checked: the Lambda function's name, else this process."""
    function = os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
    return f"the infer function {function}" if function else f"the infer process {os.getpid()}"


def check_load(
    residency: Residency, record: VersionRecord, *, gpu_served_elsewhere: bool = False
) -> LoadCheck:
    """Load ``record`` (validated, not yet READY) as a request would: files, runtime,
    ``initialize``, warm-up. Never raises for the model's own failures.

    ``gpu_served_elsewhere``: KIND_GPU versions are served by the server-mode task, not
    here; loading them on this CPU would judge them where they do not serve."""
    where = environment_name()
    importlib.invalidate_caches()  # a package installed since the last check is found
    try:
        served = _served(residency, record)
        if gpu_served_elsewhere and served.config.instance_kind == "GPU":
            logger.info(
                "%s version %s is KIND_GPU: not loaded in %s (the server-mode task serves "
                "it, and reports a load failure when it loads it)",
                record.model,
                record.version,
                where,
            )
            return LoadCheck("", f"{where}: not loaded here, KIND_GPU serves on the task")
        residency.load(served)
    except LambdaServeError as exc:
        reason = exc.message
    except Exception as exc:  # the code raised something no runtime wrapped
        logger.exception("checking %s version %s failed", record.model, record.version)
        reason = f"{type(exc).__name__}: {first_line(exc, 500)}"
    else:
        logger.info("%s version %s loaded in %s", record.model, record.version, where)
        return LoadCheck("", where)
    return LoadCheck(with_fix(reason, record.runtime), where)


def with_fix(reason: str, runtime: str = "") -> str:
    """``reason`` with what to do about it, where a missing package says what is missing;
    the flag for the artifact first (a TorchServe archive or handler: TORCHSERVE=1)."""
    for package, fix in _FIXES.items():
        if f"No module named '{package}'" in reason:
            handlers = package == "torch" and runtime == HANDLER_RUNTIME
            return f"{reason}; {_TORCH_FOR_HANDLERS if handlers else fix}"
    return reason


def _served(residency: Residency, record: VersionRecord) -> ServedVersion:
    model = residency.resolver.catalog.get_model(record.model)
    if model is not None:  # what the version's auto_complete_config filled in applies
        model = replace(model, auto_completed=record.auto_completed)
    return ServedVersion(
        record.model,
        record.version,
        effective_config(model, record.model).config,
        record,
        Signature.from_json(record.signature),
        model.class_labels if model is not None else {},
        model.initial_states if model is not None else {},
    )
