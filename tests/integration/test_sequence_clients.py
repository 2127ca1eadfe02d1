"""Triton's sequence models driven with tritonclient as its sequence examples drive them
(two interleaved integer sequences and one string-id sequence, over HTTP, gRPC and gRPC's
stream) against a real `lambdaserve serve` and the dev stack's inference app; Triton's
sequence errors word for word; and one sequence whose steps alternate between two `serve`
processes sharing the catalog table (or between the infer function's direct path and a
`serve` task) gives one process's answers."""

from __future__ import annotations

import json
import queue
from collections.abc import Callable
from functools import partial

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests import sequence_models
from tests.integration.grpc_support import lambdaserve_serve

VALUES = [11, 7, 5, 3, 2, 0, 1]


def publish(stack) -> None:
    # a minute's idle limit: interleaved steps through a loaded machine's processes may be
    # seconds apart (at the examples' 5 s, a step found its sequence released under load)
    for name, files in sequence_models.every_model(idle_us=60_000_000).items():
        for path, body in files.items():
            stack.put(f"models/{name}/{path}", body)
    for name in sequence_models.every_model():
        stack.wait_state(name, 1, "READY")


@pytest.fixture
def published(stack):
    publish(stack)
    return stack


def three_sequences(dyna: bool, offset: int) -> list[tuple[str, int | str, list[int]]]:
    """The examples' three sequences: two with integer ids on the integer-id model, one with
    a string id on the running-sum model, each a first value then ``VALUES`` (signed)."""
    int_model = "simple_dyna_sequence" if dyna else "simple_sequence"
    return [
        (int_model, 1000 + offset * 2, [0, *VALUES]),
        (int_model, 1001 + offset * 2, [100, *(-v for v in VALUES)]),
        ("simple_string_dyna_sequence", str(1002 + offset), [20, *(-v for v in VALUES)]),
    ]


def expected(model: str, sequence_id: int | str, values: list[int]) -> list[int]:
    """What sequence_models says each model answers (its docstring's formulas)."""
    last = len(values) - 1
    if model == "simple_string_dyna_sequence":
        sums = list(np.cumsum(values))
        return [*sums[:-1], sums[-1] + int(sequence_id)]
    end = int(sequence_id) if model == "simple_dyna_sequence" else 0
    return [v + (i == 0) + (end if i == last else 0) for i, v in enumerate(values)]


def one_input(module, value: int):
    sent = module.InferInput("INPUT", [1, 1], "INT32")
    sent.set_data_from_numpy(np.full((1, 1), value, np.int32))
    return [sent]


def interleaved(
    client, module, sequences: list[tuple[str, int | str, list[int]]]
) -> list[list[int]]:
    """Each step of each sequence in turn, synchronously, as the sync examples send them."""
    got: list[list[int]] = [[] for _ in sequences]
    for step in range(len(VALUES) + 1):
        for index, (model, sequence_id, values) in enumerate(sequences):
            answer = client.infer(
                model,
                one_input(module, values[step]),
                sequence_id=sequence_id,
                sequence_start=step == 0,
                sequence_end=step == len(values) - 1,
            )
            got[index].append(int(answer.as_numpy("OUTPUT")[0][0]))
    return got


def streamed(url: str, sequences: list[tuple[str, int | str, list[int]]]) -> list[list[int]]:
    """Every step on one gRPC stream, each sequence sent whole before the next, the answers
    told apart by their request ids, as the stream example does."""
    import tritonclient.grpc as grpcclient

    answers: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        for index, (model, sequence_id, values) in enumerate(sequences):
            for step, value in enumerate(values):
                client.async_stream_infer(
                    model,
                    one_input(grpcclient, value),
                    request_id=f"{index}_{step}",
                    sequence_id=sequence_id,
                    sequence_start=step == 0,
                    sequence_end=step == len(values) - 1,
                )
        received = [answers.get(timeout=30) for _ in range(sum(len(s[2]) for s in sequences))]
        client.stop_stream()
    got: list[dict[int, int]] = [{} for _ in sequences]
    for result, error in received:
        assert error is None, error
        index, step = map(int, result.get_response().id.split("_"))
        got[index][step] = int(result.as_numpy("OUTPUT")[0][0])
    return [[by_step[s] for s in sorted(by_step)] for by_step in got]


def test_the_examples_sequences_are_answered_over_http_grpc_and_the_stream(published):
    import tritonclient.grpc as grpcclient

    # Given the three sequence models, and `lambdaserve serve` over the stack's catalog
    with lambdaserve_serve() as served:
        http = httpclient.InferenceServerClient(f"127.0.0.1:{served.http}")
        grpc = grpcclient.InferenceServerClient(served.grpc_url)
        doors: list[tuple[str, Callable]] = [
            ("http", partial(interleaved, http, httpclient)),
            ("grpc", partial(interleaved, grpc, grpcclient)),
            ("stream", partial(streamed, served.grpc_url)),
        ]
        # When each door runs the examples' three sequences, plain and dyna
        runs = {}
        for offset, (door, run) in enumerate(doors):
            for dyna in (False, True):
                sequences = three_sequences(dyna, offset * 2 + dyna)
                runs[door, dyna] = (sequences, run(sequences))
    # Then every answer is the model's, for every sequence, on every door
    for (door, dyna), (sequences, got) in runs.items():
        want = [expected(*sequence) for sequence in sequences]
        assert got == want, (door, dyna)


