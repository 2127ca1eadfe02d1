"""Triton's response cache on real parts: `lambdaserve serve` (HTTP and gRPC, the dynamic
batcher), the infer function's direct path in fresh interpreters (cold Lambda instances),
and a real redis-server shared by them, killed mid-load."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import grpc
import httpx
import numpy as np
import onnxruntime as ort
import redis
import tritonclient.grpc as grpcclient
import tritonclient.http as triton
from tritonclient.grpc import service_pb2, service_pb2_grpc

from lambdaserve.apps.v2_calls import v2_infer
from lambdaserve.local.http_api_event import http_api_event
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.wiring.inference import build_model_server
from tests import builders
from tests.integration.grpc_support import lambdaserve_serve
from tests.redis_server import RedisServer, redis_server
from tests.support import scrape, wait_until

MLP = builders.onnx_mlp(4, 3)
CACHED = b"max_batch_size: 8\nresponse_cache { enable: true }"
RNG = np.random.default_rng(11)


def _publish(stack) -> None:
    stack.put("models/mlp/config.pbtxt", CACHED)
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.wait_state("mlp", 1, "READY")


def _json_body(rows: np.ndarray) -> dict:
    return {
        "inputs": [
            {
                "name": "INPUT__0",
                "datatype": "FP32",
                "shape": list(rows.shape),
                "data": rows.ravel().tolist(),
            }
        ]
    }


def _binary_call(client: httpx.Client, rows: np.ndarray) -> httpx.Response:
    tensor = triton.InferInput("INPUT__0", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows, binary_data=True)
    asked = [triton.InferRequestedOutput("OUTPUT__0", binary_data=True)]
    body, json_size = triton.InferenceServerClient.generate_request_body([tensor], outputs=asked)
    headers = {"Inference-Header-Content-Length": str(json_size)}
    return client.post("/v2/models/mlp/infer", content=body, headers=headers)


def _grpc_call(stub: service_pb2_grpc.GRPCInferenceServiceStub, rows: np.ndarray) -> bytes:
    request = service_pb2.ModelInferRequest(model_name="mlp", id="same")
    tensor = request.inputs.add(name="INPUT__0", datatype="FP32", shape=list(rows.shape))
    del tensor
    request.raw_input_contents.append(rows.tobytes())
    return bytes(stub.ModelInfer(request, timeout=60).SerializeToString())


def test_hit_and_miss_answer_the_same_bytes_over_http_json_binary_and_grpc(stack):
    """Given `serve` with a local response cache and a model that opts in
    When each door sends its request twice (the first computed, the second a hit)
    Then both answers are the same bytes, the model's own, and stats, gRPC statistics,
    /metrics and the access log count the hits."""
    _publish(stack)
    rows = [RNG.random((2, 4), dtype=np.float32) for _ in range(3)]
    expected = [ort.InferenceSession(MLP).run(None, {"INPUT__0": r})[0] for r in rows]
    with lambdaserve_serve("--cache-config", "local,size=1048576", "--access-log") as served:
        with (
            httpx.Client(base_url=f"http://127.0.0.1:{served.http}", timeout=60) as client,
            grpc.insecure_channel(served.grpc_url) as channel,
        ):
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            json_answers = [
                client.post("/v2/models/mlp/infer", json=_json_body(rows[0])) for _ in range(2)
            ]
            binary_answers = [_binary_call(client, rows[1]) for _ in range(2)]
            grpc_answers = [_grpc_call(stub, rows[2]) for _ in range(2)]
            stats = client.get("/v2/models/mlp/stats").json()["model_stats"][0]
            grpc_stats = grpcclient.InferenceServerClient(served.grpc_url).get_inference_statistics(
                "mlp", as_json=True
            )
            metrics = scrape(client)
        log = served.output()
    for answers in (json_answers, binary_answers):
        assert [a.status_code for a in answers] == [200, 200], answers[0].text
        assert answers[0].content == answers[1].content
        assert answers[0].headers.get("inference-header-content-length") == answers[1].headers.get(
            "inference-header-content-length"
        )
    assert grpc_answers[0] == grpc_answers[1]
    np.testing.assert_allclose(
        json_answers[0].json()["outputs"][0]["data"], expected[0].ravel(), rtol=1e-6
    )
    decoded = service_pb2.ModelInferResponse.FromString(grpc_answers[0])
    np.testing.assert_array_equal(
        np.frombuffer(decoded.raw_output_contents[0], np.float32).reshape(2, 3), expected[2]
    )
    inference = stats["inference_stats"]
    assert (inference["cache_hit"]["count"], inference["cache_miss"]["count"]) == (3, 3)
    assert inference["success"]["count"] == 6 and stats["inference_count"] == 6  # 3 runs of 2
    grpc_inference = grpc_stats["model_stats"][0]["inference_stats"]
    assert int(grpc_inference["cache_hit"]["count"]) == 3
    assert int(grpc_inference["cache_miss"]["count"]) == 3
    assert metrics[("nv_cache_num_hits_per_model", "mlp", "1")] == 3
    assert metrics[("nv_cache_num_misses_per_model", "mlp", "1")] == 3
    infer_lines = [line for line in log.splitlines() if "POST /v2/models/mlp/infer" in line]
    assert [line.rsplit(" ", 1)[-1] for line in infer_lines] == [
        "cache=miss",
        "cache=hit",
        "cache=miss",
        "cache=hit",
    ]


FIRST_REQUEST = """
import json, sys
from pathlib import Path
from lambdaserve.handlers import infer
from lambdaserve.wiring.process import current
response = infer.api_handler(json.loads(Path(sys.argv[1]).read_text()), None)
print(json.dumps({
    "status": response["statusCode"],
    "body": response["body"],
    "loaded": current().server().residency.loaded_versions(),
    "onnxruntime": "onnxruntime" in sys.modules,
}))
"""


def _cold_instance(event: Path, work_dir: Path, redis_port: int) -> dict:
    env = {
        **os.environ,
        "LAMBDASERVE_WORK_DIR": str(work_dir),
        "LAMBDASERVE_REDIS_HOST": "127.0.0.1",
        "LAMBDASERVE_REDIS_PORT": str(redis_port),
        # well past what a loaded machine's healthy Redis takes: a hit must not time out
        "LAMBDASERVE_REDIS_TIMEOUT_MS": "2000",
    }
    done = subprocess.run(
        [sys.executable, "-c", FIRST_REQUEST, str(event)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    # (the other lines are EMF's: a load's cold start)
    [answer] = [json.loads(x) for x in done.stdout.splitlines() if x.startswith('{"status"')]
    return dict(answer)


def test_a_cold_instance_answers_what_the_fleet_answered_without_downloading_the_model(
    stack, tmp_path
):
    """Given a model with the response cache, and a Redis every instance shares
    When a fresh instance answers a request, and another fresh instance gets it too
    Then the second answers the same body from Redis: no model file, no runtime loaded."""
    _publish(stack)
    rows = RNG.random((1, 4), dtype=np.float32)
    event = tmp_path / "event.json"
    event.write_text(
        json.dumps(
            http_api_event("POST", "/v2/models/mlp/infer", json.dumps(_json_body(rows)).encode())
        )
    )
    with redis_server() as shared:
        first = _cold_instance(event, tmp_path / "first", shared.port)
        second = _cold_instance(event, tmp_path / "second", shared.port)
        stored = shared.client().dbsize()
    assert first["status"] == 200 and first["loaded"] == [["mlp", 1]]
    assert second["status"] == 200 and second["body"] == first["body"]
    assert second["loaded"] == [] and second["onnxruntime"] is False
    assert not list((tmp_path / "second").rglob("blobs/*"))  # nothing downloaded
    assert stored == 1


def test_a_redis_outage_mid_load_fails_no_request(stack):
    """Given `serve` whose only response cache is a shared Redis, under concurrent load
    When the Redis server is killed part way through
    Then every request is answered correctly (misses computed), and the outage is logged once."""
    _publish(stack)
    rows = [RNG.random((1, 4), dtype=np.float32) for _ in range(8)]
    expected = [ort.InferenceSession(MLP).run(None, {"INPUT__0": r})[0] for r in rows]
    with redis_server() as shared:
        flags = (
            "--cache-config",
            # a bound a loaded machine's healthy Redis answers within; the kill is the outage
            f"redis,host=127.0.0.1,port={shared.port},wait_timeout_ms=2000",
            "--cache-config",
            "local,size=0",
        )
        with (
            lambdaserve_serve(*flags) as served,
            httpx.Client(base_url=f"http://127.0.0.1:{served.http}", timeout=60) as client,
        ):

            def call(index: int) -> tuple[int, int, list[float]]:
                if index == 80:
                    shared.kill()
                which = index % len(rows)
                answer = client.post("/v2/models/mlp/infer", json=_json_body(rows[which]))
                assert answer.status_code == 200, answer.text
                return index, which, answer.json()["outputs"][0]["data"]

            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(call, range(200)))
            stats = client.get("/v2/models/mlp/stats").json()["model_stats"][0]["inference_stats"]
            log = served.output()
    for _, which, data in answers:
        np.testing.assert_allclose(data, expected[which].ravel(), rtol=1e-6)
    assert stats["cache_hit"]["count"] > 0  # Redis answered before it died
    assert stats["cache_hit"]["count"] + stats["cache_miss"]["count"] == 200
    assert log.count("the shared response cache (redis") == 1, log


def test_torchserve_tf_serving_and_paddle_doors_answer_the_same_bytes_hit_or_miss(stack):
    """Given `serve` (its default local response cache) and a model that opts in
    When TorchServe's, TF Serving's and Paddle's doors each send their request twice
    Then each door's two answers are the same bytes, and the second of each was a hit."""
    from lambdaserve.processes.background import BackgroundServer
    from lambdaserve.processes.serve import build_serving_app
    from tests.support import free_port

    _publish(stack)
    rows = RNG.random((3, 4), dtype=np.float32)
    calls = [
        ("/predictions/mlp", [rows[0].tolist()]),
        ("/v1/models/mlp:predict", {"instances": [rows[1].tolist()]}),
        ("/mlp/prediction", {"key": ["INPUT__0"], "value": [str([rows[2].tolist()])]}),
    ]
    server = BackgroundServer(build_serving_app(batching=True), "127.0.0.1", free_port()).start()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            answers = [[client.post(path, json=body) for _ in range(2)] for path, body in calls]
            stats = client.get("/v2/models/mlp/stats").json()["model_stats"][0]
    finally:
        server.stop()
    for first, second in answers:
        assert (first.status_code, second.status_code) == (200, 200), first.text
        assert first.content == second.content
    inference = stats["inference_stats"]
    assert (inference["cache_hit"]["count"], inference["cache_miss"]["count"]) == (3, 3)
    assert stats["execution_count"] == 3
    expected = ort.InferenceSession(MLP).run(None, {"INPUT__0": rows})[0]
    np.testing.assert_allclose(answers[1][1].json()["predictions"][0], expected[1], rtol=1e-5)


