"""Triton's trace settings (qa/L0_trace/trace_endpoint_test.py and test.sh's settings checks,
ported to the domain): model settings inherit the global ones until set, follow the global
ones where they set nothing, and clearing takes a field back from the level above; the trace
file cannot move; sampling by rate and count; traces written as Triton's files hold them."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from lambdaserve.apps.v2_calls import V2Call, answer_v2
from lambdaserve.errors import InvalidInput, SettingFixed
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.tracing.config import TraceConfig, trace_config
from lambdaserve.tracing.request_trace import computed
from lambdaserve.tracing.tracer import Tracer
from lambdaserve.tracing.wire import rendered, setting_update
from lambdaserve.wiring.inference import build_model_server
from tests import builders

UNITTEST = trace_config(["triton,file=global_unittest.log", "level=TIMESTAMPS", "rate=1"])
INITIAL = {
    "trace_file": "global_unittest.log",
    "trace_level": ["TIMESTAMPS"],
    "trace_rate": "1",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_mode": "triton",
}


def post(tracer: Tracer, model: str | None, body: dict, grpc: bool = False) -> dict:
    tracer.update(model, setting_update(body, grpc))
    return get(tracer, model)


def get(tracer: Tracer, model: str | None) -> dict:
    return rendered(tracer.scopes.setting(model))


def test_model_settings_are_the_global_ones_until_set():
    tracer = Tracer(UNITTEST)
    assert get(tracer, "simple") == INITIAL
    assert get(tracer, None) == INITIAL


def test_the_trace_file_cannot_move_through_the_api():
    tracer = Tracer(UNITTEST)
    with pytest.raises(SettingFixed, match="trace file location can not be updated"):
        post(tracer, "simple", {"trace_file": "model.log"})
    assert get(tracer, "simple") == INITIAL


def test_a_global_update_reaches_models_that_did_not_set_the_field():
    # Given a model that set only its log frequency
    tracer = Tracer(UNITTEST)
    post(tracer, "simple", {"log_frequency": "34"})
    # When the global level changes
    answer = post(tracer, None, {"trace_level": ["TIMESTAMPS", "TENSORS"]})
    # Then the model takes it, and keeps its own log frequency
    assert answer["trace_level"] == ["TIMESTAMPS", "TENSORS"]
    model = get(tracer, "simple")
    assert model["trace_level"] == ["TIMESTAMPS", "TENSORS"]
    assert model["log_frequency"] == "34"


@pytest.mark.parametrize("grpc", [False, True])
def test_clearing_takes_values_back_from_the_level_above(grpc):
    # Given (test_http_clear_settings) a model with rate and log frequency, a global update
    tracer = Tracer(UNITTEST)
    post(tracer, "simple", {"trace_rate": "12", "log_frequency": "34"})
    post(tracer, None, {"trace_rate": "56", "trace_count": "78", "trace_level": ["OFF"]})
    clear = [] if grpc else None
    # When the global rate and count are cleared: the command line's come back
    expected_global = {**INITIAL, "trace_level": ["OFF"]}
    assert post(tracer, None, {"trace_rate": clear, "trace_count": clear}, grpc) == expected_global
    assert get(tracer, "simple") == {**expected_global, "trace_rate": "12", "log_frequency": "34"}
    # When the model's rate and level are cleared: the global's
    answer = post(tracer, "simple", {"trace_rate": clear, "trace_level": clear}, grpc)
    assert answer == {**expected_global, "log_frequency": "34"}
    assert get(tracer, None) == expected_global


def test_a_model_whose_fields_are_all_cleared_uses_the_global_setting_again():
    tracer = Tracer(UNITTEST)
    post(tracer, "simple", {"trace_level": ["OFF"]})
    assert get(tracer, "simple")["trace_level"] == ["OFF"]
    assert post(tracer, "simple", {"trace_level": None}) == INITIAL
    assert tracer.scopes.setting("simple") is tracer.scopes.setting(None)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"trace_level": ["OFF", "TIMESTAMPS"]}, "Expect only one trace level 'OFF' is specified"),
        ({"trace_rate": "x"}, "Unable to parse 'trace_rate', got: x"),
        ({"trace_count": "-2"}, "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"),
        ({"trace_count": "10000000000"}, "Unable to parse 'trace_count', value is out of range"),
        ({"trace_rate": "10000000000"}, "Unable to parse 'trace_rate', value is out of range"),
        ({"log_frequency": "10000000000"}, "Unable to parse 'log_frequency', value is out of"),
        ({"trace_rate": 5}, 'trace_rate is a string in Triton\'s trace API, e.g. "trace_rate"'),
        ({"trace_level": "TIMESTAMPS"}, "trace_level is a list of strings"),
        ({"trace_rate": "0"}, "Attempting to set invalid trace setting :sample rate must be"),
    ],
)
def test_bad_values_are_refused_in_tritons_words(body, message):
    tracer = Tracer(UNITTEST)
    with pytest.raises(InvalidInput) as refused:
        post(tracer, "simple", body)
    assert message in refused.value.message
    assert get(tracer, "simple") == INITIAL


def test_turning_tracing_on_without_a_trace_file_is_refused():
    tracer = Tracer(TraceConfig())
    with pytest.raises(InvalidInput, match="invalid trace setting :trace file name is not given"):
        post(tracer, None, {"trace_level": ["TIMESTAMPS"]})


def _request() -> InferRequest:
    data = np.arange(4, dtype=np.float32).reshape(1, 4)
    return InferRequest(inputs=(InferInput("a", "FP32", (1, 4), data),), id="r1")


def _traced(tracer: Tracer, model: str, outputs: dict | None = None) -> bool:
    """One request through the hooks the data plane and the serving code call."""
    request = _request()
    trace = tracer.start(model, request)
    if trace is None:
        return False
    tracer.queued(trace, request)
    computed([request], (1, 2, 3, 4), [outputs or {"sum": np.ones((1, 4), np.float32)}])
    tracer.finish(trace, request, 1)
    return True


def test_rate_traces_every_nth_request_and_count_stops_it(tmp_path):
    # Given every 2nd request traced, 3 traces at most
    file = tmp_path / "t.json"
    tracer = Tracer(trace_config([f"triton,file={file}", "level=TIMESTAMPS", "rate=2", "count=3"]))
    # When 10 requests come
    traced = [_traced(tracer, "simple") for _ in range(10)]
    # Then the 2nd, 4th and 6th were traced and the count reads 0
    assert traced == [False, True, False, True, False, True] + [False] * 4
    assert get(tracer, "simple")["trace_count"] == "0"
    tracer.close()
    assert len([r for r in json.loads(file.read_text()) if "model_name" in r]) == 3


def test_traces_hold_tritons_records_in_order(tmp_path):
    file = tmp_path / "t.json"
    tracer = Tracer(trace_config([f"triton,file={file}", "level=TIMESTAMPS", "rate=1"]))
    _traced(tracer, "simple")
    assert not file.exists()  # log_frequency 0: written at shutdown, as Triton does
    tracer.close()
    records = json.loads(file.read_text())
    head, *stamps = records
    assert head == {
        "id": head["id"],
        "model_name": "simple",
        "model_version": 1,
        "request_id": "r1",
    }
    names = [r["timestamps"][0]["name"] for r in stamps]
    assert names == [
        "REQUEST_START",
        "QUEUE_START",
        "COMPUTE_START",
        "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START",
        "COMPUTE_END",
        "REQUEST_END",
    ]
    assert all(r["id"] == head["id"] for r in stamps)


def test_tensors_alone_are_written_without_timestamps_as_triton_writes_them(tmp_path):
    file = tmp_path / "t.json"
    tracer = Tracer(trace_config([f"triton,file={file}", "level=TENSORS", "rate=1"]))
    _traced(tracer, "simple")
    tracer.close()
    assert {r["activity"] for r in json.loads(file.read_text())} == {
        "TENSOR_QUEUE_INPUT",
        "TENSOR_BACKEND_OUTPUT",
    }


def test_tensors_level_writes_inputs_and_outputs_as_triton_does(tmp_path):
    file = tmp_path / "t.json"
    levels = ["level=TIMESTAMPS", "level=TENSORS"]
    tracer = Tracer(trace_config([f"triton,file={file}", *levels, "rate=1"]))
    _traced(tracer, "simple", {"sum": np.array([[0.5, 1.25]], np.float32)})
    tracer.close()
    tensors = [r for r in json.loads(file.read_text()) if "activity" in r]
    assert [(t["activity"], t["tensor"]) for t in tensors] == [
        ("TENSOR_QUEUE_INPUT", {"name": "a", "data": "0,1,2,3", "shape": "1,4", "dtype": "FP32"}),
        (
            "TENSOR_BACKEND_OUTPUT",
            {"name": "sum", "data": "0.5,1.25", "shape": "1,2", "dtype": "FP32"},
        ),
    ]


def test_log_frequency_writes_numbered_files_and_the_rest_at_shutdown(tmp_path):
    # Given (L0_trace) a model logging every 2 traces of global rate 6
    file = tmp_path / "global_trace.log"
    tracer = Tracer(trace_config([f"triton,file={file}", "level=TIMESTAMPS", "rate=6"]))
    post(tracer, "simple", {"log_frequency": "2"})
    # When 20 requests come: 3 traced
    for _ in range(20):
        _traced(tracer, "simple")
    # Then the first 2 are in .0 at once, the 3rd in .1 at shutdown, none in the main file
    tracer.flush()
    assert len(json.loads((tmp_path / "global_trace.log.0").read_text())) == 2 * 8
    assert not (tmp_path / "global_trace.log.1").exists()
    tracer.close()
    assert len(json.loads((tmp_path / "global_trace.log.1").read_text())) == 8
    assert not file.exists()


def test_a_count_that_runs_out_writes_its_traces_to_a_numbered_file(tmp_path):
    # Given (L0_trace "Update trace count") 10 traced requests, then a count of 5
    file = tmp_path / "global_count.log"
    tracer = Tracer(trace_config([f"triton,file={file}", "level=TIMESTAMPS", "rate=1"]))
    for _ in range(10):
        _traced(tracer, "simple")
    post(tracer, None, {"trace_count": "5"})
    for _ in range(10):
        _traced(tracer, "simple")
    # Then the count's 5 went to .0 when it ran out, the first 10 to the main file
    tracer.flush()
    assert len(json.loads((tmp_path / "global_count.log.0").read_text())) == 5 * 8
    tracer.close()
    assert len(json.loads(file.read_text())) == 10 * 8


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["mode=zipkin"], 'trace modes are "triton" and "opentelemetry"'),
        (["level=LOUD"], "trace levels are OFF, TIMESTAMPS and TENSORS"),
        (["rate=often"], "'often' is not a whole number"),
        ([",file=x"], "no trace mode before the comma"),
        (["triton,file"], "--trace-config takes <mode>,<setting>=<value>"),
        (["triton,color=red"], "triton's settings are file and log-frequency"),
    ],
)
def test_bad_trace_flags_name_the_fix(flags, message):
    with pytest.raises(InvalidInput, match=message):
        trace_config(flags)


def test_flags_read_as_tritonserver_reads_them():
    config = trace_config(
        [
            "triton,file=a.json",
            "triton,log-frequency=50",
            "rate=100",
            "level=TIMESTAMPS",
            "count=7",
        ],
        trace_file="old.json",
        trace_levels=["TENSORS"],
        trace_rate=3,
    )
    assert config == TraceConfig(("TIMESTAMPS", "TENSORS"), 100, 7, 50, "a.json")
    assert trace_config([], trace_file="b", trace_levels=["TIMESTAMPS", "OFF"]).levels == ()


def test_serve_and_dev_take_the_trace_flags_into_the_environment():
    from lambdaserve.cli import _parser
    from lambdaserve.processes.trace_flags import trace_env
    from lambdaserve.tracing.config import config_from_env

    for command in ("serve", "dev"):
        args = _parser().parse_args(
            [command, "--trace-config", "level=TIMESTAMPS", "--trace-file", "t"]
        )
        env = trace_env(args)
        assert config_from_env(env) == TraceConfig(levels=("TIMESTAMPS",), file="t")
    assert trace_env(_parser().parse_args(["serve"])) == {}


def test_a_trace_file_shared_by_several_serve_workers_is_refused(capsys):
    from lambdaserve.cli import main

    assert main(["serve", "--workers", "2", "--trace-config", "triton,file=t.json"]) == 2
    assert "trace with --workers 1" in capsys.readouterr().err


def test_a_trace_that_ends_after_shutdown_never_overwrites_the_file(tmp_path):
    # Given a trace file written at shutdown, and a request still running then
    file = tmp_path / "t.json"
    tracer = Tracer(trace_config([f"triton,file={file}", "level=TIMESTAMPS", "rate=1"]))
    _traced(tracer, "simple")
    late = _request()
    trace = tracer.start("simple", late)
    assert trace is not None
    tracer.close()
    # When it ends afterwards
    tracer.finish(trace, late, 1)
    # Then the file still holds the first trace, whole
    assert len(json.loads(file.read_text())) == 8


def test_tracing_turned_on_through_the_api_traces_from_then_on(tmp_path):
    # Given (L0_trace "trace_off_to_min") a server started with level=OFF and a file
    file = tmp_path / "trace_off_to_min.log"
    tracer = Tracer(trace_config([f"triton,file={file}", "level=OFF", "rate=1"]))
    assert not any(_traced(tracer, "simple") for _ in range(5))
    # When the API turns TIMESTAMPS on
    assert post(tracer, None, {"trace_level": ["TIMESTAMPS"]})["trace_file"] == str(file)
    # Then the requests after it are traced, and only they
    assert all(_traced(tracer, "simple") for _ in range(20))
    tracer.close()
    assert sum("model_name" in r for r in json.loads(file.read_text())) == 20


def test_a_model_switched_off_then_cleared_traces_under_its_own_rate_again(tmp_path):
    # Given (L0_trace "Update and clear model specific setting") global rate 6, simple rate 1
    file = tmp_path / "global_trace.log"
    tracer = Tracer(trace_config([f"triton,file={file}", "level=TIMESTAMPS", "rate=6"]))
    post(tracer, "simple", {"trace_rate": "1"})
    answer = post(tracer, "simple", {"trace_level": ["OFF"]})
    assert (answer["trace_level"], answer["trace_rate"]) == (["OFF"], "1")
    assert not any(_traced(tracer, "simple") for _ in range(20))
    # When its level is cleared: the global level, its own rate
    answer = post(tracer, "simple", {"trace_level": None})
    assert (answer["trace_level"], answer["trace_rate"]) == (["TIMESTAMPS"], "1")
    assert all(_traced(tracer, "simple") for _ in range(10))
    tracer.close()
    assert sum("model_name" in r for r in json.loads(file.read_text())) == 10


def test_the_trace_file_is_json_when_log_frequency_changes_at_run_time(tmp_path):
    # Given traces held for shutdown (log frequency 0), two of them taken
    file = tmp_path / "t.json"
    tracer = Tracer(trace_config([f"triton,file={file}", "level=TIMESTAMPS", "rate=1"]))
    _traced(tracer, "simple")
    _traced(tracer, "simple")
    # When the log frequency changes at run time (the setting holding them is replaced)
    post(tracer, None, {"log_frequency": "5"})
    tracer.flush()
    # Then the file holds both traces and reads as JSON now, not only after shutdown
    assert len([r for r in json.loads(file.read_text()) if "model_name" in r]) == 2
    # and traces flushed into it later keep it JSON, shutdown included
    post(tracer, None, {"log_frequency": "0"})
    _traced(tracer, "simple")
    post(tracer, None, {"log_frequency": "5"})
    tracer.flush()
    assert len([r for r in json.loads(file.read_text()) if "model_name" in r]) == 3
    tracer.close()
    assert len([r for r in json.loads(file.read_text()) if "model_name" in r]) == 3


def test_v2_http_without_batching_is_traced_as_with_it(aws, tmp_path):
    # Given `serve --no-batching`'s plane (no dynamic batcher) tracing every request
    aws.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    aws.services.registrar.reconcile_model("mlp")
    file = tmp_path / "t.json"
    tracer = Tracer(trace_config([f"triton,file={file}", "level=TIMESTAMPS", "rate=1"]))
    server = build_model_server(aws.settings, aws.clients)
    plane = InferenceDataPlane(lambda: server, None, tracer=tracer)
    body = json.dumps(
        {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1] * 4}]}
    ).encode()
    # When a v2 request comes over HTTP
    asyncio.run(answer_v2(plane, V2Call("mlp", None, body, None)))
    tracer.close()
    # Then its trace is written, with the compute stamps, as a batched server writes it
    records = json.loads(file.read_text())
    assert [r["model_name"] for r in records if "model_name" in r] == ["mlp"]
    stamps = {t["name"] for r in records for t in r.get("timestamps", [])}
    assert {"QUEUE_START", "COMPUTE_START", "COMPUTE_END"} <= stamps, stamps
