"""`lambdaserve serve --trace-config mode=opentelemetry`: a request's spans reach an OTLP/HTTP
collector (a small local receiver here, reading OTLP's protobuf as collectors do) under the
caller's W3C traceparent, as Triton's OpenTelemetry mode sends them: InferRequest, the
model's span with Triton's timestamps as events, and compute."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests import builders
from tests.integration.grpc_support import lambdaserve_serve

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


class Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver: each exported span as a dict, ids in hex."""

    received: list[dict] = []
    resources: list[dict] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        assert self.path == "/v1/traces"
        assert self.headers["Content-Type"] == "application/x-protobuf"
        export = ExportTraceServiceRequest.FromString(body)
        for resource in export.resource_spans:
            attributes = {a.key: a.value.string_value for a in resource.resource.attributes}
            Collector.resources.append(attributes)
            for scope in resource.scope_spans:
                Collector.received.extend(_span(span) for span in scope.spans)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _span(span) -> dict:
    return {
        "traceId": span.trace_id.hex(),
        "spanId": span.span_id.hex(),
        "parentSpanId": span.parent_span_id.hex(),
        "name": span.name,
        "events": [{"name": e.name} for e in span.events],
        "startTimeUnixNano": span.start_time_unix_nano,
        "endTimeUnixNano": span.end_time_unix_nano,
    }


def _inputs(module, rows: int) -> list:
    inputs = []
    for name in ("a", "b"):
        tensor = module.InferInput(name, [rows, 4], "FP32")
        tensor.set_data_from_numpy(np.ones((rows, 4), np.float32))
        inputs.append(tensor)
    return inputs


def test_spans_reach_an_otlp_collector_under_the_callers_traceparent(stack):
    # Given a collector, a model, and serve in OpenTelemetry mode tracing every 1000th request
    Collector.received, Collector.resources = [], []
    collector = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{collector.server_port}/v1/traces"
    stack.put("models/simple/1/model.onnx", builders.onnx_add_sub())
    stack.wait_state("simple", 1, "READY")
    flags = ["--trace-config", "mode=opentelemetry", "--trace-config", f"opentelemetry,url={url}"]
    flags += ["--trace-config", "level=TIMESTAMPS", "--trace-config", "opentelemetry,resource=a=b"]
    traceparent = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
    try:
        with lambdaserve_serve(*flags) as served:
            http = httpclient.InferenceServerClient(f"127.0.0.1:{served.http}")
            settings = http.get_trace_settings()
            assert (settings["trace_mode"], settings["trace_rate"]) == ("opentelemetry", "1000")
            # When one request carries a traceparent over HTTP, one over gRPC, one none
            http.infer("simple", _inputs(httpclient, 1), headers={"traceparent": traceparent})
            grpc = served.client()
            grpc.infer("simple", _inputs(grpcclient, 1), headers={"traceparent": traceparent})
            http.infer("simple", _inputs(httpclient, 1), request_id="untraced")
    finally:
        collector.shutdown()
    # Then (sent at shutdown at the latest) both traced requests' spans are the caller's
    spans = Collector.received
    assert {r["service.name"] for r in Collector.resources} == {"triton-inference-server"}
    assert all(r["a"] == "b" for r in Collector.resources)
    roots = [s for s in spans if s["name"] == "InferRequest"]
    assert len(roots) == 2
    assert {s["traceId"] for s in spans} == {CALLER_TRACE}
    assert all(root["parentSpanId"] == CALLER_SPAN for root in roots)
    by_id = {s["spanId"]: s for s in spans}
    models = [s for s in spans if s["name"] == "simple"]
    computes = [s for s in spans if s["name"] == "compute"]
    assert len(models) == len(computes) == 2
    assert all(by_id[m["parentSpanId"]]["name"] == "InferRequest" for m in models)
    assert all(by_id[c["parentSpanId"]]["name"] == "simple" for c in computes)
    assert [e["name"] for e in models[0]["events"]] == [
        "REQUEST_START",
        "QUEUE_START",
        "REQUEST_END",
    ]
    door = sorted(e["name"] for root in roots for e in root["events"])
    stamps = ("RECV_START", "RECV_END", "SEND_START", "SEND_END")
    grpc_stamps = [s.replace("RECV", "WAITREAD") for s in stamps]
    assert door == sorted([f"HTTP_{s}" for s in stamps] + [f"GRPC_{s}" for s in grpc_stamps])
    assert [e["name"] for e in computes[0]["events"]] == [
        "COMPUTE_START",
        "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START",
        "COMPUTE_END",
    ]
    for span in spans:
        assert int(span["startTimeUnixNano"]) <= int(span["endTimeUnixNano"])
