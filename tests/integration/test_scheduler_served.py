"""Triton's scheduler fields applied in `lambdaserve serve`, as Triton's qa/L0_model_queue and
L0_rate_limiter check them (their files run unchanged from Triton's repository, not stored
here; docs/from-triton.md gives the counts): a bounded queue refuses with "Exceeds maximum
queue size", a request waiting past its timeout with "Request timeout expired", a higher
priority runs first, and a version needing more of a resource than --rate-limit-resource
gives does not load, with Triton's reason. tritonclient.grpc, unchanged; one slow identity
model (a Python model sleeping the config's execute_delay_ms)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.integration.grpc_support import lambdaserve_serve

SLEEPING = Path(__file__).parents[1] / "fixtures" / "python_models" / "sleeping_identity"
BASE = """
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU {rate_limiter} }} ]
parameters [ {{ key: "execute_delay_ms" value: {{ string_value: "{delay_ms}" }} }} ]
{batching}
"""
MODELS = {
    # a batch of up to 4 runs 1.5 s; 4 more may wait
    "bounded": dict(
        delay_ms=1500,
        batching="dynamic_batching { preferred_batch_size: [ 4 ] "
        "default_queue_policy { max_queue_size: 4 } }",
    ),
    # one at a time for 1.5 s; a request waits 10 s at most, or less where it asks (Triton
    # lets a request shorten its timeout, never lengthen it)
    "timed": dict(
        delay_ms=1500,
        batching="dynamic_batching { preferred_batch_size: [ 1 ] default_queue_policy { "
        "timeout_action: REJECT default_timeout_microseconds: 10000000 "
        "allow_timeout_override: true } }",
    ),
    # one at a time; two priority levels, the default the lower
    "ranked": dict(
        delay_ms=600,
        batching="dynamic_batching { preferred_batch_size: [ 1 ] priority_levels: 2 "
        "default_priority_level: 2 }",
    ),
    # an instance needing 4 of R1, where serve gives 3
    "hungry": dict(
        delay_ms=0,
        batching="dynamic_batching { }",
        rate_limiter='rate_limiter { resources [ { name: "R1" count: 4 } ] }',
    ),
}


def row(value: float) -> list[grpcclient.InferInput]:
    given = grpcclient.InferInput("INPUT0", [1, 1], "FP32")
    given.set_data_from_numpy(np.array([[value]], np.float32))
    return [given]


@pytest.fixture
def served(stack):
    code = (SLEEPING / "1" / "model.py").read_bytes()
    for name, fields in MODELS.items():
        config = BASE.format(**{"rate_limiter": "", **fields})
        stack.put(f"models/{name}/config.pbtxt", config.encode())
        stack.put(f"models/{name}/1/model.py", code)
    for name in MODELS:
        stack.wait_state(name, 1, "READY", timeout_s=60)
    flags = ("--rate-limit", "execution_count", "--rate-limit-resource", "R1:3")
    with lambdaserve_serve(*flags, ready=False) as server:
        yield server


def test_the_queue_bound_timeouts_and_priorities_apply_as_tritons(served):
    client = served.client()
    answers: dict[str, list] = {"bounded": [], "timed": [], "ranked": []}
    lock = threading.Lock()

    def callback(model, label):
        def done(result, error):
            with lock:
                answers[model].append((label, time.monotonic(), result, error))

        return done

    # When 12 requests reach the bounded model at once (4 run, 4 wait, 4 more)
    for index in range(12):
        client.async_infer("bounded", row(index), callback("bounded", index))
    # and the timed model gets a request to keep it busy, then one that may wait its 10 s and
    # one that asks to wait 100 ms at most
    client.async_infer("timed", row(0), callback("timed", "busy"))
    time.sleep(0.2)
    client.async_infer("timed", row(1), callback("timed", "default"))
    client.async_infer("timed", row(2), callback("timed", "hasty"), timeout=100_000)
    # and the ranked model, busy, gets a default-priority request, then a priority-1 one
    client.async_infer("ranked", row(0), callback("ranked", "busy"))
    time.sleep(0.2)
    client.async_infer("ranked", row(1), callback("ranked", "low"))
    time.sleep(0.05)
    client.async_infer("ranked", row(2), callback("ranked", "high"), priority=1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and sum(map(len, answers.values())) < 18:
        time.sleep(0.05)
    # Then the bounded queue refused what it could not hold, in Triton's words
    bounded = answers["bounded"]
    refused = [error for _, _, _, error in bounded if error is not None]
    assert len(bounded) == 12 and refused, bounded
    assert all("Exceeds maximum queue size" in error.message() for error in refused), refused
    assert {error.status() for error in refused} == {"StatusCode.UNAVAILABLE"}, refused
    assert 4 <= 12 - len(refused) <= 8
    # and the request that asked to wait 100 ms at most timed out, in Triton's words
    timed = {label: error for label, _, _, error in answers["timed"]}
    assert timed["hasty"] is not None and "Request timeout expired" in timed["hasty"].message()
    assert timed["hasty"].status() == "StatusCode.UNAVAILABLE"
    assert timed["busy"] is None and timed["default"] is None, timed
    # and the higher priority ran first, though it came later
    order = [label for label, *_ in sorted(answers["ranked"], key=lambda a: a[1])]
    assert order == ["busy", "high", "low"], answers["ranked"]


def test_a_version_needing_more_of_a_resource_than_given_does_not_load(served):
    client = served.client()
    # When a request reaches the model whose instance needs 4 of R1 (serve gives 3)
    with pytest.raises(InferenceServerException) as refused:
        client.infer("hungry", row(1.0))
    # Then it is not ready, and the answer gives Triton's reason
    assert not client.is_model_ready("hungry")
    assert (
        'Resource count for "R1" is limited to 3 which will prevent scheduling of one or '
        "more model instances, the minimum required count is 4" in refused.value.message()
    )
