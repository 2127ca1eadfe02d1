"""Triton's shared-memory, logging and trace extensions as stock clients call them: a server
without shared memory (or, in the infer function, tracing) answers, rather than 404s that stop
the client."""

from __future__ import annotations

import logging

import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException


@pytest.fixture
def client(stack):
    url = str(stack.inference.base_url).removeprefix("http://").rstrip("/")
    with triton.InferenceServerClient(url) as tc:
        yield tc


def test_shared_memory_status_and_unregister_answer_register_says_why(client):
    assert client.get_system_shared_memory_status() == []
    assert client.get_cuda_shared_memory_status() == []
    client.unregister_system_shared_memory()
    client.unregister_cuda_shared_memory("region0")
    with pytest.raises(InferenceServerException, match="not supported"):
        client.register_system_shared_memory("region0", "/shm0", 64)


def test_log_settings_map_onto_the_log_level(client):
    logger = logging.getLogger("lambdaserve")
    before = logger.level
    try:
        settings = client.update_log_settings({"log_verbose_level": 1})
        assert settings["log_verbose_level"] == 1 and logger.level == logging.DEBUG
        settings = client.update_log_settings({"log_verbose_level": 0, "log_info": False})
        assert settings["log_info"] is False and logger.level == logging.WARNING
        assert client.get_log_settings()["log_warning"] is True
    finally:
        logger.setLevel(before)


def test_trace_settings_answer_off_in_the_infer_function_and_say_where_tracing_runs(client):
    # the stack's inference app is the infer function's (no tracer): serve and dev trace
    assert client.get_trace_settings()["trace_level"] == ["OFF"]
    with pytest.raises(InferenceServerException, match="tracing runs in `lambdaserve serve`"):
        client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})


def test_the_server_lists_the_extensions_it_serves(client):
    # When a client reads GET /v2 from the infer function's plane (no shared memory, no tracing)
    extensions = set(client.get_server_metadata()["extensions"])
    # Then every extension it serves is listed, in Triton's names, and none it does not
    assert extensions == {
        "classification",
        "sequence",
        "model_repository",
        "model_configuration",
        "binary_tensor_data",
        "parameters",
        "statistics",
        "logging",
    }