def test_tritons_sequence_errors_reach_tritonclient_word_for_word(published):
    # Given `serve`, and tritonclient over HTTP and gRPC
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    def inputs(module):
        sent = module.InferInput("INPUT", [1, 1], "INT32")
        sent.set_data_from_numpy(np.full((1, 1), 3, np.int32))
        return [sent]

    unknown = (
        "inference request for sequence 555 to model 'simple_sequence' must specify the START "
        "flag on the first request of the sequence"
    )
    with lambdaserve_serve() as served:
        http = httpclient.InferenceServerClient(f"127.0.0.1:{served.http}")
        grpc = grpcclient.InferenceServerClient(served.grpc_url)
        # When a step of a sequence never started is sent by each
        with pytest.raises(InferenceServerException) as by_http:
            http.infer("simple_sequence", inputs(httpclient), sequence_id=555)
        with pytest.raises(InferenceServerException) as by_grpc:
            grpc.infer("simple_sequence", inputs(grpcclient), sequence_id=555)
        # and a request with no sequence id at all
        with pytest.raises(InferenceServerException) as no_id:
            grpc.infer("simple_sequence", inputs(grpcclient))
    # Then each gets Triton's text, as a 400 and as INVALID_ARGUMENT
    assert (by_http.value.status(), by_http.value.message()) == ("400", unknown)
    assert by_grpc.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert by_grpc.value.message() == unknown
    assert no_id.value.message() == (
        "inference request to model 'simple_sequence' must specify a non-zero or non-empty "
        "correlation ID"
    )


def test_the_examples_sequences_are_answered_by_the_dev_stack(published):
    # Given the dev stack's inference app, and tritonclient over HTTP
    url = str(published.inference.base_url).removeprefix("http://").rstrip("/")
    sequences = three_sequences(dyna=True, offset=6)
    # When the examples' three sequences run against it
    got = interleaved(httpclient.InferenceServerClient(url), httpclient, sequences)
    # Then every answer is the model's
    assert got == [expected(*sequence) for sequence in sequences]


def test_steps_alternating_between_two_serve_processes_give_one_process_answers(published):
    # Given two `serve` processes (two tasks) sharing the catalog table, and one process
    model, values = "simple_string_dyna_sequence", [5, -2, 9, 4, -7, 3]

    def sequence(clients, sequence_id):
        got = []
        for index, value in enumerate(values):
            sent = httpclient.InferInput("INPUT", [1, 1], "INT32")
            sent.set_data_from_numpy(np.full((1, 1), value, np.int32))
            result = clients[index % len(clients)].infer(
                model,
                [sent],
                sequence_id=sequence_id,
                sequence_start=index == 0,
                sequence_end=index == len(values) - 1,
            )
            got.append(int(result.as_numpy("OUTPUT")[0][0]))
        return got

    with lambdaserve_serve() as one, lambdaserve_serve() as two:
        a = httpclient.InferenceServerClient(f"127.0.0.1:{one.http}")
        b = httpclient.InferenceServerClient(f"127.0.0.1:{two.http}")
        # When one sequence's steps alternate between them, and another runs on one alone
        alternating = sequence([a, b], "71")
        alone = sequence([a], "72")
    # Then the running sums are the same, and right
    sums = list(np.cumsum(values))
    assert alternating == [*sums[:-1], sums[-1] + 71]
    assert alone == [*sums[:-1], sums[-1] + 72]


def test_steps_alternating_between_the_infer_function_and_serve_give_one_process_answers(
    published,
):
    # Given the infer function's handler (its direct path) and a `serve` task, one catalog
    from lambdaserve.handlers import infer
    from lambdaserve.local.http_api_event import http_api_event
    from lambdaserve.processes.event_pump import LocalContext

    model, values = "simple_string_dyna_sequence", [8, 1, -4, 6]

    def body(value: int, index: int) -> dict:
        return {
            "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [value]}],
            "parameters": {
                "sequence_id": "90",
                "sequence_start": index == 0,
                "sequence_end": index == len(values) - 1,
            },
        }

    def by_lambda(value: int, index: int) -> int:
        event = http_api_event(
            "POST", f"/v2/models/{model}/infer", json.dumps(body(value, index)).encode()
        )
        answer = infer.api_handler(event, LocalContext("infer"))
        assert answer["statusCode"] == 200, answer
        return int(json.loads(answer["body"])["outputs"][0]["data"][0])

    with lambdaserve_serve() as served, httpx.Client(timeout=30) as client:

        def by_serve(value: int, index: int) -> int:
            url = f"http://127.0.0.1:{served.http}/v2/models/{model}/infer"
            answer = client.post(url, json=body(value, index))
            assert answer.status_code == 200, answer.text
            return int(answer.json()["outputs"][0]["data"][0])

        # When the steps alternate: Lambda, serve, Lambda, serve
        got = [(by_lambda, by_serve)[i % 2](v, i) for i, v in enumerate(values)]
    # Then the running sums are one process's, the END adding the id
    assert got == [8, 9, 5, 11 + 90]


def test_a_python_models_sequence_runs_in_its_worker_processes_under_serve(stack):
    # Given a Python model with implicit state, its code in worker processes (the default)
    for path, body in sequence_models.python_accumulator().items():
        stack.put(f"models/python_accumulator/{path}", body)
    stack.wait_state("python_accumulator", 1, "READY")
    with lambdaserve_serve() as served:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{served.http}")
        got = []
        # When a sequence's steps reach it over HTTP
        for index, value in enumerate([3, 4, 5]):
            sent = httpclient.InferInput("INPUT", [1, 1], "INT32")
            sent.set_data_from_numpy(np.full((1, 1), value, np.int32))
            result = client.infer(
                "python_accumulator",
                [sent],
                sequence_id=7,
                sequence_start=index == 0,
                sequence_end=index == 2,
            )
            got.append(int(result.as_numpy("OUTPUT")[0][0]))
    # Then its execute got START, the running sum, its requests' flags and correlation ID
    # (the worker process got them with the call), and gave back the next sum
    assert got == [4, 7, 12 + 7]
