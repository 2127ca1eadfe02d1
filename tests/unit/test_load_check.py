"""Which environment loads a version with model code before it is READY: the one that
serves it. KIND_GPU versions under server mode serve on the task, not in the infer
function, so the infer function's CPU does not judge them."""

from __future__ import annotations

import pytest

from lambdaserve.catalog import version_policy
from lambdaserve.settings import get_settings

GPU_CONFIG = b"""
backend: "python"
max_batch_size: 0
input [{ name: "X", data_type: TYPE_FP32, dims: [1] }]
output [{ name: "Y", data_type: TYPE_FP32, dims: [1] }]
instance_group [{ kind: KIND_GPU }]
"""
NEEDS_CUDA = b"""
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("no CUDA device")

    def execute(self, requests):
        return []
"""


@pytest.mark.parametrize(("server_mode", "state"), [(False, "UNAVAILABLE"), (True, "READY")])
def test_a_gpu_version_is_loaded_where_it_serves(
    model_code_enabled, monkeypatch, caplog, server_mode, state
):
    """Given a KIND_GPU Python model whose initialize needs CUDA
    When it is published where the infer function serves it (no server mode)
    Then its load there fails and it is never READY
    When server mode is on (a GPU task serves KIND_GPU versions)
    Then the infer function does not load it on its CPU: it is READY, and the log says
    where it was not checked and why."""
    if server_mode:
        monkeypatch.setenv("LAMBDASERVE_SERVER_URL", "http://127.0.0.1:9")
    get_settings.cache_clear()
    try:
        aws = model_code_enabled
        aws.put("models/gpu/config.pbtxt", GPU_CONFIG)
        aws.put("models/gpu/1/model.py", NEEDS_CUDA)
        with caplog.at_level("INFO", logger="lambdaserve"):
            aws.services.registrar.reconcile_model("gpu")
    finally:
        get_settings.cache_clear()
    record = aws.services.catalog.get_version("gpu", 1)
    assert record.state == state, record.reason
    if server_mode:
        assert "KIND_GPU: not loaded in" in caplog.text
    else:
        assert "no CUDA device" in record.reason
    assert (record.state == version_policy.READY) == server_mode
