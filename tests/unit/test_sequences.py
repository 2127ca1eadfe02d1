"""Triton's sequence batcher with the state outside the instance: steps through the model
server against the catalog table (moto in-process), Triton's rules and error texts word for
word, implicit state, idle expiry, END, and two servers racing on one sequence."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace

import numpy as np
import orjson
import pytest

from lambdaserve.apps.v2_calls import V2Call, answer_v2
from lambdaserve.catalog.repository import ConfigKey, parse_key
from lambdaserve.config.model_config import build, parse_document
from lambdaserve.errors import InvalidInput, LambdaServeError, ModelNotReady
from lambdaserve.protocol.http_status import status_for
from lambdaserve.protocol.v2 import InferInput, InferRequest, RequestedOutput
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.serving.readiness import Readiness
from lambdaserve.serving.sequences.from_settings import sequence_steps_from
from lambdaserve.serving.sequences.records import SequenceConflict, SequenceKey
from lambdaserve.serving.sequences.steps import SequenceSteps
from lambdaserve.serving.server_batcher import server_batcher
from lambdaserve.wiring.inference import build_model_server
from tests import sequence_models
from tests.redis_server import redis_server
from tests.support import wait_until


def publish(aws, name: str, files: dict[str, bytes]) -> None:
    for path, body in files.items():
        aws.put(f"models/{name}/{path}", body)
    aws.services.registrar.reconcile_model(name)


def step(value: int, sequence_id, start=False, end=False, rows=1, outputs=()) -> InferRequest:
    data = np.full((rows, 1), value, np.int32)
    parameters = {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}
    return InferRequest(
        (InferInput("INPUT", "INT32", data.shape, data),),
        outputs=tuple(RequestedOutput(o) for o in outputs),
        parameters=parameters,
    )


def answer(server, model, request):
    return server.infer(model, None, request, lambda _served, outputs: outputs)


def values(server, model, sequence_id, inputs):
    got = []
    for index, value in enumerate(inputs):
        request = step(value, sequence_id, start=index == 0, end=index == len(inputs) - 1)
        got.append(int(answer(server, model, request)["OUTPUT"][0][0]))
    return got


@pytest.fixture
def server(aws):
    for name, files in sequence_models.every_model().items():
        publish(aws, name, files)
    return build_model_server(aws.settings, aws.clients)


def test_a_sequence_model_is_ready_and_its_config_says_sequence_batching(aws, server):
    # Given the three sequence models published / When the catalog is read
    states = {
        name: [v.state for v in aws.services.catalog.versions(name)]
        for name in sequence_models.every_model()
    }
    served = server.resolver.resolve("simple_dyna_sequence", None)
    # Then they serve, and the config Triton's clients read carries the block
    assert set(map(tuple, states.values())) == {("READY",)}
    document = served.config.to_triton_json()["sequence_batching"]
    assert document["max_sequence_idle_microseconds"] == 5_000_000
    assert [c["name"] for c in document["control_input"]] == ["START", "END", "READY", "CORRID"]
    assert document["control_input"][3]["control"][0]["data_type"] == "TYPE_UINT64"


def test_controls_reach_the_model_as_tritons_examples_expect(server):
    # Given tritonclient's example values / When two sequences run on each model
    seq = [0, 11, 7, 5, 3, 2, 0, 1]
    # Then START adds 1 on the first step, dyna adds the CORRID on the END step
    assert values(server, "simple_sequence", 1000, seq) == [1, 11, 7, 5, 3, 2, 0, 1]
    assert values(server, "simple_dyna_sequence", 1001, seq) == [1, 11, 7, 5, 3, 2, 0, 1002]


def test_implicit_state_carries_a_running_sum_and_stays_hidden(server):
    # Given the accumulator whose state is ACC_IN -> ACC_OUT, not listed under output
    got = values(server, "simple_string_dyna_sequence", "1002", [20, -11, -7, -1])
    # Then each step adds to the last, and END adds the string CORRID as a number
    assert got == [20, 9, 2, 1 + 1002]
    outputs = answer(server, "simple_string_dyna_sequence", step(5, "99", start=True))
    assert sorted(outputs) == ["OUTPUT"]


def test_two_sequences_interleaved_keep_their_own_state(server):
    model = "simple_string_dyna_sequence"
    answer(server, model, step(1, "7", start=True))
    answer(server, model, step(100, "8", start=True))
    a = answer(server, model, step(2, "7"))["OUTPUT"]
    b = answer(server, model, step(200, "8"))["OUTPUT"]
    assert (int(a[0][0]), int(b[0][0])) == (3, 300)


def test_a_step_without_start_gets_tritons_message_word_for_word(server):
    with pytest.raises(InvalidInput) as caught:
        answer(server, "simple_sequence", step(1, 77))
    assert caught.value.message == (
        "inference request for sequence 77 to model 'simple_sequence' must specify the "
        "START flag on the first request of the sequence"
    )


def test_a_request_without_a_sequence_id_gets_tritons_message(server):
    with pytest.raises(InvalidInput) as caught:
        answer(server, "simple_sequence", step(1, 0, start=True))
    assert caught.value.message == (
        "inference request to model 'simple_sequence' must specify a non-zero or non-empty "
        "correlation ID"
    )


def test_a_batch_of_two_rows_is_refused_as_triton_refuses_it(server):
    with pytest.raises(InvalidInput) as caught:
        answer(server, "simple_sequence", step(1, 5, start=True, rows=2))
    assert caught.value.message == (
        "inference request to model 'simple_sequence' must specify batch-size 1 due to "
        "requirements of sequence batcher"
    )


def test_end_forgets_the_sequence_and_a_start_reuses_its_id(server):
    values(server, "simple_sequence", 31, [1, 2])
    with pytest.raises(InvalidInput, match="must specify the START flag"):
        answer(server, "simple_sequence", step(1, 31))
    assert values(server, "simple_sequence", 31, [4, 5]) == [5, 5]


def test_a_start_for_a_sequence_in_flight_restarts_it_with_tritons_warning(server, caplog):
    model = "simple_string_dyna_sequence"
    answer(server, model, step(50, "5", start=True))
    with caplog.at_level("WARNING"):
        again = answer(server, model, step(4, "5", start=True))["OUTPUT"]
    assert int(again[0][0]) == 4
    assert (
        "sequence 5 for model 'simple_string_dyna_sequence' has a conflict. The previous "
        "sequence did not end before this sequence start. Previous sequence will be "
        "terminated early."
    ) in caplog.text


def test_the_idle_limit_is_one_second_unless_the_config_sets_it():
    # Given sequence_batching without max_sequence_idle_microseconds / When it is read
    config = build(parse_document("config.pbtxt", b"max_batch_size: 1 sequence_batching { }"), "m")
    # Then a sequence idle past Triton's default of 1 s is released
    assert config.sequence_batching.max_sequence_idle_us == 1_000_000


def test_a_sequence_idle_past_its_limit_is_released(aws, server):
    # Given a clock the test moves: 5 s idle allowed by the config
    now = [1_000_000_000]
    server.sequences = SequenceSteps(server.sequences.store, clock_us=lambda: now[0])
    answer(server, "simple_sequence", step(1, 9, start=True))
    now[0] += 4_000_000
    answer(server, "simple_sequence", step(1, 9))  # within the limit: goes on
    # When it then idles 5.1 s / Then the next step is refused as unknown
    now[0] += 5_100_000
    with pytest.raises(InvalidInput, match="must specify the START flag"):
        answer(server, "simple_sequence", step(1, 9))


def test_a_state_output_the_config_does_not_list_is_refused_as_triton_refuses_it(server):
    # Given the accumulator whose config lists OUTPUT only (its state ACC_OUT is not)
    model = "simple_string_dyna_sequence"
    # When a request names the state output
    with pytest.raises(InvalidInput) as caught:
        answer(server, model, step(6, "61", start=True, outputs=("OUTPUT", "ACC_OUT")))
    # Then Triton's words (qa/L0_implicit_state), and no step was applied
    assert caught.value.message.startswith(
        "unexpected inference output 'ACC_OUT' for model 'simple_string_dyna_sequence'"
    )
    assert int(answer(server, model, step(6, "61", start=True))["OUTPUT"][0][0]) == 6


def test_statistics_count_one_execution_per_step(server):
    values(server, "simple_sequence", 41, [1, 2, 3])
    stats = server.stats.snapshot("simple_sequence", 1)["model_stats"][0]
    assert (stats["execution_count"], stats["inference_count"]) == (3, 3)


@pytest.fixture(params=["dynamodb", "redis"])
def shared(request, aws):
    """Settings whose sequence store is the catalog table, or a real redis-server."""
    if request.param == "dynamodb":
        yield aws.settings
        return
    with redis_server() as found:
        yield replace(
            aws.settings, sequence_store="redis", redis_host=found.host, redis_port=found.port
        )


def test_two_servers_sharing_the_store_give_one_servers_answers(aws, server, shared):
    # Given two servers (two instances) over the same sequence store
    server = build_model_server(shared, aws.clients)
    other = build_model_server(shared, aws.clients)
    model, inputs = "simple_string_dyna_sequence", [3, 4, 5, 6, 7]
    # When the steps alternate between the two
    got = []
    for index, value in enumerate(inputs):
        request = step(value, "77", start=index == 0, end=index == len(inputs) - 1)
        got.append(int(answer((server, other)[index % 2], model, request)["OUTPUT"][0][0]))
    # Then the running sums are those of one process
    assert got == [3, 7, 12, 18, 25 + 77]


def test_racing_steps_are_each_applied_once(aws, server, shared):
    # Given eight instances loaded, about to apply one step each at once, and a sequence
    # started once they are (building them may take longer than its 5 s idle limit)
    model = "simple_string_dyna_sequence"
    server = build_model_server(shared, aws.clients)
    servers = [build_model_server(shared, aws.clients) for _ in range(8)]
    for each in servers:
        each.load(each.resolver.resolve(model, None))
    answer(server, model, step(0, "4242", start=True))
    barrier = threading.Barrier(len(servers))
    applied: list[int] = []
    errors: list[Exception] = []

    def apply(each, value):
        barrier.wait()
        try:
            answer(each, model, step(value, "4242"))
            applied.append(value)
        except LambdaServeError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=apply, args=(s, 1 << i)) for i, s in enumerate(servers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # When the running sum is read (the END step adds its id to it)
    total = int(answer(server, model, step(0, "4242", end=True))["OUTPUT"][0][0]) - 4242
    # Then every step that succeeded is in it exactly once and no other (each value is its
    # own bit), and a step that gave up was told it lost a race
    assert total == sum(applied)
    assert len(applied) + len(errors) == len(servers)
    assert all(isinstance(e, SequenceConflict) for e in errors)


def test_a_write_over_a_record_that_moved_on_is_a_conflict(aws, shared):
    # Given the shared store and a record two writers read
    store = sequence_steps_from(shared, aws.clients.dynamodb).store
    key = SequenceKey("m", 1, 5)
    from lambdaserve.serving.sequences.records import SequenceRecord

    first = SequenceRecord(1, 1, b"", "a")
    store.write(key, first, None)
    # When both write over it / Then the second is refused
    store.write(key, SequenceRecord(2, 2, b"", "b"), first)
    with pytest.raises(SequenceConflict):
        store.write(key, SequenceRecord(2, 3, b"", "c"), first)
    with pytest.raises(SequenceConflict):
        store.delete(key, first)
    assert store.read(key).token == "b"


def test_a_draining_server_refuses_new_sequences_and_finishes_those_in_flight(server):
    # Given a long-running server's plane with a sequence in flight
    plane = InferenceDataPlane(lambda: server, None, Readiness())
    model = "simple_string_dyna_sequence"
    asyncio.run(plane.infer(model, None, step(4, "11", start=True)))
    # When the server starts draining
    plane.readiness.drain()
    # Then a new START is refused with Triton's words, as UNAVAILABLE
    with pytest.raises(ModelNotReady) as caught:
        asyncio.run(plane.infer(model, None, step(1, "12", start=True)))
    assert caught.value.message == (
        "Server is stopping, scheduler for model has stopped accepting new inference requests"
    )
    assert status_for(caught.value) == 503
    # and the sequence in flight goes on to its END
    ended = asyncio.run(plane.infer(model, None, step(3, "11", end=True)))
    assert int(ended.outputs["OUTPUT"][0][0]) == 4 + 3 + 11


def test_metadata_lists_what_the_client_sends_and_gets_as_triton_does(server):
    # Given the accumulator (controls START, END, CORRID; state ACC_IN -> ACC_OUT)
    plane = InferenceDataPlane(lambda: server)
    # When its metadata is read
    metadata = asyncio.run(plane.model_metadata("simple_string_dyna_sequence", None))
    # Then only INPUT and OUTPUT are listed: the server fills the rest
    assert [t["name"] for t in metadata["inputs"]] == ["INPUT"]
    assert [t["name"] for t in metadata["outputs"]] == ["OUTPUT"]


def test_a_sequence_model_warms_up_on_a_one_step_sequence(server, caplog):
    # Given the accumulator, whose CORRID a zero (empty string) would fail to parse
    served = server.resolver.resolve("simple_string_dyna_sequence", None)
    # When it loads (and warms up)
    with caplog.at_level("WARNING"):
        server.load(served)
    # Then the warm-up ran on the controls of a real step, without failing
    assert not [r for r in caplog.records if "warm-up run failed" in r.getMessage()]


def test_oldest_runs_different_sequences_steps_in_one_execution_never_one_sequence_twice(
    aws, server
):
    # Given the accumulator under `oldest`, and three sequences started together
    oldest = "oldest { max_candidate_sequences: 4 preferred_batch_size: [ 4 ] }"
    publish(aws, "acc_oldest", sequence_models.simple_string_dyna_sequence("acc_oldest", oldest))
    starts = [step(v, sid, start=True) for v, sid in ((1, "1"), (10, "2"), (100, "3"))]
    started = server.infer_many("acc_oldest", None, starts)
    # When one call brings steps of all three, sequence 1 twice
    later = [step(2, "1"), step(20, "2"), step(5, "1"), step(300, "3")]
    results = server.infer_many("acc_oldest", None, later)
    # Then each sequence's sums are right, its second step after its first
    assert [int(r.outputs["OUTPUT"][0][0]) for r in started] == [1, 10, 100]
    assert [int(r.outputs["OUTPUT"][0][0]) for r in results] == [3, 30, 8, 400]
    # and the three sequences' steps ran as one execution each time, the repeat alone
    stats = server.stats.snapshot("acc_oldest", 1)["model_stats"][0]
    assert (stats["execution_count"], stats["inference_count"]) == (3, 7)
    assert sorted(int(b["batch_size"]) for b in stats["batch_stats"]) == [1, 3]


def test_a_state_starts_from_its_initial_state_data_file(aws, server):
    # Given the accumulator whose state starts from initial_state/acc_start (1000)
    publish(aws, "acc_file", sequence_models.simple_string_dyna_sequence("acc_file", start_at=1000))
    # When a sequence runs / Then its running sum starts from the file's value
    assert values(server, "acc_file", "5", [5, 6, -1]) == [1005, 1011, 1010 + 5]


def test_a_missing_or_misfit_initial_state_file_is_refused_at_publish(aws):
    # Given the accumulator's config naming a data file never uploaded
    files = sequence_models.simple_string_dyna_sequence("acc_missing", start_at=7)
    files.pop("initial_state/acc_start")
    publish(aws, "acc_missing", files)
    # Then the model's config is refused saying which file to upload, and where
    record = aws.services.catalog.get_model("acc_missing")
    assert "initial_state data_file 'acc_start', which is missing" in record.config_error
    # And a file of the wrong size says what the state needs
    aws.put("models/acc_missing/initial_state/acc_start", b"\0" * 6)
    aws.services.registrar.reconcile_model("acc_missing")
    record = aws.services.catalog.get_model("acc_missing")
    assert "has 6 bytes; state 'ACC_IN' (INT32 [1]) needs 4" in record.config_error


def test_an_initial_state_file_upload_is_a_model_level_file_of_the_layout():
    # Given the key of a state's data file / When the layout reads it
    parsed = parse_key("models/acc/initial_state/acc_start")
    # Then it is a model-level file (its upload re-reads the model's config), and a deeper
    # path under initial_state/ is not
    assert parsed == ConfigKey("acc", "initial_state/acc_start")
    assert parse_key("models/acc/initial_state/a/b") is None


def test_a_python_model_gets_the_controls_the_state_and_the_sequence(model_code_enabled):
    # Given a Python model whose config lists only INPUT and OUTPUT, with implicit state
    aws = model_code_enabled
    publish(aws, "python_accumulator", sequence_models.python_accumulator())
    server = build_model_server(aws.settings, aws.clients)
    # When a sequence runs / Then execute saw START and ACC_IN, and its ACC_OUT came back;
    # its requests' flags() and correlation_id() were the step's
    assert values(server, "python_accumulator", 64, [3, 4, 5]) == [4, 7, 12 + 64]


def test_a_control_the_model_does_not_take_is_refused_at_publish(aws):
    # Given simple_sequence's config over a model without a READY input
    files = sequence_models.simple_sequence()
    config = files["config.pbtxt"].replace(b'name: "simple_sequence"', b'name: "no_ready"')
    config = config.replace(b'name: "READY"', b'name: "READY_FLAG"')
    publish(aws, "no_ready", {"config.pbtxt": config, "1/model.onnx": files["1/model.onnx"]})
    # Then the version is never READY, and its reason names the missing input
    [version] = aws.services.catalog.versions("no_ready")
    assert version.state == "UNAVAILABLE"
    assert "control_input 'READY_FLAG' names input 'READY_FLAG', which the model" in version.reason


def test_a_sequence_model_is_never_answered_from_the_response_cache(aws, server):
    # Given the accumulator with response_cache { enable: true } (its config warns), served
    # as `serve` serves it: the plane's batcher, the cache asked before the batcher
    files = sequence_models.simple_string_dyna_sequence("acc_cached")
    files["config.pbtxt"] += b"response_cache { enable: true }\n"
    publish(aws, "acc_cached", files)
    warnings = aws.services.catalog.get_model("acc_cached").config_warnings
    assert any("response_cache is not applied to a sequence model" in w for w in warnings)

    async def run() -> list[int]:
        plane = InferenceDataPlane(lambda: server, server_batcher(lambda: server, 8))
        got = []
        # When one id runs two sequences whose second steps are the same request
        for inputs in ([5, 5], [1, 5]):
            for index, value in enumerate(inputs):
                request = step(value, "9", start=index == 0, end=index == 1)
                inferred = await plane.infer("acc_cached", None, request)
                got.append(int(inferred.outputs["OUTPUT"][0][0]))
        return got

    # Then the second sequence's second step ran on its own state, not from the cache
    assert asyncio.run(run()) == [5, 10 + 9, 1, 6 + 9]


def _state_objects(aws) -> list[str]:
    listed = aws.clients.s3.list_objects_v2(Bucket=aws.settings.bucket, Prefix="sequence-state/")
    return [entry["Key"] for entry in listed.get("Contents", [])]


def test_a_state_over_a_dynamodb_item_lives_in_s3_behind_a_pointer(aws):
    # Given a model whose implicit state is 480 KB (over DynamoDB's 400 KB item), two
    # servers (two instances) over the catalog table
    publish(aws, "wide_accumulator", sequence_models.wide_accumulator())
    one, other = (build_model_server(aws.settings, aws.clients) for _ in range(2))
    model, key = (
        "wide_accumulator",
        {"pk": {"S": "SEQUENCE#wide_accumulator#1"}, "sk": {"S": "S:w"}},
    )
    # When its steps alternate between the two
    got = [int(answer(one, model, step(5, "w", start=True))["OUTPUT"][0][0])]
    got.append(int(answer(other, model, step(7, "w"))["OUTPUT"][0][0]))
    item = aws.clients.dynamodb.get_item(TableName=aws.settings.table, Key=key)["Item"]
    kept = _state_objects(aws)
    got.append(int(answer(one, model, step(11, "w", end=True))["OUTPUT"][0][0]))
    # Then the running sum crossed instances through the state in S3: the item holds only
    # the object's key, the object the step before left was removed, and END removed the last
    assert got == [5, 12, 23]
    assert "state" not in item and kept == [item["state_key"]["S"]]
    assert kept[0].startswith("sequence-state/wide_accumulator/1/S:w/")
    assert _state_objects(aws) == []


def test_a_large_state_written_by_a_step_that_lost_its_race_is_not_kept(aws):
    # Given a record in the table, and a writer whose read has gone stale
    store = sequence_steps_from(aws.settings, aws.clients.dynamodb, lambda: aws.clients.s3).store
    from lambdaserve.serving.sequences.records import SequenceRecord

    key, large = SequenceKey("m", 1, 9), b"x" * 500_000
    first = SequenceRecord(1, 1, large, "a")
    store.write(key, first, None)
    store.write(key, SequenceRecord(2, 2, large, "b"), store.read(key))
    # When the stale writer writes its own large state
    with pytest.raises(SequenceConflict):
        store.write(key, SequenceRecord(2, 3, b"y" * 500_000, "c"), first)
    # Then only the winner's state is in S3, and it is what a read gets
    winner = store.read(key)
    assert winner is not None and winner.state == large and winner.token == "b"
    assert _state_objects(aws) == [winner.state_ref]


ENSEMBLE = b"""
name: "acc_ensemble"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [ {
  model_name: "simple_string_dyna_sequence" model_version: -1
  input_map { key: "INPUT" value: "IN" } output_map { key: "OUTPUT" value: "OUT" }
} ] }
"""


def ensemble_step(value: int, sequence_id: str, start=False, end=False) -> InferRequest:
    data = np.full((1, 1), value, np.int32)
    parameters = {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}
    return InferRequest((InferInput("IN", "INT32", data.shape, data),), parameters=parameters)


def test_an_ensemble_passes_its_requests_sequence_to_its_sequence_model(aws, server):
    # Given an ensemble whose step is the accumulator (implicit state)
    publish(aws, "acc_ensemble", {"config.pbtxt": ENSEMBLE})
    inputs = [20, -11, -7, -1]
    # When a sequence's steps go through the ensemble
    got = [
        int(answer(server, "acc_ensemble", ensemble_step(v, "31", i == 0, i == 3))["OUT"][0][0])
        for i, v in enumerate(inputs)
    ]
    # Then the composing model ran them as one sequence's steps (END adds the id 31), and a
    # step of no started sequence gets Triton's message from the step
    assert got == [20, 9, 2, 1 + 31]
    with pytest.raises(InvalidInput) as caught:
        answer(server, "acc_ensemble", ensemble_step(1, "32"))
    assert "must specify the START flag on the first request" in caught.value.message


def test_an_ensembles_requests_of_two_sequences_in_one_batch_keep_their_sequences(aws, server):
    # Given the ensemble, and two sequences' steps arriving together (a batcher's lane)
    publish(aws, "acc_ensemble", {"config.pbtxt": ENSEMBLE})

    def together(*requests):
        results = server.infer_many("acc_ensemble", None, list(requests))
        return [int(r.outputs["OUT"][0][0]) if r.outputs else r.error for r in results]

    # When each pair runs as one call / Then each step continued its own sequence
    assert together(ensemble_step(5, "71", True), ensemble_step(100, "72", True)) == [5, 100]
    assert together(ensemble_step(1, "71"), ensemble_step(2, "72")) == [6, 102]


def test_a_sequence_keeps_its_instance_so_state_in_the_model_stays_right(model_code_enabled):
    # Given a Python model with two instances (worker processes, as serve and dev run model
    # code) that keeps each sequence's sum in self
    aws = model_code_enabled
    publish(aws, "python_sum_in_self", sequence_models.python_sum_in_self(count=2))
    server = build_model_server(replace(aws.settings, code_workers=True), aws.clients)
    values(server, "python_sum_in_self", 1, [0])  # loads it: its second worker starts after
    [(_, _, loaded)] = server.residency.loaded_models()
    wait_until(lambda: len(loaded.describe()) == 2, 60)
    # When six sequences run their steps at once
    inputs = [1, 2, 3, 4, 5, 6, 7, 8]
    got: dict[int, list[int]] = {}

    def run(sequence_id: int) -> None:
        got[sequence_id] = values(server, "python_sum_in_self", sequence_id, inputs)

    threads = [threading.Thread(target=run, args=(100 + i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    server.residency.close()
    # Then every sequence's sums are its own (each stayed on the instance it started on)
    expected = [sum(inputs[: i + 1]) for i in range(len(inputs))]
    assert got == {100 + i: expected for i in range(6)}


def test_a_python_sequence_model_without_implicit_state_is_told_where_self_is_not_kept(
    model_code_enabled,
):
    # Given Python sequence models: one keeping its sum in self, one in implicit state
    aws = model_code_enabled
    publish(aws, "python_sum_in_self", sequence_models.python_sum_in_self(count=2))
    publish(aws, "python_accumulator", sequence_models.python_accumulator())
    # When they are recorded / Then the one without implicit state is warned where its
    # memory is not one (the infer function, serve --workers N), the other is not
    warned = " | ".join(aws.services.catalog.get_model("python_sum_in_self").config_warnings)
    assert "sequence_batching without implicit state" in warned
    assert "infer function" in warned and "--workers N" in warned
    kept = aws.services.catalog.get_model("python_accumulator").config_warnings
    assert not any("implicit state" in w for w in kept)


def test_a_draining_server_without_batching_refuses_new_sequences_over_v2_http(server):
    # Given `serve --no-batching`'s plane (no dynamic batcher), draining
    plane = InferenceDataPlane(lambda: server, None, Readiness())
    plane.readiness.drain()
    body = orjson.dumps(
        {
            "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [1]}],
            "parameters": {"sequence_id": "13", "sequence_start": True},
        }
    )
    # When a new sequence's START comes over v2 HTTP / Then it is refused as on every door
    with pytest.raises(ModelNotReady, match="stopped accepting new inference requests"):
        asyncio.run(answer_v2(plane, V2Call("simple_string_dyna_sequence", None, body, None)))
