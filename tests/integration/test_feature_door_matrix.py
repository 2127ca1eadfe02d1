"""What applies to a request, door by door: one `lambdaserve serve` (the dynamic batcher, a
local response cache, Triton-mode traces, payload capture), one model asking for all of it,
and each door's own client sending it requests (tests/integration/matrix_doors.py). Each
cell of the matrix (a feature by a door) is measured, and the whole matrix must be: every
cell applied, but the ones ``REFUSED`` names with the reason. A new feature adds a row (a
probe), a new door a column. The scheduler's rows (rate limiter, queue policy, deadline)
are test_scheduler_door_matrix.py's, over the same doors.

Features, as a client sees them:
- statistics: the request counts once in the version's ``inference_stats.success``;
- cache: the same request a second time is a hit (``cache_hit`` + 1), answered the same;
- trace: one trace of the model is written (a numbered file per trace, log frequency 1);
- capture: one exchange of the model lands under ``captures/`` in the bucket;
- max_batch_size: nine rows (the config's max_batch_size is 8) are refused, saying why;
- request_ids: the client's id for its request is the id of the model's trace;
- classification: the top two classes are answered as Triton's "score:index" strings.
"""

from __future__ import annotations

import itertools
import json
import re
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
from tests.integration import matrix_models, test_grpc_peers
from tests.integration.grpc_support import Served, lambdaserve_serve
from tests.integration.matrix_doors import BLS, Answer, Ask, Rows, doors, measure
from tests.integration.test_grpc_peers import needs
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
Send = Callable[[Ask], Answer]

DOOR_NAMES = (
    "v2 HTTP JSON",
    "v2 HTTP binary",
    "v2 gRPC",
    "v2 gRPC stream",
    "generate",
    "TorchServe REST",
    "TorchServe gRPC",
    "TF Serving REST",
    "TF Serving gRPC",
    "Paddle HTTP",
    "BLS",
)
NO_IDS = "its protocol gives the client no id for a request (the server makes its own)"
NO_CLASSES = "its protocol has no way to ask for the top classes of an output"
# (feature, door) -> why the feature does not apply there; every other cell must apply
REFUSED: dict[tuple[str, str], str] = {
    ("max_batch_size", "generate"): "a generate request is one row: its fields fill one "
    "request and the batch dimension of 1 is added, as Triton's generate does; nine rows "
    "cannot be asked for",
    ("capture", "BLS"): "capture records what a client exchanged with a door: model code's "
    "own request to another model is part of its caller's exchange, captured under the caller",
    **{("request_ids", door): NO_IDS for door in DOOR_NAMES if "Torch" in door or "TF" in door},
    ("classification", "generate"): "Triton's generate extension has no output parameters",
    ("classification", "BLS"): "a BLS request names its outputs only: pb_utils has no "
    "classification",
    **{
        ("classification", door): NO_CLASSES
        for door in DOOR_NAMES
        if "Torch" in door or "TF" in door or "Paddle" in door
    },
}


def test_every_feature_applies_on_every_door(stack, tmp_path, torchserve_stubs):
    # Given one model asking for the cache and capture, `serve` tracing every request, and a
    # BLS model whose code asks it (the BLS door)
    needs("tensorflow_serving")
    stack.put(f"models/{MODEL}/config.pbtxt", CONFIG)
    stack.put(f"models/{MODEL}/1/model.onnx", builders.onnx_mlp(4, 3))
    for path, content in matrix_models.bls_caller().items():
        stack.put(f"models/{BLS}/{path}", content)
    stack.wait_state(MODEL, 1, "READY")
    stack.wait_state(BLS, 1, "READY")
    traces = tmp_path / "trace.json"
    every_door = doors(torchserve_stubs)
    assert tuple(every_door) == DOOR_NAMES
    found: dict[tuple[str, str], str] = {}
    flags = ["--cache-config", "local,size=1048576"]
    flags += ["--trace-config", f"triton,file={traces}", "--trace-config", "level=TIMESTAMPS"]
    flags += ["--trace-config", "rate=1", "--trace-config", "triton,log-frequency=1"]
    with lambdaserve_serve(*flags) as served:
        probes = Probes(stack, served, traces)
        rng = np.random.default_rng(5)
        # When each door sends its requests, new rows each time (never a hit by chance)
        for name, door in every_door.items():
            for feature, probe in probes.features.items():
                send: Send = lambda ask, door=door: door(served, [ask])[0]  # noqa: E731
                rows = rng.random((1, 4), np.float32)
                measure(
                    found,
                    (feature, name),
                    lambda probe=probe, send=send, rows=rows: probe(send, rows),
                )
    # Then every cell applies, but the ones refused with their reason (which must not)
    print("\n" + table(found))
    wrong = [cell for cell, got in found.items() if (got == "applied") == (cell in REFUSED)]
    assert not wrong, f"cells not as expected: {wrong}\n{table(found)}"


