"""Lambda's part of X-Ray, for the functions the local stack runs: each invocation's trace
header (``_X_AMZN_TRACE_ID``), as Lambda makes it from the function's tracing mode and the
caller's header (API Gateway's ``X-Amzn-Trace-Id``, or the X-Amzn-Trace-Id of a Lambda Invoke
call), and the function's own segment (``AWS::Lambda::Function``) that Lambda sends, under
which the function's subsegments hang. Segments go over UDP to the daemon address the stack
gives its functions (``AWS_XRAY_DAEMON_ADDRESS``), in the daemon's protocol.

Lambda samples with X-Ray's rules (the first request each second and 5% more); here an
Active function samples every invocation, so a journey's request is always traced."""

from __future__ import annotations

import json
import secrets
import socket
import time
from dataclasses import dataclass

from lambdaserve.tracing.propagation import TraceContext, from_xray, new_span_id

ACTIVE = "Active"
_DAEMON_HEADER = b'{"format": "json", "version": 1}\n'


@dataclass(frozen=True)
class Invocation:
    """One invocation's trace: the header its runtime gets, the function segment's context
    (its id is the header's Parent) and that segment's parent (the caller's span, if any)."""

    header: str
    segment: TraceContext
    parent_id: str | None
    started: float


def new_root() -> str:
    """A new X-Ray trace id's root, as API Gateway or Lambda makes one: epoch seconds first."""
    return f"1-{int(time.time()):08x}-{secrets.token_hex(12)}"


def begin(mode: str, incoming: str | None) -> Invocation:
    """The invocation's trace header: the caller's trace (a new one without), sampled where
    the function is Active, or where a PassThrough function's caller sampled."""
    caller = from_xray(incoming)
    said = "Sampled=1" in (incoming or "")
    sampled = (mode == ACTIVE and (caller is None or caller.sampled)) or (
        mode != ACTIVE and said and mode != "Disabled"
    )
    trace_id = caller.trace_id if caller is not None else new_root()[2:].replace("-", "")
    segment = TraceContext(trace_id, new_span_id(), sampled)
    parent = caller.span_id if caller is not None and "Parent=" in (incoming or "") else None
    return Invocation(segment.xray_header, segment, parent, time.time())


def send_function_segment(daemon: str, function: str, invocation: Invocation) -> None:
    """The function's segment, as Lambda sends it when the invocation was sampled."""
    if not invocation.segment.sampled:
        return
    document = {
        "name": function,
        "id": invocation.segment.span_id,
        "trace_id": invocation.segment.xray_root,
        "start_time": invocation.started,
        "end_time": time.time(),
        "origin": "AWS::Lambda::Function",
    }
    if invocation.parent_id is not None:
        document["parent_id"] = invocation.parent_id
    host, _, port = daemon.rpartition(":")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.sendto(_DAEMON_HEADER + json.dumps(document).encode(), (host, int(port)))
