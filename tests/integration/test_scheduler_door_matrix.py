"""The scheduler's rows of the feature-by-door matrix: what Triton's scheduler does to a
request, measured on every door of one `lambdaserve serve` (the doors and their clients:
tests/integration/matrix_doors.py; the other rows: test_feature_door_matrix.py). Each row
has a Python model taking its time, so requests sent together meet in the server:

- rate_limiter: two requests at once to two instances that share the one R1 the server has
  (``--rate-limit-resource R1:1``): the second waits for it, and the wait is counted as
  queue time, never as compute (Triton counts a request queued until an instance is
  allocated);
- queue_policy: four requests at once to a model whose queue holds one: those it cannot
  hold are refused with Triton's "Exceeds maximum queue size";
- deadline: a request asking to wait 100 ms at most (Triton's ``timeout`` parameter, the
  model's queue policy allowing it) behind a busy instance is refused with Triton's
  "Request timeout expired".

Every cell must apply, but the ones ``REFUSED`` names with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import httpx
import numpy as np

from tests.integration import matrix_models, test_grpc_peers
from tests.integration.grpc_support import Served, lambdaserve_serve
from tests.integration.matrix_doors import BLS, Answer, Ask, doors, measure
from tests.integration.test_feature_door_matrix import DOOR_NAMES, table
from tests.integration.test_grpc_peers import needs

torchserve_stubs = test_grpc_peers.torchserve_stubs  # the fixture: TorchServe's own protos

ONE_R1_EACH = 'count: 2 rate_limiter { resources [ { name: "R1" count: 1 } ] }'
MODELS = {
    # two instances, each needing the server's one R1: one runs at a time, 500 ms
    "limited": matrix_models.slow(500, "", ONE_R1_EACH),
    # one at a time for 600 ms; one more may wait
    "bounded": matrix_models.slow(
        600,
        "dynamic_batching { preferred_batch_size: [ 1 ] "
        "default_queue_policy { max_queue_size: 1 } }",
    ),
    # one at a time for 600 ms; a request may wait 10 s, or less where it asks
    "timed": matrix_models.slow(
        600,
        "dynamic_batching { preferred_batch_size: [ 1 ] default_queue_policy { "
        "timeout_action: REJECT default_timeout_microseconds: 10000000 "
        "allow_timeout_override: true } }",
    ),
}
NO_TIMEOUT = (
    "its requests carry no timeout of their own (Triton's `timeout` parameter is v2's); "
    "a gRPC deadline is the client's own limit, which the server does not read as one"
)
# (feature, door) -> why the feature does not apply there; every other cell must apply
REFUSED: dict[tuple[str, str], str] = {
    ("deadline", door): NO_TIMEOUT
    for door in DOOR_NAMES
    if "Torch" in door or "TF" in door or "Paddle" in door
}
Sent = Callable[[Sequence[Ask]], list[Answer]]


def test_the_schedulers_features_apply_on_every_door(stack, torchserve_stubs):
    # Given the three slow models, the BLS caller, and `serve` giving one R1
    needs("tensorflow_serving")
    for name, files in {**MODELS, BLS: matrix_models.bls_caller()}.items():
        for path, content in files.items():
            stack.put(f"models/{name}/{path}", content)
    for name in (*MODELS, BLS):
        stack.wait_state(name, 1, "READY", timeout_s=60)
    every_door = doors(torchserve_stubs)
    assert tuple(every_door) == DOOR_NAMES
    found: dict[tuple[str, str], str] = {}
    flags = ("--rate-limit", "execution_count", "--rate-limit-resource", "R1:1")
    with lambdaserve_serve(*flags) as served:
        rows = Rows()
        features = {
            "rate_limiter": lambda send: rate_limiter(served, send, rows),
            "queue_policy": lambda send: queue_policy(send, rows),
            "deadline": lambda send: deadline(send, rows),
        }
        # When each door sends the asks of each row together
        for name, door in every_door.items():
            for feature, probe in features.items():
                sent: Sent = lambda asks, door=door: door(served, asks)  # noqa: E731
                measure(found, (feature, name), lambda probe=probe, sent=sent: probe(sent))
    # Then every cell applies, but the ones refused with their reason (which must not)
    print("\n" + table(found))
    wrong = [cell for cell, got in found.items() if (got == "applied") == (cell in REFUSED)]
    assert not wrong, f"cells not as expected: {wrong}\n{table(found)}"


class Rows:
    """New rows for every ask (a response cache never answers one by chance)."""

    def __init__(self) -> None:
        self._rng = np.random.default_rng(9)

    def __call__(self) -> np.ndarray[Any, Any]:
        return self._rng.random((1, 4), np.float32)


def _stats(served: Served, model: str) -> dict[str, Any]:
    url = f"http://127.0.0.1:{served.http}/v2/models/{model}/stats"
    return dict(httpx.get(url).json()["model_stats"][0]["inference_stats"])


def rate_limiter(served: Served, send: Sent, rows: Rows) -> None:
    before = _stats(served, "limited")
    answers = send([Ask("limited", rows()), Ask("limited", rows(), at=0.05)])
    for answer in answers:
        answer.expect_ok()
    after = _stats(served, "limited")
    count = after["success"]["count"] - before["success"]["count"]
    queued_ms = (after["queue"]["ns"] - before["queue"]["ns"]) / 1e6
    compute_ms = (after["compute_infer"]["ns"] - before["compute_infer"]["ns"]) / 1e6
    assert count == 2, f"success counted {count} times for 2 requests"
    # the second waited ~450 ms for R1: queue time; the two ran 500 ms each
    assert queued_ms >= 250, f"queued {queued_ms:.0f} ms (compute {compute_ms:.0f} ms)"
    assert compute_ms < 1300, f"compute {compute_ms:.0f} ms holds the wait (queue {queued_ms:.0f})"


def queue_policy(send: Sent, rows: Rows) -> None:
    answers = send([Ask("bounded", rows(), at=at) for at in (0, 0.1, 0.15, 0.2)])
    refused = [a.said for a in answers if not a.ok]
    assert len(refused) < 4, f"none answered: {refused[0][:120]}"
    assert refused, "four were answered, though the queue holds one"
    other = [said for said in refused if "exceeds maximum queue size" not in said.lower()]
    assert not other, f"refused for another reason: {other[0][:120]}"


def deadline(send: Sent, rows: Rows) -> None:
    busy, hasty = send([Ask("timed", rows()), Ask("timed", rows(), timeout_us=100_000, at=0.2)])
    busy.expect_ok()
    assert not hasty.ok, "the request asking to wait 100 ms at most waited ~400 ms"
    said = hasty.said.lower()
    assert "request timeout expired" in said, f"refused for another reason: {hasty.said[:120]}"
