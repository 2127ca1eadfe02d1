"""The scope every execution runs in (serving/execution.py), whichever path runs it."""

from __future__ import annotations

import threading
import time

import numpy as np

from lambdaserve.catalog.items import VersionRecord
from lambdaserve.config.model_config import build
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.runtimes.code_errors import known_request_ids
from lambdaserve.runtimes.request_parameters import (
    clients_own,
    known_request_parameters,
    parameters_of,
    timeout_us,
)
from lambdaserve.runtimes.sequence_requests import passed_sequence
from lambdaserve.serving.execution import execution_scope
from lambdaserve.serving.rate_limiter import RateLimiter
from lambdaserve.serving.version_resolver import ServedVersion
from lambdaserve.tensors.signature import Signature
from lambdaserve.workers.deadline import current_deadline


def _served(document: dict[str, object] | None = None) -> ServedVersion:
    config = build({"max_batch_size": 8, **(document or {})}, "m")
    record = VersionRecord(model="m", version=1, fingerprint="f")
    return ServedVersion("m", 1, config, record, Signature((), ()))


def _request(request_id: str | None = None, **parameters: object) -> InferRequest:
    tensor = InferInput("x", "FP32", (1, 1), np.zeros((1, 1), np.float32))
    return InferRequest(inputs=(tensor,), id=request_id, parameters=parameters)


def test_a_plain_request_runs_in_the_one_constant_scope() -> None:
    """Given a lone request with no id, no timeout, no sequence, not traced, no limiter,
    When two such executions are scoped,
    Then both get the same object (nothing built per request), which waited for nothing
    and sets no request ids."""
    first = execution_scope(None, _served(), (_request(),))
    second = execution_scope(None, _served(), (_request(),))
    assert first is second
    with first as held:
        assert held.waited_ns == 0
        assert known_request_ids() == ()


def test_ids_sequence_and_deadline_reach_the_model_code_inside() -> None:
    """Given a request with an id, sequence parameters and a timeout its model's queue
    policy lets it set,
    When its execution is scoped,
    Then inside, model code sees its id, its sequence (passed on to an ensemble's steps)
    and its deadline; outside, none of them."""
    served = _served(
        {"dynamic_batching": {"default_queue_policy": {"allow_timeout_override": True}}}
    )
    request = _request("r-1", sequence_id=7, sequence_start=True, timeout=5_000_000)
    with execution_scope(None, served, (request,)):
        assert known_request_ids() == ("r-1",)
        assert passed_sequence() == {"sequence_id": 7, "sequence_start": True}
        assert current_deadline() is not None
    assert known_request_ids() == ()
    assert passed_sequence() == {}
    assert current_deadline() is None


def test_a_batch_sets_every_members_id_and_passes_no_sequence() -> None:
    """Given a batch of two requests of different sequences,
    When its execution is scoped,
    Then model code sees both ids in order, and no one sequence is passed on."""
    members = (_request("a", sequence_id=1), _request("b", sequence_id=2))
    with execution_scope(None, _served(), members):
        assert known_request_ids() == ("a", "b")
        assert passed_sequence() == {}


def test_the_limiters_wait_is_what_the_scope_reports_as_held() -> None:
    """Given a version of one instance under the rate limiter, its instance held by
    another execution for 0.2 s,
    When this execution is scoped,
    Then it enters only once the instance is free, and reports that wait (queue time)."""
    limiter = RateLimiter()
    served = _served()
    limiter.register(("m", 1, "f"), 1, None)
    holding, release = threading.Event(), threading.Event()

    def other() -> None:
        with execution_scope(limiter, served, (_request(),)):
            holding.set()
            release.wait(5)

    thread = threading.Thread(target=other)
    thread.start()
    holding.wait(5)
    threading.Timer(0.2, release.set).start()
    started = time.perf_counter_ns()
    with execution_scope(limiter, served, (_request(),)) as held:
        entered = time.perf_counter_ns()
    thread.join(5)
    assert held.waited_ns >= 150_000_000
    assert held.waited_ns <= entered - started


def test_model_code_reads_each_requests_own_parameters_and_timeout() -> None:
    """Given a batch of two requests, one with a parameter of the client's own and a
    timeout, one with none,
    When their execution is scoped,
    Then inside, each request's parameters are known in order: model code is given the
    client's own (Triton's reserved ones left out) and the timeout; outside, none."""
    requests = (_request(temperature=0.5, timeout=2_000), _request())
    with execution_scope(None, _served(), requests):
        first, second = parameters_of(0), parameters_of(1)
        assert clients_own(first) == {"temperature": 0.5}
        assert timeout_us(first) == 2_000
        assert clients_own(second) == {} and timeout_us(second) == 0
    assert known_request_parameters() == ()
