"""Triton's model-control clients against dev: the client repo's
src/python/examples/simple_http_model_control.py (run by qa/L0_http with
--model-control-mode=explicit, lambdaserve's default) and qa/L0_http's python_http_aio_test.py
(run without it: load and unload refused), their exact tritonclient calls in their order,
over the inference URL (where Triton's clients point)."""

from __future__ import annotations

import asyncio

import pytest
import tritonclient.http
import tritonclient.http.aio
from tritonclient.utils import InferenceServerException

from tests import builders


@pytest.fixture
def simple(stack):
    """add_sub published as "simple" with max_batch_size 8, as Triton's example repository's."""
    stack.put("models/simple/config.pbtxt", b"max_batch_size: 8\n")
    stack.put("models/simple/1/model.onnx", builders.onnx_add_sub())
    stack.wait_state("simple", 1, "READY")
    return stack


def _url(stack) -> str:
    return str(stack.inference.base_url).removeprefix("http://").rstrip("/")


def test_simple_http_model_control_passes(simple):
    """Given "simple" published and READY
    When simple_http_model_control.py's calls run in its order (load, a load with a config
    that is not JSON, a load overriding max_batch_size, unload, a load of an unknown model)
    Then each answers as the example expects: ready after load, "failed to load" for the
    bad config and the unknown model, max_batch_size 16 after the override, not ready after
    unload."""
    with tritonclient.http.InferenceServerClient(_url(simple)) as client:
        client.load_model("simple")
        assert client.is_model_ready("simple")

        with pytest.raises(InferenceServerException) as bad_config:
            client.load_model(
                "simple", config='"parameters": {"config": {{"max_batch_size": "16"}}}'
            )
        assert "failed to load" in bad_config.value.message()

        client.load_model("simple", config='{"max_batch_size":"16"}')
        assert client.get_model_config("simple")["max_batch_size"] == 16

        client.unload_model("simple")
        assert not client.is_model_ready("simple")

        with pytest.raises(InferenceServerException) as unknown:
            client.load_model("wrong_model_name")
        assert "failed to load" in unknown.value.message()


@pytest.fixture
def polling(monkeypatch):
    """The server started as python_http_aio_test.py's Triton is: no explicit model control."""
    monkeypatch.setenv("LAMBDASERVE_MODEL_CONTROL_MODE", "none")


def test_python_http_aio_test_load_and_unload_are_refused_without_explicit_control(polling, simple):
    """Given "simple" READY on a server with LAMBDASERVE_MODEL_CONTROL_MODE=none
    When python_http_aio_test.py's test_load_model and test_unload_model run (both call
    load_model("simple"), as upstream's do), and an unload_model too
    Then each raises with Triton's words, and "simple" still serves."""

    async def calls() -> list[InferenceServerException]:
        client = tritonclient.http.aio.InferenceServerClient(url=_url(simple))
        refused = []
        try:
            for call in (client.load_model, client.load_model, client.unload_model):
                with pytest.raises(InferenceServerException) as error:
                    await call("simple")
                refused.append(error.value)
            assert await client.is_model_ready("simple")
        finally:
            await client.close()
        return refused

    for error in asyncio.run(calls()):
        assert "explicit model load / unload is not allowed if polling is enabled" in str(error)
        assert error.status() == "503"  # Triton's (UNAVAILABLE)
