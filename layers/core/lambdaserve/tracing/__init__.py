"""Triton's trace extension: which requests are traced and what their traces hold.

``config`` (``--trace-config`` and the older trace flags as one TraceConfig), ``scopes``
(the global and per-model settings, as Triton's TraceManager keeps them), ``live_setting``
(one setting in force: rate, count, traces waiting to be written), ``trace_file`` (Triton's
trace file and its numbered files), ``request_trace`` (one traced request: ids, timestamps,
tensors; the compute stamps the serving code leaves), ``tensor_text`` (a tensor as the
TENSORS level writes it), ``tracer`` (start, stamp and finish a request's trace), ``wire``
(the settings API's values and errors, as Triton's HTTP and gRPC doors read and answer them),
``otel`` (OpenTelemetry mode: spans under the caller's traceparent, sent over OTLP/HTTP),
``frontend`` (a door's HTTP and gRPC stamps of a traced request, as Triton's frontends add them),
``propagation`` (one trace across the serverless path: W3C traceparent and X-Ray's header
carried from hop to hop).

Imports ``tensors`` and ``errors``; nothing of HTTP frameworks, gRPC or AWS (the OTLP
exporter posts with the standard library).
"""