def test_an_async_request_the_cache_holds_is_answered_before_it_queues(stack):
    """Given a model with the response cache, and a request it has answered once
    When the same request is submitted with Prefer: respond-async while nothing consumes
    the requests queue
    Then its result is there at once, the same bytes as the synchronous answer, counted as
    a hit; nothing was queued."""
    _publish(stack)
    body = _json_body(RNG.random((1, 4), dtype=np.float32))
    first = stack.inference.post("/v2/models/mlp/infer", json=body)
    assert first.status_code == 200, first.text
    stack.pause_requests()
    submitted = stack.inference.post(
        "/v2/models/mlp/infer", json=body, headers={"Prefer": "respond-async"}
    )
    assert submitted.status_code == 202, submitted.text
    result = stack.inference.get(submitted.json()["status_url"])
    assert result.status_code == 200, result.text
    assert result.content == first.content
    queued = stack.clients.sqs.get_queue_attributes(
        QueueUrl=stack.resources.requests.url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    assert queued == {
        "ApproximateNumberOfMessages": "0",
        "ApproximateNumberOfMessagesNotVisible": "0",
    }
    stats = stack.process.server().stats.snapshot("mlp")["model_stats"][0]["inference_stats"]
    assert (stats["cache_hit"]["count"], stats["cache_miss"]["count"]) == (1, 1)


def test_queued_requests_answered_from_the_cache_skip_the_model(stack):
    """Given a model with the response cache
    When the batch entry point (the batcher's call) gets the same request in two deliveries
    Then the second is answered from the cache, the same response, the model not run again."""
    from lambdaserve.handlers import infer

    _publish(stack)
    rows = RNG.random((1, 4), dtype=np.float32)
    event = {"requests": [{"model_name": "mlp", "id": "q1", **_json_body(rows)}]}
    first = infer.batch_handler(event, None)["results"]
    second = infer.batch_handler(event, None)["results"]
    assert first == second and first[0]["status"] == 200, first
    stats = stack.process.server().stats.snapshot("mlp")["model_stats"][0]
    assert stats["execution_count"] == 1
    assert stats["inference_stats"]["cache_hit"]["count"] == 1


def _answers_within(server: RedisServer, seconds: float) -> bool:
    try:
        return bool(redis.Redis(port=server.port, socket_timeout=seconds).ping())
    except redis.RedisError:
        return False


def _sleep(server: RedisServer, seconds: int) -> None:
    """The server stops answering anyone for ``seconds`` (its connections stay open)."""
    with contextlib.suppress(redis.RedisError):  # killed while it slept: the point
        redis.Redis(port=server.port).execute_command("DEBUG", "SLEEP", str(seconds))


def test_a_slow_shared_cache_is_a_miss_not_a_wait(stack, caplog):
    """Given an instance whose response cache is a Redis that has stopped answering
    (DEBUG SLEEP: connected, silent)
    When a request it holds the answer for arrives
    Then the model answers it (a miss after the bounded timeout) while Redis still sleeps,
    and the outage is logged once."""
    _publish(stack)
    rows = RNG.random((1, 4), dtype=np.float32)
    body = json.dumps(_json_body(rows)).encode()
    with redis_server() as shared:
        # a bound a loaded machine's healthy Redis answers well within (100 ms, the default,
        # is a deployment's choice): the test is about the silent one, not a slow machine
        settings = replace(
            stack.settings,
            response_cache_bytes=0,
            redis_host="127.0.0.1",
            redis_port=shared.port,
            redis_timeout_ms=2000,
        )
        server = build_model_server(settings)
        plane = InferenceDataPlane(lambda: server)
        computed = v2_infer(plane, "mlp", None, body, None).body
        assert v2_infer(plane, "mlp", None, body, None).body == computed  # a hit
        sleeper = threading.Thread(target=_sleep, args=(shared, 600), daemon=True)
        sleeper.start()
        wait_until(lambda: not _answers_within(shared, 0.5), 60)
        answers = [v2_infer(plane, "mlp", None, body, None).body for _ in range(3)]
        still_sleeping = sleeper.is_alive()
        shared.kill()
        sleeper.join(timeout=60)
    assert still_sleeping  # answered while Redis was silent, not after it woke
    assert answers == [computed] * 3
    inference = server.stats.snapshot("mlp")["model_stats"][0]["inference_stats"]
    assert (inference["cache_hit"]["count"], inference["cache_miss"]["count"]) == (1, 4)
    logged = [r for r in caplog.records if "the shared response cache (redis" in r.getMessage()]
    assert len(logged) == 1


FIXTURES = Path(__file__).parent.parent / "fixtures" / "python_models"


def test_an_ensemble_caches_at_the_top_level_and_its_steps_by_their_own_config(stack):
    """Given an ensemble with the response cache whose ONNX step (mlp) also has it
    When the ensemble is asked the same request twice, then a request whose scaled rows the
    mlp has seen through the ensemble is sent to the mlp directly
    Then the second ensemble call runs no step, and the mlp answers its own call from its cache."""
    for name in ("scale", "double", "softmax"):
        for file in sorted((FIXTURES / name).rglob("*")):
            if file.is_file():
                relative = file.relative_to(FIXTURES / name).as_posix()
                stack.put(f"models/{name}/{relative}", file.read_bytes())
    stack.put("models/mlp/config.pbtxt", b"response_cache { enable: true }")
    stack.put("models/mlp/1/model.onnx", MLP)
    pipe = (FIXTURES / "pipe" / "config.pbtxt").read_bytes()
    stack.put("models/pipe/config.pbtxt", pipe + b"\nresponse_cache { enable: true }\n")
    for model in ("scale", "double", "softmax", "mlp", "pipe"):
        stack.wait_state(model, 1, "READY")
    raw = RNG.random((2, 4), dtype=np.float32) * 10
    body = {
        "inputs": [
            {"name": "RAW", "datatype": "FP32", "shape": [2, 4], "data": raw.ravel().tolist()}
        ]
    }

    def stats() -> dict[str, dict]:
        entries = stack.inference.get("/v2/models/stats").json()["model_stats"]
        return {entry["name"]: entry for entry in entries}

    first = stack.inference.post("/v2/models/pipe/infer", json=body)
    before = stats()  # the ensemble's warm-up and first call ran every step
    second = stack.inference.post("/v2/models/pipe/infer", json=body)
    # the step asked for the output it maps; so does this call (the key covers outputs asked)
    asked = {**_json_body(raw / 10), "outputs": [{"name": "OUTPUT__0"}]}
    direct = stack.inference.post("/v2/models/mlp/infer", json=asked)
    after = stats()
    assert [a.status_code for a in (first, second, direct)] == [200, 200, 200], first.text
    assert first.content == second.content
    assert after["pipe"]["inference_stats"]["cache_hit"]["count"] == 1
    for step in ("scale", "double", "softmax", "mlp"):
        assert after[step]["execution_count"] == before[step]["execution_count"], step
    assert after["mlp"]["inference_stats"]["cache_hit"]["count"] == 1  # the direct call


def _publish_cached_repeat(stack) -> None:
    """python_backend's repeat model with the response cache on. The config goes up once,
    with the cache on: a first one without it could be the one the version is READY under
    when a stream starts (the events race on a loaded machine)."""
    config = (FIXTURES / "repeat_int32" / "config.pbtxt").read_bytes()
    stack.put("models/repeat_int32/config.pbtxt", config + b"\nresponse_cache { enable: true }\n")
    for file in sorted((FIXTURES / "repeat_int32").rglob("*")):
        if file.is_file() and file.name != "config.pbtxt":
            relative = file.relative_to(FIXTURES / "repeat_int32").as_posix()
            stack.put(f"models/repeat_int32/{relative}", file.read_bytes())
    stack.wait_state("repeat_int32", 1, "READY")


def test_a_decoupled_models_whole_response_sequence_is_cached(stack):
    """Given python_backend's repeat model (decoupled: one response per element) with the
    response cache
    When the same request streams twice over HTTP generate_stream
    Then the second stream carries the same events in order, from the cache: the model ran once."""
    _publish_cached_repeat(stack)

    def events() -> list[str]:
        with stack.inference.stream(
            "POST", "/v2/models/repeat_int32/generate_stream", json={"IN": [4, 2, 7]}
        ) as response:
            assert response.status_code == 200
            return [line for line in response.iter_lines() if line.startswith("data: ")]

    first, second = events(), events()
    assert len(first) == 3 and first == second
    stats = stack.inference.get("/v2/models/repeat_int32/stats").json()["model_stats"][0]
    inference = stats["inference_stats"]
    assert (inference["cache_hit"]["count"], inference["cache_miss"]["count"]) == (1, 1)
    assert stats["execution_count"] == 1


def test_a_decoupled_models_unary_answer_is_cached_in_the_form_its_stream_reads(stack):
    """Given python_backend's repeat model (decoupled) with the response cache
    When a request of one element (one response) comes twice over v2 infer, then streams
    Then the second answer and the stream come from the cache: the model ran once, and the
    entry the unary door stored is the stream's one-response list (never unreadable)."""
    _publish_cached_repeat(stack)
    body = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [9]}]}
    answers = [stack.inference.post("/v2/models/repeat_int32/infer", json=body) for _ in range(2)]
    assert [a.status_code for a in answers] == [200, 200], answers[0].text
    assert answers[0].json()["outputs"] == answers[1].json()["outputs"]
    stats = stack.inference.get("/v2/models/repeat_int32/stats").json()["model_stats"][0]
    inference = stats["inference_stats"]
    assert (inference["cache_hit"]["count"], inference["cache_miss"]["count"]) == (1, 1)
    assert stats["execution_count"] == 1
    with stack.inference.stream(
        "POST", "/v2/models/repeat_int32/generate_stream", json={"IN": [9]}
    ) as response:
        assert response.status_code == 200
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert len(events) == 1, events
    stats = stack.inference.get("/v2/models/repeat_int32/stats").json()["model_stats"][0]
    assert stats["inference_stats"]["cache_hit"]["count"] == 2
    assert stats["execution_count"] == 1
