"""Model code's exceptions are logged for their author (traceback with the user's frames,
model, version, request ids) while the client keeps the short message; a handler that fails
to import says what it could not import."""

from __future__ import annotations

import logging
import traceback

import numpy as np
import pytest

from lambdaserve.catalog import version_policy
from lambdaserve.errors import InferenceError
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.serving.raw_predictions import RawRequest, predict_raw
from lambdaserve.wiring.inference import build_model_server

CONFIG = b"""
backend: "python"
max_batch_size: 0
input [{ name: "X", data_type: TYPE_FP32, dims: [1] }]
output [{ name: "Y", data_type: TYPE_FP32, dims: [1] }]
"""
RAISING_EXECUTE = b"""
class TritonPythonModel:
    def execute(self, requests):
        return self.scale(requests)

    def scale(self, requests):
        raise ValueError("the scale table has no row for this input")
"""
RAISING_HANDLE = b"""
class Handler:
    def initialize(self, context):
        self.ready = True

    def handle(self, data, context):
        return self.lookup(data)

    def lookup(self, data):
        raise KeyError("no label for class 7")
"""
MISSING_IMPORT = b"""
import a_package_this_environment_lacks_0c1d

def handle(data, context):
    return data
"""


@pytest.fixture
def enabled(model_code_enabled):
    return model_code_enabled


def _logged(caplog: pytest.LogCaptureFixture) -> logging.LogRecord:
    records = [r for r in caplog.records if r.name == "lambdaserve.model_code" and r.exc_info]
    assert len(records) == 1, [r.getMessage() for r in caplog.records]
    return records[0]


def _frames(record: logging.LogRecord) -> str:
    assert record.exc_info is not None
    return "".join(traceback.format_exception(*record.exc_info))


def test_a_python_models_exception_is_logged_with_its_traceback_and_request_id(enabled, caplog):
    """Given a Python model whose execute raises two calls deep
    When a v2 request with an id reaches it
    Then the client's error is the short message, and the log has the traceback through
    model.py's own frames with the model, version and request id."""
    enabled.put("models/scaler/config.pbtxt", CONFIG)
    enabled.put("models/scaler/1/model.py", RAISING_EXECUTE)
    enabled.services.registrar.reconcile_model("scaler")
    assert enabled.services.catalog.get_version("scaler", 1).state == version_policy.READY
    server = build_model_server(enabled.settings, enabled.clients)
    request = InferRequest(
        inputs=(InferInput("X", "FP32", (1,), np.ones(1, np.float32)),), id="req-4711"
    )
    with caplog.at_level(logging.ERROR, logger="lambdaserve"):
        (result,) = server.infer_many("scaler", None, [request])
    assert isinstance(result.error, InferenceError)
    assert "Traceback" not in result.error.message
    assert "the scale table has no row for this input" in result.error.message
    record = _logged(caplog)
    assert "model.py of scaler version 1 raised ValueError" in record.getMessage()
    assert "req-4711" in record.getMessage()
    frames = _frames(record)
    assert 'model.py", line 7, in scale' in frames
    assert 'model.py", line 4, in execute' in frames


def test_a_handlers_exception_is_logged_with_its_traceback(enabled, caplog):
    """Given a TorchServe handler whose handle raises in a helper method
    When a request reaches it
    Then the client gets the short message, the log the handler's frames with the model,
    version and a request id."""
    enabled.put("models/labels/1/handler.py", RAISING_HANDLE)
    enabled.services.registrar.reconcile_model("labels")
    assert enabled.services.catalog.get_version("labels", 1).state == version_policy.READY
    server = build_model_server(enabled.settings, enabled.clients)
    with (
        caplog.at_level(logging.ERROR, logger="lambdaserve"),
        pytest.raises(InferenceError, match="the handler raised KeyError: 'no label for class 7'"),
    ):
        predict_raw(server, "labels", None, RawRequest((("body", b"x"),), {}))
    record = _logged(caplog)
    assert "the handler of labels version 1 raised KeyError" in record.getMessage()
    assert "(request " in record.getMessage()
    frames = _frames(record)
    assert 'handler.py", line 10, in lookup' in frames
    assert 'handler.py", line 7, in handle' in frames