class Probes:
    """Each feature as a client sees it: a before, one door's requests, an after."""

    def __init__(
        self, stack: Any, served: Served, traces: Path, model: str = MODEL, **asked: Any
    ) -> None:
        self.stack, self.served, self.traces = stack, served, traces
        self.model, self.asked = model, asked  # the model asked, and how (a TF signature)
        self.ids = itertools.count(7001)
        # capture first: it waits for the earlier doors' exchanges to land (written every
        # 5 s), so it counts this door's alone
        self.features: dict[str, Callable[[Send, Rows], None]] = {
            "capture": self.capture,
            "statistics": self.statistics,
            "cache": self.cache,
            "trace": self.trace,
            "max_batch_size": self.max_batch_size,
            "request_ids": self.request_ids,
            "classification": self.classification,
        }

    def ask(self, rows: Rows, **more: Any) -> Ask:
        return Ask(self.model, rows, **self.asked, **more)

    def stats(self) -> dict[str, Any]:
        url = f"http://127.0.0.1:{self.served.http}/v2/models/{self.model}/stats"
        answer = httpx.get(url).json()
        return dict(answer["model_stats"][0]["inference_stats"])

    def statistics(self, send: Send, rows: Rows) -> None:
        before = self.stats()["success"]["count"]
        send(self.ask(rows)).expect_ok()
        after = self.stats()["success"]["count"]
        assert after - before == 1, f"success counted {after - before} times"

    def cache(self, send: Send, rows: Rows) -> None:
        before = self.stats()["cache_hit"]["count"]
        first = send(self.ask(rows)).expect_ok()
        again = send(self.ask(rows)).expect_ok()
        after = self.stats()["cache_hit"]["count"]
        assert after - before == 1, f"the repeat was {after - before} hits"
        assert again.output == first.output, "the hit answered otherwise"

    def max_batch_size(self, send: Send, rows: Rows) -> None:
        answer = send(self.ask(np.repeat(rows, 9, axis=0)))
        assert not answer.ok, "nine rows were answered (max_batch_size 8)"
        assert "batch" in answer.said.lower(), f"refused for another reason: {answer.said[:100]}"

    def trace(self, send: Send, rows: Rows) -> None:
        before = len(self._traced())
        send(self.ask(rows)).expect_ok()
        after = wait_until(lambda: (n := len(self._traced())) > before and n, 10)
        assert after - before == 1, f"traced {after - before} times"

    def request_ids(self, send: Send, rows: Rows) -> None:
        given = str(next(self.ids))  # digits: Paddle's logid is an int64
        send(self.ask(rows, request_id=given)).expect_ok()
        traced = wait_until(lambda: given in self._traced(), 10)
        assert traced, f"no trace of {self.model} has the request id {given}"

    def classification(self, send: Send, rows: Rows) -> None:
        answer = send(self.ask(rows, class_count=2)).expect_ok()
        classes = [c.decode() if isinstance(c, bytes) else c for c in np.ravel(answer.output)]
        assert len(classes) == 2, f"asked for 2 classes, got {classes}"
        assert all(re.fullmatch(r"[-+.\deE]+:\d+", c) for c in classes), classes

    def _traced(self) -> list[str]:
        """The request id of each trace of the model written so far ("" where none)."""
        files = self.traces.parent.glob(f"{self.traces.name}.*")
        return [
            str(record.get("request_id", ""))
            for f in files
            for record in json.loads(f.read_text() or "[]")
            if record.get("model_name") == self.model
        ]

    def capture(self, send: Send, rows: Rows) -> None:
        before = self._settled()
        send(self.ask(rows)).expect_ok()
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
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"captures/{self.model}/")
        lines = 0
        for entry in listed.get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=entry["Key"])["Body"].read()
            lines += len(body.splitlines())
        return lines


def table(found: dict[tuple[str, str], str]) -> str:
    features = list(dict.fromkeys(f for f, _ in found))
    door_names = list(dict.fromkeys(d for _, d in found))
    rows = [" | ".join(["door", *features])]
    for door in door_names:
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
    "BLS": "model code steps a sequence with correlation_id and flags of its own choosing; "
    "the BLS caller here forwards no sequence (a BLS request is not a client's sequence)",
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


def _sequence_stream(served: Served) -> Callable[[int, int, bool, bool], int]:
    client = served.client()
    came: list[Any] = []
    done = threading.Event()

    def step(sequence: int, value: int, start: bool, end: bool) -> int:
        sent = grpcclient.InferInput("INPUT", [1, 1], "INT32")
        sent.set_data_from_numpy(np.full((1, 1), value, np.int32))
        if start:
            client.start_stream(
                callback=lambda result, error: (came.append((result, error)), done.set())
            )
        done.clear()
        client.async_stream_infer(
            SUMS, [sent], sequence_id=sequence, sequence_start=start, sequence_end=end
        )
        assert done.wait(60), "no answer on the stream"
        result, error = came.pop()
        if end:
            client.stop_stream()
        if error is not None:
            raise error
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
        "v2 gRPC stream": _sequence_stream,
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
