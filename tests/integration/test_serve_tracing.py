"""Triton's trace extension on a real `lambdaserve serve --trace-config triton,file=...`, driven
by tritonclient as qa/L0_trace drives tritonserver: the settings over HTTP and gRPC, the trace
file moving refused, a model switched off by its own setting, and the trace file's records
after shutdown (Triton's JSON: identity, then timestamps in order; an ensemble's step traced
as its child, with its parent_id)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests import builders
from tests.integration.grpc_support import lambdaserve_serve

ENSEMBLE = b"""
platform: "ensemble"
input [{ name: "A" data_type: TYPE_FP32 dims: [ -1, 4 ] },
       { name: "B" data_type: TYPE_FP32 dims: [ -1, 4 ] }]
output [{ name: "S" data_type: TYPE_FP32 dims: [ -1, 4 ] }]
ensemble_scheduling { step [{
  model_name: "simple" model_version: -1
  input_map { key: "a" value: "A" } input_map { key: "b" value: "B" }
  output_map { key: "sum" value: "S" }
}] }
"""
ORDER = [
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
]


def _inputs(module, rows: int) -> list:
    inputs = []
    for name in ("a", "b"):
        tensor = module.InferInput(name, [rows, 4], "FP32")
        tensor.set_data_from_numpy(np.ones((rows, 4), np.float32))
        inputs.append(tensor)
    return inputs


def _traces(records: list[dict]) -> dict[int, dict]:
    """Each trace's identity and its timestamps by name, by trace id."""
    traces: dict[int, dict] = {}
    for record in records:
        trace = traces.setdefault(record["id"], {"stamps": []})
        if "model_name" in record:
            trace.update(record)
        for stamp in record.get("timestamps", []):
            trace["stamps"].append((stamp["name"], stamp["ns"]))
    return traces


