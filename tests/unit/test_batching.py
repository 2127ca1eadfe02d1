from __future__ import annotations

import numpy as np
import pytest

from lambdaserve.batching.assembly import Batch, assemble, check_invariant, concatenate, split
from lambdaserve.errors import InferenceError
from lambdaserve.protocol.v2 import InferInput, InferRequest, RequestedOutput


def rows(count: int, width: int = 4, name: str = "x", start: float = 0.0) -> InferRequest:
    data = np.arange(count * width, dtype=np.float32).reshape(count, width) + start
    return InferRequest((InferInput(name, "FP32", data.shape, data),))


def test_compatible_requests_share_a_batch_up_to_the_max():
    requests = [rows(1) for _ in range(10)]
    batches = assemble(requests, max_batch_size=4)
    assert [b.size for b in batches] == [4, 4, 2]
    assert sorted(i for b in batches for i in b.members) == list(range(10))


def test_ragged_requests_go_in_separate_batches():
    requests = [rows(1, width=4), rows(1, width=3), rows(1, width=4), rows(2, width=3)]
    batches = assemble(requests, max_batch_size=8)
    assert {b.members for b in batches} == {(0, 2), (1, 3)}


def test_different_inputs_or_output_selections_do_not_mix():
    a, b = rows(1, name="a"), rows(1, name="b")
    only_y = InferRequest(rows(1, name="a").inputs, outputs=(RequestedOutput("y"),))
    batches = assemble([a, b, only_y, rows(1, name="a")], max_batch_size=8)
    assert {m.members for m in batches} == {(0, 3), (1,), (2,)}


def test_preferred_sizes_are_formed_when_the_rows_allow():
    requests = [rows(1) for _ in range(7)]
    batches = assemble(requests, max_batch_size=8, preferred_sizes=[4])
    assert [b.size for b in batches] == [4, 3]
    assert [b.size for b in assemble(requests, 8, preferred_sizes=[2, 4])] == [4, 2, 1]


def test_multi_row_requests_count_their_rows_and_never_exceed_the_max():
    requests = [rows(3), rows(3), rows(3), rows(1)]
    batches = assemble(requests, max_batch_size=7)
    assert all(b.size <= 7 for b in batches)
    assert sorted(i for b in batches for i in b.members) == [0, 1, 2, 3]
    assert batches[0] == Batch((0, 1, 3), (3, 3, 1))


def test_no_batching_when_the_model_does_not_batch():
    assert [b.members for b in assemble([rows(1), rows(1)], max_batch_size=0)] == [(0,), (1,)]


def test_a_request_at_or_over_the_max_runs_alone():
    batches = assemble([rows(1), rows(9), rows(1)], max_batch_size=8)
    assert {b.members for b in batches} == {(0, 2), (1,)}


def test_concatenate_then_split_gives_each_request_its_rows_back():
    requests = [rows(1, start=0), rows(2, start=100), rows(1, start=200)]
    merged = concatenate(requests)
    assert merged.inputs[0].data.shape == (4, 4)
    outputs = {"y": merged.inputs[0].data * 2}
    parts = split(outputs, [1, 2, 1])
    for part, request in zip(parts, requests, strict=True):
        np.testing.assert_array_equal(part["y"], request.inputs[0].data * 2)


def test_split_refuses_outputs_without_the_batch_dimension():
    with pytest.raises(InferenceError, match="batch dimension first"):
        split({"y": np.zeros((3,))}, [1, 1, 2])


def test_the_invariant_catches_lost_results():
    check_invariant(2, [1, 2])
    with pytest.raises(AssertionError, match="2 results for 3 requests"):
        check_invariant(3, [1, 2])
