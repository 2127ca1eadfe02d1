"""What applies to a request, door by door: one `lambdaserve serve` (the dynamic batcher, a
local response cache, Triton-mode traces, payload capture), one model asking for all of it,
and each door's own client sending it requests. Each cell of the matrix (a feature by a
door) is measured, and the whole matrix must be: every cell applied, but
the ones ``REFUSED`` names with the reason. A new feature adds a row (a probe), a new door a
column (a caller).

Features, as a client sees them:
- statistics: the request counts once in the version's ``inference_stats.success``;
- cache: the same request a second time is a hit (``cache_hit`` + 1), answered the same;
- trace: one trace of the model is written (a numbered file per trace, log frequency 1);
- capture: one exchange of the model lands under ``captures/`` in the bucket;
- max_batch_size: nine rows (the config's max_batch_size is 8) are refused, saying why.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as triton

from tests import builders, sequence_models
from tests.integration import test_grpc_peers
from tests.integration.grpc_support import Served, lambdaserve_serve
from tests.integration.test_grpc_peers import needs, peer
from tests.support import wait_until

torchserve_stubs = test_grpc_peers.torchserve_stubs  # the fixture: TorchServe's own protos

MODEL = "cells"
CONFIG = b"""
platform: "onnxruntime_onnx"
max_batch_size: 8
dynamic_batching { }
response_cache { enable: true }
parameters { key: "data_capture" value { string_value: "{\\"sampling_percentage\\": 100}" } }
"""
Rows = np.ndarray[Any, Any]
Door = Callable[[Served, Rows], None]


def _ok(response: httpx.Response) -> None:
    assert response.status_code == 200, response.text


def v2_json(served: Served, rows: Rows) -> None:
    shape = list(rows.shape)
    tensor = {"name": "INPUT__0", "datatype": "FP32", "shape": shape, "data": rows.tolist()}
    _ok(httpx.post(f"{_http(served)}/v2/models/{MODEL}/infer", json={"inputs": [tensor]}))


def v2_binary(served: Served, rows: Rows) -> None:
    tensor = triton.InferInput("INPUT__0", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows, binary_data=True)
    asked = [triton.InferRequestedOutput("OUTPUT__0", binary_data=True)]
    body, size = triton.InferenceServerClient.generate_request_body([tensor], outputs=asked)
    headers = {"Inference-Header-Content-Length": str(size)}
    _ok(httpx.post(f"{_http(served)}/v2/models/{MODEL}/infer", content=body, headers=headers))


def v2_grpc(served: Served, rows: Rows) -> None:
    tensor = grpcclient.InferInput("INPUT__0", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    served.client().infer(MODEL, [tensor])


def generate(served: Served, rows: Rows) -> None:
    body = {"INPUT__0": rows[0].tolist()}
    _ok(httpx.post(f"{_http(served)}/v2/models/{MODEL}/generate", json=body))


def torchserve_rest(served: Served, rows: Rows) -> None:
    _ok(httpx.post(f"{_http(served)}/predictions/{MODEL}", json=rows.tolist()))


def tfserving_rest(served: Served, rows: Rows) -> None:
    body = {"instances": rows.tolist()}
    _ok(httpx.post(f"{_http(served)}/v1/models/{MODEL}:predict", json=body))


def paddle_http(served: Served, rows: Rows) -> None:
    body = {"key": ["INPUT__0"], "value": [json.dumps(rows.tolist())]}
    answer = httpx.post(f"{_http(served)}/{MODEL}/prediction", json=body)
    _ok(answer)
    assert answer.json()["err_no"] == 0, answer.text


def tfserving_grpc(served: Served, rows: Rows) -> None:
    inputs = {"INPUT__0": {"data": rows.tolist(), "dtype": "float32"}}
    [answer] = peer(
        "tfserving_client.py",
        served.grpc_url,
        [{"rpc": "predict", "model": MODEL, "inputs": inputs}],
    )
    assert answer["ok"], answer


def torchserve_grpc(stubs: Path) -> Door:
    def call(served: Served, rows: Rows) -> None:
        data = base64.b64encode(json.dumps(rows.tolist()).encode()).decode()
        [answer] = peer(
            "torchserve_client.py",
            served.grpc_url,
            [{"rpc": "Predictions", "model": MODEL, "input": {"data": data}}],
            str(stubs),
        )
        assert answer["ok"], answer

    return call


def _http(served: Served) -> str:
    return f"http://127.0.0.1:{served.http}"


DOOR_NAMES = (
    "v2 HTTP JSON",
    "v2 HTTP binary",
    "v2 gRPC",
    "generate",
    "TorchServe REST",
    "TorchServe gRPC",
    "TF Serving REST",
    "TF Serving gRPC",
    "Paddle HTTP",
)
# (feature, door) -> why the feature does not apply there; every other cell must apply
REFUSED: dict[tuple[str, str], str] = {
    ("max_batch_size", "generate"): "a generate request is one row: its fields fill one "
    "request and the batch dimension of 1 is added, as Triton's generate does; nine rows "
    "cannot be asked for",
}


def test_every_feature_applies_on_every_door(stack, tmp_path, torchserve_stubs):
    # Given one model asking for the cache and capture, and `serve` tracing every request
    needs("tensorflow_serving")
    stack.put(f"models/{MODEL}/config.pbtxt", CONFIG)
    stack.put(f"models/{MODEL}/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state(MODEL, 1, "READY")
    traces = tmp_path / "trace.json"
    doors: dict[str, Door] = {
        "v2 HTTP JSON": v2_json,
        "v2 HTTP binary": v2_binary,
        "v2 gRPC": v2_grpc,
        "generate": generate,
        "TorchServe REST": torchserve_rest,
        "TorchServe gRPC": torchserve_grpc(torchserve_stubs),
        "TF Serving REST": tfserving_rest,
        "TF Serving gRPC": tfserving_grpc,
        "Paddle HTTP": paddle_http,
    }
    assert tuple(doors) == DOOR_NAMES
    found: dict[tuple[str, str], str] = {}
    flags = ["--cache-config", "local,size=1048576"]
    flags += ["--trace-config", f"triton,file={traces}", "--trace-config", "level=TIMESTAMPS"]
    flags += ["--trace-config", "rate=1", "--trace-config", "triton,log-frequency=1"]
    with lambdaserve_serve(*flags) as served:
        probes = Probes(stack, served, traces)
        rng = np.random.default_rng(5)
        # When each door sends its requests, new rows each time (never a hit by chance)
        for door, call in doors.items():
            for feature, probe in probes.features.items():
                try:
                    probe(
                        lambda rows, call=call: call(served, rows), rng.random((1, 4), np.float32)
                    )
                    found[(feature, door)] = "applied"
                except AssertionError as exc:
                    found[(feature, door)] = f"not applied: {str(exc).splitlines()[0][:120]}"
    # Then every cell applies, but the ones refused with their reason (which must not)
    print("\n" + _table(found))
    wrong = [cell for cell, got in found.items() if (got == "applied") == (cell in REFUSED)]
    assert not wrong, f"cells not as expected: {wrong}\n{_table(found)}"


class Probes:
    """Each feature as a client sees it: a before, one door's requests, an after."""

    def __init__(self, stack: Any, served: Served, traces: Path) -> None:
        self.stack, self.served, self.traces = stack, served, traces
        # capture first: it waits for the earlier doors' exchanges to land (written every
        # 5 s), so it counts this door's alone
        self.features: dict[str, Callable[[Callable[[Rows], None], Rows], None]] = {
            "capture": self.capture,
            "statistics": self.statistics,
            "cache": self.cache,
            "trace": self.trace,
            "max_batch_size": self.max_batch_size,
        }

    def stats(self) -> dict[str, Any]:
        answer = httpx.get(f"{_http(self.served)}/v2/models/{MODEL}/stats").json()
        return dict(answer["model_stats"][0]["inference_stats"])

    def statistics(self, send: Callable[[Rows], None], rows: Rows) -> None:
        before = self.stats()["success"]["count"]
        send(rows)
        after = self.stats()["success"]["count"]
        assert after - before == 1, f"success counted {after - before} times"

    def cache(self, send: Callable[[Rows], None], rows: Rows) -> None:
        before = self.stats()["cache_hit"]["count"]
        send(rows)
        send(rows)
        after = self.stats()["cache_hit"]["count"]
        assert after - before == 1, f"the repeat was {after - before} hits"

    def max_batch_size(self, send: Callable[[Rows], None], rows: Rows) -> None:
        try:
            send(np.repeat(rows, 9, axis=0))
        except Exception as exc:  # each door's client says it its own way
            said = str(exc)
            assert "batch" in said.lower(), f"refused for another reason: {said[:100]}"
            return
        raise AssertionError("nine rows were answered (max_batch_size 8)")

    def trace(self, send: Callable[[Rows], None], rows: Rows) -> None:
        before = self._traced()
        send(rows)
        after = wait_until(lambda: (n := self._traced()) > before and n, 10)
        assert after - before == 1, f"traced {after - before} times"

    def _traced(self) -> int:
        files = self.traces.parent.glob(f"{self.traces.name}.*")
        return sum(
            1
            for f in files
            for record in json.loads(f.read_text() or "[]")
            if record.get("model_name") == MODEL
        )

    def capture(self, send: Callable[[Rows], None], rows: Rows) -> None:
        before = self._settled()
        send(rows)
        after = wait_until(lambda: (n := self._captured()) > before and n, 12)
        assert after - before == 1, f"captured {after - before} times"

    def _settled(self) -> int:
        """The captured count once nothing more is on its way (it stays for one interval)."""
        seen = self._captured()
        while True:
            time.sleep(5.5)
            now = self._captured()
            if now == seen:
                return now
            seen = now

    def _captured(self) -> int:
        s3, bucket = self.stack.clients.s3, self.stack.settings.bucket
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"captures/{MODEL}/")
        lines = 0
        for entry in listed.get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=entry["Key"])["Body"].read()
            lines += len(body.splitlines())
        return lines


