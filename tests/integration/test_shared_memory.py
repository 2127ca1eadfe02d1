"""Triton's system shared memory against `lambdaserve serve`: tritonclient's own shm
examples (tests/fixtures/tritonclient_examples, from triton-inference-server/client
src/python/examples, unchanged) over HTTP and gRPC, on Triton's simple and simple_string
models; and what a region refuses, in Triton's words."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from tests import builders
from tests.integration.grpc_support import lambdaserve_serve

EXAMPLES = Path(__file__).parents[1] / "fixtures" / "tritonclient_examples"


def publish_simple_models(stack) -> None:
    for name, datatype in (("simple", "INT32"), ("simple_string", "BYTES")):
        model, config = builders.onnx_simple(datatype)
        stack.put(f"models/{name}/config.pbtxt", config)
        stack.put(f"models/{name}/1/model.onnx", model)
        stack.wait_state(name, 1, "READY", timeout_s=60)


def run_example(script: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), "-u", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_tritonclients_shm_examples_pass_unchanged_over_http_and_grpc(stack):
    # Given Triton's simple and simple_string models behind `lambdaserve serve`
    publish_simple_models(stack)
    with lambdaserve_serve() as served:
        http = f"127.0.0.1:{served.http}"
        grpc = f"127.0.0.1:{served.grpc}"
        # When tritonclient's shared-memory examples run against it, unchanged
        runs = {
            script: run_example(script, url)
            for script, url in (
                ("simple_http_shm_client.py", http),
                ("simple_grpc_shm_client.py", grpc),
                ("simple_http_shm_string_client.py", http),
                ("simple_grpc_shm_string_client.py", grpc),
            )
        }
    # Then each passes: its inputs read from, and its outputs written to, shared memory
    for script, done in runs.items():
        assert done.returncode == 0, f"{script}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        assert "PASS: system shared memory" in done.stdout, f"{script}:\n{done.stdout[-2000:]}"


def test_a_region_is_refused_in_tritons_words_and_inputs_read_where_they_say(stack):
    publish_simple_models(stack)
    region = shm.create_shared_memory_region("in", "/lambdaserve_test_in", 128)
    small = shm.create_shared_memory_region("small", "/lambdaserve_test_small", 16)
    try:
        with lambdaserve_serve() as served:
            client = httpclient.InferenceServerClient(f"127.0.0.1:{served.http}")
            # Given a registered region holding two inputs
            shm.set_shared_memory_region(region, [np.arange(16, dtype=np.int32)])
            shm.set_shared_memory_region(region, [np.full(16, 2, np.int32)], offset=64)
            client.register_system_shared_memory("in", "/lambdaserve_test_in", 128)
            # When it is registered again, a key that does not exist, or past a key's end
            refusals = []
            for args in (
                ("in", "/lambdaserve_test_in", 128),
                ("other", "/lambdaserve_no_such_key", 16),
                ("big", "/lambdaserve_test_small", 4096),
            ):
                with pytest.raises(InferenceServerException) as refused:
                    client.register_system_shared_memory(*args)
                refusals.append(str(refused.value))
            status = client.get_system_shared_memory_status()
            # and an inference reads its inputs from the region, answering in the body
            inputs = [
                httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                httpclient.InferInput("INPUT1", [1, 16], "INT32"),
            ]
            inputs[0].set_shared_memory("in", 64)
            inputs[1].set_shared_memory("in", 64, offset=64)
            answer = client.infer("simple", inputs)
            client.unregister_system_shared_memory()
            after = client.get_system_shared_memory_status()
    finally:
        shm.destroy_shared_memory_region(region)
        shm.destroy_shared_memory_region(small)
    # Then Triton's words, the region's status, and the model's answer from shared inputs
    assert "shared memory region 'in' already in manager" in refusals[0]
    assert "Unable to open shared memory region: '/lambdaserve_no_such_key'" in refusals[1]
    assert "failed to register shared memory region 'big': invalid args" in refusals[2]
    assert status == [{"name": "in", "key": "/lambdaserve_test_in", "offset": 0, "byte_size": 128}]
    np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), [np.arange(16) + 2])
    assert after == []