def test_serve_traces_requests_into_tritons_trace_file(stack, tmp_path):
    # Given two models, and serve tracing every request to a file
    stack.put("models/simple/1/model.onnx", builders.onnx_add_sub())
    stack.put("models/quiet/1/model.onnx", builders.onnx_add_sub())
    stack.wait_state("simple", 1, "READY")
    stack.wait_state("quiet", 1, "READY")
    stack.put("models/ens/config.pbtxt", ENSEMBLE)
    stack.wait_state("ens", 1, "READY")
    file = tmp_path / "global_unittest.log"
    flags = ("--trace-config", f"triton,file={file}", "--trace-config", "level=TIMESTAMPS")
    with lambdaserve_serve(*flags, "--trace-config", "rate=1") as served:
        http = httpclient.InferenceServerClient(f"127.0.0.1:{served.http}")
        grpc = served.client()
        initial = {
            "trace_file": str(file),
            "trace_level": ["TIMESTAMPS"],
            "trace_rate": "1",
            "trace_count": "-1",
            "log_frequency": "0",
            "trace_mode": "triton",
        }
        # Then the server lists the extension, as Triton does
        assert "trace" in http.get_server_metadata()["extensions"]
        assert "trace" in grpc.get_server_metadata().extensions
        # And a model's settings are the global ones, over HTTP and gRPC
        assert http.get_trace_settings(model_name="simple") == initial
        assert http.get_trace_settings() == initial
        answer = grpc.get_trace_settings(model_name="simple", as_json=True)
        assert {k: v["value"] for k, v in answer["settings"].items()} == {
            k: v if isinstance(v, list) else [v] for k, v in initial.items()
        }
        # And the trace file cannot move, nor an unknown model be set
        for client in (http, grpc):
            with pytest.raises(InferenceServerException, match="trace file location can not"):
                client.update_trace_settings(model_name="simple", settings={"trace_file": "m.log"})
            with pytest.raises(InferenceServerException, match="Request for unknown model : nope"):
                client.get_trace_settings(model_name="nope")
        # When gRPC switches 'quiet' off, and requests come by both doors
        quiet = grpc.update_trace_settings(model_name="quiet", settings={"trace_level": ["OFF"]})
        assert list(quiet.settings["trace_level"].value) == ["OFF"]
        for index in range(3):
            http.infer("simple", _inputs(httpclient, 1), request_id=f"h{index}")
        grpc.infer("simple", _inputs(grpcclient, 2), request_id="g0")
        http.infer("quiet", _inputs(httpclient, 1))
        ens = httpclient.InferInput("A", [1, 4], "FP32"), httpclient.InferInput("B", [1, 4], "FP32")
        for tensor in ens:
            tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
        http.infer("ens", list(ens), request_id="e0")
        # And a cleared model setting takes the global one again
        cleared = http.update_trace_settings(model_name="quiet", settings={"trace_level": None})
        assert cleared == initial
    # Then (written at shutdown, log_frequency 0) the file holds simple's four traces
    traces = _traces(json.loads(file.read_text()))
    by_request = {t.get("request_id"): t for t in traces.values()}
    assert sorted(by_request, key=str) == [None, "e0", "g0", "h0", "h1", "h2"]
    for request_id, trace in by_request.items():
        assert trace["model_version"] == 1
        # the door's stamps around the data plane's, as Triton's frontends write them
        door = {"g0": "GRPC", None: None}.get(request_id, "HTTP")
        recv = ("WAITREAD" if door == "GRPC" else "RECV") if door else ""
        wrapped = [f"{door}_{recv}_START", f"{door}_{recv}_END", *ORDER]
        wrapped += [f"{door}_SEND_START", f"{door}_SEND_END"]
        names = [name for name, _ in trace["stamps"]]
        assert names == (wrapped if door else ORDER), request_id
        times = [ns for _, ns in trace["stamps"]]
        assert times == sorted(times)
    assert {by_request[r]["model_name"] for r in ("g0", "h0", "h1", "h2")} == {"simple"}
    # And the ensemble's step is its child: simple, with the ensemble's id as parent_id
    parent, child = by_request["e0"], by_request[None]
    assert (parent["model_name"], child["model_name"]) == ("ens", "simple")
    assert child["parent_id"] == parent["id"] and "parent_id" not in parent
    compute = dict(parent["stamps"])
    assert compute["COMPUTE_START"] <= child["stamps"][0][1] <= child["stamps"][-1][1]
    assert child["stamps"][-1][1] <= compute["COMPUTE_END"]


def test_a_bls_call_from_model_code_in_a_worker_is_traced_as_a_child(stack, tmp_path):
    # Given a Python model (run in a worker process) whose execute() calls "mlp" through BLS
    models = Path(__file__).parent.parent / "fixtures" / "python_models" / "bls_mlp"
    stack.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.put("models/bls_mlp/config.pbtxt", (models / "config.pbtxt").read_bytes())
    stack.put("models/bls_mlp/1/model.py", (models / "1" / "model.py").read_bytes())
    stack.wait_state("mlp", 1, "READY")
    stack.wait_state("bls_mlp", 1, "READY")
    file = tmp_path / "bls_trace.log"
    flags = ("--trace-config", f"triton,file={file}", "--trace-config", "level=TIMESTAMPS")
    with lambdaserve_serve(*flags, "--trace-config", "rate=1") as served:
        http = httpclient.InferenceServerClient(f"127.0.0.1:{served.http}")
        # When one request reaches it
        tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
        http.infer("bls_mlp", [tensor], request_id="b0")
    # Then its BLS call to mlp is a child trace, inside the caller's compute (L0_trace: 2
    # traces, one parent_id)
    traces = _traces(json.loads(file.read_text()))
    parent = next(t for t in traces.values() if t.get("request_id") == "b0")
    children = [t for t in traces.values() if "parent_id" in t]
    assert [(c["model_name"], c["parent_id"]) for c in children] == [("mlp", parent["id"])]
    assert [name for name, _ in children[0]["stamps"]] == ORDER
    compute = dict(parent["stamps"])
    assert compute["COMPUTE_START"] <= children[0]["stamps"][0][1]
    assert children[0]["stamps"][-1][1] <= compute["COMPUTE_END"]
