"""Triton's system shared memory against `lambdaserve serve`, as tritonclient's shm
examples use it: Triton's simple (INT32) and simple_string (BYTES) models, over HTTP and
gRPC, inputs read from and outputs written into registered POSIX regions, the status listing
them, unregistering all; and what a region refuses, in Triton's words."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient import utils
from tritonclient.utils import InferenceServerException

from tests import builders
from tests.integration.grpc_support import lambdaserve_serve


def publish_simple_models(stack) -> None:
    for name, datatype in (("simple", "INT32"), ("simple_string", "BYTES")):
        model, config = builders.onnx_simple(datatype)
        stack.put(f"models/{name}/config.pbtxt", config)
        stack.put(f"models/{name}/1/model.onnx", model)
        stack.wait_state(name, 1, "READY", timeout_s=60)


def as_sent(values: np.ndarray, datatype: str) -> np.ndarray:
    """INT32 as is; BYTES as the decimal strings simple_string adds and subtracts."""
    if datatype == "INT32":
        return values.astype(np.int32)
    return np.array([str(v).encode() for v in values.flatten()], dtype=object).reshape(values.shape)


def serialized(values: np.ndarray, datatype: str) -> tuple[list[np.ndarray], int]:
    """What a region holds and its size: raw INT32, or BYTES length-prefixed as tritonclient
    serializes them."""
    if datatype == "INT32":
        return [values], values.nbytes
    wire = utils.serialize_byte_tensor(values)
    return [wire], utils.serialized_byte_size(wire)


def shm_add_sub(client, module, model: str, datatype: str, tag: str) -> dict:
    """One inference with both inputs in regions and both outputs written into regions, as
    the examples make it; returns the outputs read back from the regions and the status."""
    in0, in1 = np.arange(16).reshape(1, 16), np.ones((1, 16), np.int64)
    sent = [as_sent(in0, datatype), as_sent(in1, datatype)]
    expected = [as_sent(in0 + in1, datatype), as_sent(in0 - in1, datatype)]
    sizes = [serialized(v, datatype)[1] for v in sent + expected]
    names = [f"{tag}_{n}" for n in ("input0", "input1", "output0", "output1")]
    keys = [f"/lambdaserve_{tag}_{os.getpid()}_{n}" for n in range(4)]
    regions = [
        shm.create_shared_memory_region(name, key, size)
        for name, key, size in zip(names, keys, sizes, strict=True)
    ]
    try:
        client.unregister_system_shared_memory()
        for region, values in zip(regions[:2], sent, strict=True):
            shm.set_shared_memory_region(region, serialized(values, datatype)[0])
        for name, key, size in zip(names, keys, sizes, strict=True):
            client.register_system_shared_memory(name, key, size)
        inputs = [module.InferInput(f"INPUT{i}", [1, 16], datatype) for i in range(2)]
        outputs = [module.InferRequestedOutput(f"OUTPUT{i}") for i in range(2)]
        for i in range(2):
            inputs[i].set_shared_memory(names[i], sizes[i])
            outputs[i].set_shared_memory(names[2 + i], sizes[2 + i])
        answer = client.infer(model, inputs, outputs=outputs)
        read = []
        for i in range(2):
            told = answer.get_output(f"OUTPUT{i}")
            assert told is not None
            shape = told["shape"] if isinstance(told, dict) else list(told.shape)
            dtype = told["datatype"] if isinstance(told, dict) else told.datatype
            contents = shm.get_contents_as_numpy(
                regions[2 + i], utils.triton_to_np_dtype(dtype), shape
            )
            read.append(contents.copy())  # a view of the region: copied before it is unmapped
        status = client.get_system_shared_memory_status()
        client.unregister_system_shared_memory()
        after = client.get_system_shared_memory_status()
    finally:
        for region in regions:
            shm.destroy_shared_memory_region(region)
    return {"read": read, "expected": expected, "status": status, "after": after, "keys": keys}


def registered_keys(status) -> set[str]:
    if isinstance(status, list):
        return {region["key"] for region in status}
    return {region.key for region in status.regions.values()}


def test_inputs_and_outputs_travel_in_shared_memory_over_http_and_grpc(stack):
    # Given Triton's simple and simple_string models behind `lambdaserve serve`
    publish_simple_models(stack)
    with lambdaserve_serve() as served:
        http = httpclient.InferenceServerClient(f"127.0.0.1:{served.http}")
        grpc = grpcclient.InferenceServerClient(served.grpc_url)
        # (the server lists the extension, over both protocols)
        assert "system_shared_memory" in http.get_server_metadata()["extensions"]
        assert "system_shared_memory" in grpc.get_server_metadata().extensions
        # When tritonclient puts both inputs in regions and asks for both outputs in
        # regions, over each protocol, for each model
        runs = {
            (door, model): shm_add_sub(client, module, model, datatype, f"{door}_{datatype}")
            for door, client, module in (("http", http, httpclient), ("grpc", grpc, grpcclient))
            for model, datatype in (("simple", "INT32"), ("simple_string", "BYTES"))
        }
    # Then the outputs read from the regions are the sums and differences, the status
    # listed the four regions, and unregistering all left none
    for run, done in runs.items():
        for read, expected in zip(done["read"], done["expected"], strict=True):
            np.testing.assert_array_equal(read, expected, err_msg=str(run))
        assert registered_keys(done["status"]) == set(done["keys"]), run
        assert not registered_keys(done["after"]), run


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