def test_a_handler_failing_to_import_reports_its_own_import_error(enabled, caplog):
    """Given a handler.py importing a package this environment lacks, run by TorchServe's
    own loader (which falls back to its built-in handler names on an ImportError)
    When it is uploaded
    Then the version is UNAVAILABLE naming the missing package, not
    'ts.torch_handler.handler', and the log has the handler's frame."""
    pytest.importorskip("ts")
    enabled.put("models/needs/1/handler.py", MISSING_IMPORT)
    with caplog.at_level(logging.ERROR, logger="lambdaserve"):
        enabled.services.registrar.reconcile_model("needs")
    record = enabled.services.catalog.get_version("needs", 1)
    assert record.state == version_policy.UNAVAILABLE
    assert "No module named 'a_package_this_environment_lacks_0c1d'" in record.reason
    assert "ts.torch_handler" not in record.reason
    assert 'handler.py", line 2, in <module>' in _frames(_logged(caplog))


@pytest.mark.parametrize(
    ("reason", "fix"),
    [
        ("ModuleNotFoundError: No module named 'ts'", "make dev TORCHSERVE=1"),
        ("ModuleNotFoundError: No module named 'torch'", "make dev TORCH=1"),
        ("ModuleNotFoundError: No module named 'ts.torch_handler.handler'", ""),
        ("RuntimeError: the vocabulary file is missing", ""),
    ],
)
def test_a_missing_package_we_know_names_its_fix(reason, fix):
    """Given a load failure's reason
    Then the fix is named where the missing package is one lambdaserve installs (and only
    then: a missing submodule of an installed package is not a missing install)."""
    from lambdaserve.serving.residency.load_check import with_fix

    fixed = with_fix(reason)
    assert fixed.startswith(reason)
    assert (fix in fixed) if fix else fixed == reason


class _WithoutTs:
    """An import system where TorchServe's ``ts`` is not installed (as in `make dev` without
    TORCHSERVE=1): importing it fails as a missing package does."""

    def find_spec(self, name, path=None, target=None):
        if name == "ts" or name.startswith("ts."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def test_a_base_handler_without_ts_installed_names_the_fix(enabled, monkeypatch):
    """Given an environment without TorchServe's ts package
    When a BaseHandler subclass (it imports ts) is published
    Then it is never READY, and the reason names the module and the fix: make dev
    TORCHSERVE=1 locally, the torchserve build variant with EnablePythonModels when
    deployed."""
    import sys

    monkeypatch.setattr(sys, "meta_path", [_WithoutTs(), *sys.meta_path])
    for name in [m for m in sys.modules if m == "ts" or m.startswith("ts.")]:
        monkeypatch.delitem(sys.modules, name)
    enabled.put(
        "models/based/1/handler.py",
        b"from ts.torch_handler.base_handler import BaseHandler\n\n\n"
        b"class Based(BaseHandler):\n    pass\n",
    )
    enabled.services.registrar.reconcile_model("based")
    record = enabled.services.catalog.get_version("based", 1)
    assert record.state == version_policy.UNAVAILABLE
    assert "No module named 'ts'" in record.reason
    assert "make dev TORCHSERVE=1" in record.reason
    assert "make build VARIANT=torchserve" in record.reason
    assert "EnablePythonModels=true" in record.reason


def test_a_lone_requests_failure_log_keeps_its_id(enabled, caplog):
    """Given the raising Python model
    When a request with an id runs alone (the Lambda path, the fast lane, --no-batching,
    a model calling another: ModelServer.infer)
    Then the failure log names its id, as on the batched path."""
    enabled.put("models/scaler/config.pbtxt", CONFIG)
    enabled.put("models/scaler/1/model.py", RAISING_EXECUTE)
    enabled.services.registrar.reconcile_model("scaler")
    server = build_model_server(enabled.settings, enabled.clients)
    request = InferRequest(
        inputs=(InferInput("X", "FP32", (1,), np.ones(1, np.float32)),), id="lone-0815"
    )
    with caplog.at_level(logging.ERROR, logger="lambdaserve"), pytest.raises(InferenceError):
        server.infer("scaler", None, request, lambda _s, outputs: outputs)
    assert "lone-0815" in _logged(caplog).getMessage()