def _table(found: dict[tuple[str, str], str]) -> str:
    features = sorted({f for f, _ in found})
    doors = list(dict.fromkeys(d for _, d in found))
    rows = [" | ".join(["door", *features])]
    for door in doors:
        rows.append(" | ".join([door, *(found[(f, door)] for f in features)]))
    return "\n".join(rows)


# --- sequences: a row of its own (a sequence model, not the matrix's one) ------------------

SUMS = "sums_in_self"
# doors whose protocol carries Triton's sequence controls; the others say why not
HANDLERS_OWN = (
    "TorchServe's sequences are its handlers' own (ts_request_sequence_id), not Triton's "
    "sequence batcher"
)
SEQUENCE_REFUSED = {
    "generate": "Triton's generate extension has no sequence parameters",
    "TorchServe REST": HANDLERS_OWN,
    "TorchServe gRPC": HANDLERS_OWN,
    "TF Serving REST": "TF Serving has no sequences",
    "TF Serving gRPC": "TF Serving has no sequences",
    "Paddle HTTP": "Paddle Serving has no sequences",
}


def _sequence_http(binary: bool) -> Callable[[Served], Callable[[int, int, bool, bool], int]]:
    return lambda served: _sequence_http_client(served, binary)


def _sequence_http_client(served: Served, binary: bool) -> Callable[[int, int, bool, bool], int]:
    client = triton.InferenceServerClient(f"127.0.0.1:{served.http}")

    def step(sequence: int, value: int, start: bool, end: bool) -> int:
        sent = triton.InferInput("INPUT", [1, 1], "INT32")
        sent.set_data_from_numpy(np.full((1, 1), value, np.int32), binary_data=binary)
        result = client.infer(
            SUMS, [sent], sequence_id=sequence, sequence_start=start, sequence_end=end
        )
        return int(result.as_numpy("OUTPUT")[0][0])

    return step


