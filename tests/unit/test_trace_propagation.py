"""The trace context from hop to hop (tracing/propagation.py): W3C traceparent and X-Ray's
header as one context, the batcher's and the batch invoke's spans recorded in each queued
request's own trace, and the forwarded request's traceparent."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lambdaserve.forwarding.forwarder import HttpCall, ServerModeRouter
from lambdaserve.queued.inference import QueuedInference, QueueMessage, message_trace
from lambdaserve.queued.invokers import LambdaInvoker
from lambdaserve.tracing import propagation
from lambdaserve.tracing.propagation import (
    CURRENT,
    TraceContext,
    from_headers,
    from_traceparent,
    from_xray,
)
from tests import builders
from tests.unit.test_queued_delivery import SizeLimitedLambda, _envelope

TRACE, SPAN = "5759e988bd862e3fe1be46a994272793", "53995c3f42cd8ad8"


def test_traceparent_and_xray_header_are_one_context():
    # Given a W3C traceparent
    context = from_traceparent(f"00-{TRACE}-{SPAN}-01")
    # Then its X-Ray spelling holds the same ids, and reads back to the same context
    assert context == TraceContext(TRACE, SPAN, True)
    assert (
        context.xray_header == f"Root=1-5759e988-bd862e3fe1be46a994272793;Parent={SPAN};Sampled=1"
    )
    assert from_xray(context.xray_header) == context
    assert from_xray(f"Root=1-5759e988-bd862e3fe1be46a994272793;Parent={SPAN};Sampled=0") == (
        TraceContext(TRACE, SPAN, False)
    )


@pytest.mark.parametrize(
    "header",
    [None, "", "01-" + TRACE + "-" + SPAN + "-01", f"00-{'0' * 32}-{SPAN}-01", "00-xyz", "Root=1"],
)
def test_a_malformed_header_is_ignored(header):
    assert from_traceparent(header) is None
    assert from_xray(header) is None


def test_api_gateways_root_alone_starts_the_trace_and_a_traceparent_wins():
    # Given API Gateway's header (a root, no parent) and a caller's traceparent
    gateway = {"x-amzn-trace-id": "Root=1-5759e988-bd862e3fe1be46a994272793"}
    context = from_headers(gateway)
    # Then the root is the trace (a parent of its own), and the caller's traceparent wins
    assert context is not None and context.trace_id == TRACE and len(context.span_id) == 16
    caller = from_headers({**gateway, "traceparent": f"00-{'a' * 32}-{SPAN}-01"})
    assert caller == TraceContext("a" * 32, SPAN, True)
    assert message_trace(None, gateway["x-amzn-trace-id"] + f";Parent={SPAN}") == TraceContext(
        TRACE, SPAN, True
    )


class Spans:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, TraceContext, str]] = []

    def record(self, name, span, parent_id, times, annotations) -> None:
        assert times[0] <= times[1] and annotations["batch_size"] == 2
        self.recorded.append((name, span, parent_id))


def test_each_queued_request_gets_the_batchers_and_the_batch_runs_spans_in_its_own_trace(aws):
    # Given two queued requests, one sent with a trace context, one without
    aws.put("models/echo/1/model.onnx", builders.onnx_identity(784))
    aws.services.registrar.reconcile_model("echo")
    queue = aws.use_process().queue
    rows = np.ones((1, 784), np.float32)
    sender = TraceContext(TRACE, SPAN)
    messages = []
    for name, trace in (("traced", sender), ("plain", None)):
        envelope = _envelope(name, rows)
        queue.results.create_pending(envelope)
        messages.append(QueueMessage(name, json.dumps(envelope.to_message()), 1, trace))
    spans = Spans()
    propagation.set_sink(spans)
    try:
        # When the batcher runs them through the infer function's batch entry point
        lambda_client = SizeLimitedLambda()
        queued = QueuedInference(
            queue.results,
            queue.payloads,
            LambdaInvoker(lambda_client, "infer"),
            max_receive_count=3,
        )
        assert queued.process(messages) == set()
    finally:
        propagation.set_sink(None)
    # Then the traced request has the batcher's span under its sender's, and the batch run's
    # under the batcher's; the untraced one has none
    assert sorted(name for name, _, _ in spans.recorded) == [
        "lambdaserve-batcher",
        "lambdaserve-infer",
    ]
    named = {name: (span, parent) for name, span, parent in spans.recorded}
    batcher, parent = named["lambdaserve-batcher"]
    run, run_parent = named["lambdaserve-infer"]
    assert batcher.trace_id == run.trace_id == TRACE
    assert parent == SPAN and run_parent == batcher.span_id
    assert queue.results.get("plain").status == queue.results.get("traced").status == "SUCCESS"


class Recording:
    """The forwarder's HTTP client, recording what it was asked to send."""

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}

    def request(self, method, url, body, headers, redirect):
        self.headers = headers
        return type("Answer", (), {"status": 200, "data": b"{}", "headers": {}})()


def test_the_forwarded_request_carries_the_hops_traceparent():
    # Given the infer function's hop context, and a request whose caller sent another span
    client = Recording()
    router = ServerModeRouter("http://serve", lambda model: True, None, client=client)
    call = HttpCall(
        "POST", "/v2/models/m/infer", "", {"traceparent": f"00-{TRACE}-{'1' * 16}-01"}, b"{}"
    )
    token = CURRENT.set(TraceContext(TRACE, SPAN))
    try:
        # When it forwards the request to serve
        router.route(call)
    finally:
        CURRENT.reset(token)
    # Then serve hears the hop's span as the parent
    assert client.headers["traceparent"] == f"00-{TRACE}-{SPAN}-01"


def test_opentelemetrys_own_variables_name_the_endpoint_when_the_flags_do_not(monkeypatch):
    from lambdaserve.tracing.config import OTLP_DEFAULT_URL, trace_config

    # Given no endpoint variable: Triton's default; then OpenTelemetry's variables, the
    # traces one first; and a flag over both
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert trace_config(["mode=opentelemetry"]).otel_url == OTLP_DEFAULT_URL
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    assert trace_config(["mode=opentelemetry"]).otel_url == "http://collector:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://tempo:4318/v1/traces")
    assert trace_config(["mode=opentelemetry"]).otel_url == "http://tempo:4318/v1/traces"
    flag = ["mode=opentelemetry", "opentelemetry,url=http://jaeger:4318/v1/traces"]
    assert trace_config(flag).otel_url == "http://jaeger:4318/v1/traces"
