"""KServe v2 / Triton gRPC (`inference.GRPCInferenceService`) on `lambdaserve serve
--grpc-port`, called with Triton's own client, `tritonclient.grpc` (sync, async_infer, aio,
streaming), unchanged."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests import builders
from tests.integration.grpc_support import (
    DATATYPES,
    SLOW_CONFIG,
    SLOW_MODEL,
    SLOW_QUEUE_CONFIG,
    lambdaserve_serve,
    onnx_identities,
)

MLP = builders.onnx_mlp(4, 3)


def _mlp_input(rows: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("INPUT__0", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    return tensor


def test_every_rpc_answers_as_triton_with_tritonclient_grpc(stack):
    # Given an ONNX model with a config, published and READY
    stack.put("models/mlp/config.pbtxt", b"max_batch_size: 8")
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.wait_state("mlp", 1, "READY")
    rows = np.random.default_rng(1).random((2, 4), dtype=np.float32)
    expected = ort.InferenceSession(MLP).run(None, {"INPUT__0": rows})[0]
    with lambdaserve_serve() as served:
        client = served.client()
        # When Triton's client asks every question of its API
        assert client.is_server_live() and client.is_server_ready()
        metadata = client.get_server_metadata(as_json=True)
        assert metadata["name"] == "triton" and "model_repository" in metadata["extensions"]
        assert client.is_model_ready("mlp") and client.is_model_ready("mlp", "1")
        assert not client.is_model_ready("nope")
        model = client.get_model_metadata("mlp", as_json=True)
        assert model["versions"] == ["1"] and model["platform"] == "onnxruntime_onnx"
        assert model["inputs"] == [{"name": "INPUT__0", "datatype": "FP32", "shape": ["-1", "4"]}]
        config = client.get_model_config("mlp", as_json=True)["config"]
        assert config["max_batch_size"] == 8 and config["input"][0]["dims"] == ["4"]
        result = client.infer(
            "mlp",
            [_mlp_input(rows)],
            outputs=[grpcclient.InferRequestedOutput("OUTPUT__0")],
            request_id="r-1",
        )
        # Then the answers are Triton's, the outputs ONNX Runtime's own
        np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), expected, rtol=1e-6)
        response = result.get_response(as_json=True)
        assert response["id"] == "r-1" and response["model_version"] == "1"
        # Triton's classification extension: the top classes as "score:index"
        top = client.infer(
            "mlp", [_mlp_input(rows)], outputs=[grpcclient.InferRequestedOutput("OUTPUT__0", 2)]
        ).as_numpy("OUTPUT__0")
        assert top.shape == (2, 2)
        for row, classes in zip(expected, top, strict=True):
            assert [int(c.decode().split(":")[1]) for c in classes] == list(np.argsort(-row)[:2])
        stats = client.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
        assert stats["name"] == "mlp" and stats["inference_stats"]["success"]["count"] == "2"
        # And the extensions answer as the HTTP API does
        assert client.get_system_shared_memory_status(as_json=True) == {}
        client.unregister_system_shared_memory()
        # (system shared memory is served: a key no client created is Triton's refusal)
        with pytest.raises(InferenceServerException, match="Unable to open shared memory"):
            client.register_system_shared_memory("r", "/k", 16)
        assert client.get_trace_settings(as_json=True)["settings"]["trace_level"]["value"] == [
            "OFF"
        ]
        assert "log_info" in client.get_log_settings(as_json=True)["settings"]
        # And the load balancers' health service says SERVING
        with grpc.insecure_channel(served.grpc_url) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for service in ("", "inference.GRPCInferenceService"):
                answer = health.Check(health_pb2.HealthCheckRequest(service=service))
                assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_every_datatype_raw_and_typed_round_trips(stack):
    # Given a model that returns each input as it came, one per datatype
    stack.put("models/identities/1/model.onnx", onnx_identities())
    stack.put("models/bf16/1/model.onnx", builders.onnx_bf16(2))
    typed_only = tuple(n for n in DATATYPES if n != "FP16")  # FP16 has no typed contents
    stack.put("models/typed/1/model.onnx", onnx_identities(typed_only))
    stack.wait_state("identities", 1, "READY")
    stack.wait_state("bf16", 1, "READY")
    stack.wait_state("typed", 1, "READY")
    rng = np.random.default_rng(7)
    arrays = {}
    for name, (_, dtype) in DATATYPES.items():
        if name == "BYTES":
            arrays[name] = np.array([[b"a", b"\x00b"], [b"", "ünï".encode()]], dtype=object)
        elif name == "BOOL":
            arrays[name] = np.array([[True, False], [False, True]])
        else:
            arrays[name] = (rng.random((2, 2)) * 100).astype(dtype)
    with lambdaserve_serve() as served:
        # When tritonclient sends every datatype (raw_input_contents, its default)
        inputs = []
        for name, array in arrays.items():
            tensor = grpcclient.InferInput(f"in_{name}", [2, 2], name)
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        result = served.client().infer("identities", inputs)
        # Then every output is its input, bit for bit
        for name, array in arrays.items():
            np.testing.assert_array_equal(result.as_numpy(f"out_{name}"), array)
        # BF16 too (tritonclient's ml_dtypes.bfloat16 arrays, its form since r26.06)
        halves = rng.random((2, 2)).astype(ml_dtypes.bfloat16)
        tensor = grpcclient.InferInput("x", [2, 2], "BF16")
        tensor.set_data_from_numpy(halves)
        bf16 = served.client().infer("bf16", [tensor])
        np.testing.assert_array_equal(bf16.as_numpy("as_float"), halves.astype(np.float32))
        doubled = bf16.as_numpy("doubled").astype(np.float32)
        np.testing.assert_array_equal(doubled, halves.astype(np.float32) * 2)

        # And typed `contents` (what other KServe v2 clients send) are read as well
        request = service_pb2.ModelInferRequest(model_name="typed")
        typed = {
            "INT8": ("int_contents", [-128, 127, 0, 1]),
            "INT16": ("int_contents", [-300, 300, 0, 1]),
            "UINT8": ("uint_contents", [0, 255, 1, 2]),
            "UINT16": ("uint_contents", [0, 65535, 1, 2]),
            "UINT32": ("uint_contents", [0, 2**32 - 1, 1, 2]),
            "INT32": ("int_contents", [1, -2, 3, 4]),
            "INT64": ("int64_contents", [2**40, -1, 0, 5]),
            "UINT64": ("uint64_contents", [2**63, 1, 2, 3]),
            "FP32": ("fp32_contents", [0.5, 1.5, -2.0, 3.25]),
            "FP64": ("fp64_contents", [0.1, 0.2, 0.3, 0.4]),
            "BOOL": ("bool_contents", [True, False, True, True]),
            "BYTES": ("bytes_contents", [b"x", b"yy", b"", b"z"]),
        }
        for name, (field, values) in typed.items():
            tensor = request.inputs.add(name=f"in_{name}", datatype=name, shape=[2, 2])
            getattr(tensor.contents, field).extend(values)
            request.outputs.add(name=f"out_{name}")
        with grpc.insecure_channel(served.grpc_url) as channel:
            answer = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
        assert len(answer.raw_output_contents) == len(typed)
        for output, raw in zip(answer.outputs, answer.raw_output_contents, strict=True):
            name = output.datatype
            if name == "BYTES":
                got = grpcclient.deserialize_bytes_tensor(raw).tolist()
                assert got == typed[name][1]
            else:
                dtype = DATATYPES[name][1]
                np.testing.assert_array_equal(
                    np.frombuffer(raw, dtype), np.array(typed[name][1], dtype)
                )


def test_async_aio_and_streaming_clients_get_their_own_answers(stack):
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.wait_state("mlp", 1, "READY")
    rows = np.random.default_rng(3).random((16, 4), dtype=np.float32)
    expected = ort.InferenceSession(MLP).run(None, {"INPUT__0": rows})[0]
    with lambdaserve_serve() as served:
        client = served.client()
        # async_infer: callbacks with each request's own outputs
        done: queue.Queue[tuple[int, object]] = queue.Queue()
        for i in range(8):
            client.async_infer(
                "mlp",
                [_mlp_input(rows[i : i + 1])],
                callback=lambda result, error, i=i: done.put(
                    (i, result if error is None else error)
                ),
            )
        for _ in range(8):
            i, result = done.get(timeout=30)
            np.testing.assert_allclose(result.as_numpy("OUTPUT__0")[0], expected[i], rtol=1e-6)

        # aio: many concurrent calls on one channel
        async def many() -> list[np.ndarray]:
            async with grpcaio.InferenceServerClient(served.grpc_url) as aio:
                calls = [aio.infer("mlp", [_mlp_input(rows[i : i + 1])]) for i in range(16)]
                return [r.as_numpy("OUTPUT__0")[0] for r in await asyncio.gather(*calls)]

        np.testing.assert_allclose(np.array(asyncio.run(many())), expected, rtol=1e-6)

        # a stream: one response per request (the model is not decoupled), matched by id
        answers: queue.Queue[object] = queue.Queue()
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        for i in range(6):
            client.async_stream_infer("mlp", [_mlp_input(rows[i : i + 1])], request_id=str(i))
        client.async_stream_infer("nope", [_mlp_input(rows[:1])], request_id="bad")
        got = {}
        for _ in range(7):
            item = answers.get(timeout=30)
            if isinstance(item, InferenceServerException):
                got["bad"] = item
            else:
                got[item.get_response().id] = item.as_numpy("OUTPUT__0")[0]
        client.stop_stream()
        assert "unknown model" in str(got.pop("bad")).lower() or "not found" in str(
            got.get("bad", "not found")
        )
        for i in range(6):
            np.testing.assert_allclose(got[str(i)], expected[i], rtol=1e-6)


def test_http_and_grpc_requests_meet_in_one_batch(stack):
    # Given a model whose batcher waits for company
    stack.put(
        "models/mlp/config.pbtxt",
        b"max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 300000 }",
    )
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.wait_state("mlp", 1, "READY")
    rows = np.random.default_rng(9).random((2, 4), dtype=np.float32)
    with lambdaserve_serve() as served:
        client = served.client()
        assert client.is_model_ready("mlp")  # loaded before the timed pair
        body = {
            "inputs": [
                {"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": rows[0].tolist()}
            ]
        }
        # When one request comes over HTTP and one over gRPC at the same time
        with (
            httpx.Client(base_url=f"http://127.0.0.1:{served.http}", timeout=30) as http,
            ThreadPoolExecutor(2) as pool,
        ):
            over_http = pool.submit(http.post, "/v2/models/mlp/infer", json=body)
            over_grpc = pool.submit(client.infer, "mlp", [_mlp_input(rows[1:2])])
            assert over_http.result().status_code == 200
            over_grpc.result()
        # Then the statistics show two inferences in one execution
        stats = client.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
        assert stats["inference_count"] == "2"
        assert stats["execution_count"] == "1"
        assert stats["batch_stats"][0]["batch_size"] == "2"


def test_errors_have_their_grpc_codes_and_the_server_keeps_serving(stack):
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.put("models/slow/config.pbtxt", SLOW_CONFIG)
    stack.put("models/slow/1/model.py", SLOW_MODEL)
    stack.put("models/slowq/config.pbtxt", SLOW_QUEUE_CONFIG)
    stack.put("models/slowq/1/model.py", SLOW_MODEL)
    stack.wait_state("mlp", 1, "READY")
    stack.wait_state("slow", 1, "READY")
    stack.wait_state("slowq", 1, "READY")
    good = np.ones((1, 4), np.float32)
    with lambdaserve_serve() as served, grpc.insecure_channel(served.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

        def code_of(request: service_pb2.ModelInferRequest, **kwargs: object) -> grpc.StatusCode:
            with pytest.raises(grpc.RpcError) as failed:
                stub.ModelInfer(request, **kwargs)
            return failed.value.code(), failed.value.details()

        def request(model: str = "mlp", shape=(1, 4), datatype="FP32", raw=None):
            message = service_pb2.ModelInferRequest(model_name=model)
            message.inputs.add(name="INPUT__0", datatype=datatype, shape=list(shape))
            message.raw_input_contents.append(good.tobytes() if raw is None else raw)
            return message

        # unknown model and version: NOT_FOUND
        assert code_of(request("nope"))[0] == grpc.StatusCode.NOT_FOUND
        versioned = request()
        versioned.model_version = "7"
        assert code_of(versioned)[0] == grpc.StatusCode.NOT_FOUND
        # tensors that do not fit: INVALID_ARGUMENT, saying what is wrong
        code, details = code_of(request(shape=(1, 3), raw=good.tobytes()[:12]))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "INPUT__0" in details
        code, details = code_of(request(raw=b"\0" * 15))  # wrong byte size for FP32 [1, 4]
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "16 bytes" in details
        huge = request(shape=(2**31, 2**31, 2**31), raw=b"\0" * 16)
        assert code_of(huge)[0] == grpc.StatusCode.INVALID_ARGUMENT
        assert code_of(request(datatype="FP31"))[0] == grpc.StatusCode.INVALID_ARGUMENT
        deep = service_pb2.ModelInferRequest(model_name="mlp")
        deep.inputs.add(name="INPUT__0", datatype="BYTES", shape=[1, 4])
        deep.raw_input_contents.append(b"\xff\xff\xff\x7f" + b"x" * 8)  # a length past the end
        assert code_of(deep)[0] == grpc.StatusCode.INVALID_ARGUMENT
        # a message over the request limit: RESOURCE_EXHAUSTED, before it is read
        big = request(shape=(1, 4), raw=b"\0" * (7 * 1024**2))
        assert code_of(big)[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
        # the client's deadline is honoured
        slow = service_pb2.ModelInferRequest(model_name="slow")
        slow.inputs.add(name="INPUT0", datatype="FP32", shape=[1])
        slow.raw_input_contents.append(np.array([3.0], np.float32).tobytes())
        started = time.monotonic()
        assert code_of(slow, timeout=0.5)[0] == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - started < 2.5
        # a full queue (the model's queue policy): UNAVAILABLE, in Triton's words
        queued = service_pb2.ModelInferRequest(model_name="slowq")
        queued.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1])
        queued.raw_input_contents.append(np.array([[2.0]], np.float32).tobytes())
        assert served.client().is_model_ready("slowq")
        running = stub.ModelInfer.future(queued)  # runs for two seconds
        time.sleep(1.0)  # ample time to be taken off the queue and run
        waiting = stub.ModelInfer.future(queued)  # takes the one place in the queue
        time.sleep(0.3)
        third = stub.ModelInfer.future(queued)
        failures = [third.exception(30), running.exception(30), waiting.exception(30)]
        refused = [f for f in failures if f is not None]
        assert len(refused) == 1 and failures[0] is not None, failures
        assert refused[0].code() == grpc.StatusCode.UNAVAILABLE
        assert "Exceeds maximum queue size" in refused[0].details()
        # And after all that the server answers as before
        answer = stub.ModelInfer(request())
        assert answer.model_name == "mlp" and len(answer.raw_output_contents) == 1
        assert served.client().is_server_live()


def test_shutdown_drains_in_flight_calls(stack):
    stack.put("models/slow/config.pbtxt", SLOW_CONFIG)
    stack.put("models/slow/1/model.py", SLOW_MODEL)
    stack.wait_state("slow", 1, "READY")
    tensor = grpcclient.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.array([1.0], np.float32))
    with lambdaserve_serve() as served:
        client = served.client()
        assert client.is_model_ready("slow")
        # Given a call in flight (the model takes a second)
        results: list[object] = []
        call = threading.Thread(target=lambda: results.append(client.infer("slow", [tensor])))
        call.start()
        time.sleep(0.3)
        # When the server is told to stop (SIGTERM, as ECS does); the context exits 0
        import os
        import signal

        os.killpg(served.process.pid, signal.SIGTERM)
        call.join(30)
    # Then the call in flight got its answer
    assert results and results[0].as_numpy("OUTPUT0").tolist() == [1.0]


def test_repository_rpcs_need_the_management_flag_in_serve(stack):
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.wait_state("mlp", 1, "READY")
    with (
        lambdaserve_serve() as served,
        pytest.raises(InferenceServerException, match="--grpc-management"),
    ):
        served.client().get_model_repository_index()
    with lambdaserve_serve("--grpc-management") as served:
        client = served.client()
        index = client.get_model_repository_index(as_json=True)["models"]
        assert {"name": "mlp", "version": "1", "state": "READY"} in [
            {k: m.get(k) for k in ("name", "version", "state")} for m in index
        ]
        client.unload_model("mlp")
        assert not client.is_model_ready("mlp")
        client.load_model("mlp")
        assert client.is_model_ready("mlp")