def _sequence_grpc(served: Served) -> Callable[[int, int, bool, bool], int]:
    client = served.client()

    def step(sequence: int, value: int, start: bool, end: bool) -> int:
        sent = grpcclient.InferInput("INPUT", [1, 1], "INT32")
        sent.set_data_from_numpy(np.full((1, 1), value, np.int32))
        result = client.infer(
            SUMS, [sent], sequence_id=sequence, sequence_start=start, sequence_end=end
        )
        return int(result.as_numpy("OUTPUT")[0][0])

    return step


def test_a_sequence_keeps_its_instance_on_every_door_that_carries_sequences(stack):
    # Given a Python model keeping each sequence's running sum in self, with two instances
    # (two worker processes under serve), the common Triton and TorchServe pattern
    for path, body in sequence_models.python_sum_in_self(SUMS, count=2).items():
        stack.put(f"models/{SUMS}/{path}", body)
    stack.wait_state(SUMS, 1, "READY")
    inputs = [1, 2, 3, 4, 5, 6, 7, 8]
    expected = [sum(inputs[: i + 1]) for i in range(len(inputs))]
    doors = {
        "v2 HTTP JSON": _sequence_http(binary=False),
        "v2 HTTP binary": _sequence_http(binary=True),
        "v2 gRPC": _sequence_grpc,
    }
    # (every door of the matrix carries sequences here, or says why it cannot)
    assert set(doors) | set(SEQUENCE_REFUSED) == set(DOOR_NAMES)
    with lambdaserve_serve() as served:
        for number, (door, make) in enumerate(doors.items()):
            got: dict[int, list[int]] = {}

            def run(
                sequence: int,
                make: Callable[[Served], Callable[[int, int, bool, bool], int]] = make,
                got: dict[int, list[int]] = got,
            ) -> None:
                # a client per thread: tritonclient's HTTP client is gevent's, one thread's
                step, last = make(served), len(inputs) - 1
                try:
                    got[sequence] = [
                        step(sequence, v, i == 0, i == last) for i, v in enumerate(inputs)
                    ]
                except Exception as exc:  # said in the assertion, not lost in the thread
                    got[sequence] = [f"{type(exc).__name__}: {exc}"]  # type: ignore[list-item]

            # When six sequences send their steps at once through the door
            base = 100 * (number + 1)
            threads = [threading.Thread(target=run, args=(base + i,)) for i in range(6)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
            # Then every sequence's sums are its own: each stayed on the instance it began on
            assert got == {base + i: expected for i in range(6)}, door
