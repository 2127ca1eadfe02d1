"""Every door's exchanges to the process's payload capture (``data_capture``).

A door knows the bytes it read and wrote and their content types; the version that answered
decides whether they are kept (its config's ``data_capture`` setting). The bytes are asked
for only once the sample takes the request (``Payload``: bytes, or how to make them), so a
gRPC door serializes its messages only for the requests it captures, and a model that
captures nothing costs its requests one cached lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lambdaserve.errors import LambdaServeError
from lambdaserve.serving.capture.data_capture import DataCapture, Exchange, capture_setting_of
from lambdaserve.serving.version_resolver import ServedVersion

if TYPE_CHECKING:
    from lambdaserve.serving.data_plane import InferenceDataPlane

Payload = bytes | Callable[[], bytes]
JSON = "application/json"
# what a gRPC door keeps: the message as it travels (protobuf), base64 in the record
GRPC = "application/grpc+proto"
# a stream's many responses (a decoupled model's): each message framed as gRPC frames them
# on the wire (a flag byte, then its length in four big-endian bytes)
GRPC_FRAMED = "application/grpc+proto; framing=length-prefixed"


def framed(message: bytes) -> bytes:
    """One message as gRPC's Length-Prefixed-Message (uncompressed)."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


def offer_served(
    capture: DataCapture | None,
    served: ServedVersion,
    request: tuple[Payload, str],
    response: tuple[Payload, str],
) -> None:
    """The exchange (``(payload, content type)`` each way) to ``capture`` where the version's
    config asks for it; never raises (a setting that does not parse was refused at publish:
    here it captures nothing)."""
    if capture is None:
        return
    try:
        setting = capture_setting_of(served.config.parameters)
    except LambdaServeError:
        return
    if setting is None or not capture.takes(setting):
        return
    try:
        exchange = Exchange(
            served.model,
            served.version,
            _bytes(request[0]),
            request[1],
            _bytes(response[0]),
            response[1],
        )
    except Exception:  # capture never fails what it captures
        capture.count_failed()
        return
    capture.queue(setting, exchange)


async def offer(
    plane: InferenceDataPlane,
    model: str,
    version: int,
    request: tuple[Payload, str],
    response: tuple[Payload, str],
    *,
    served: ServedVersion | None = None,
) -> None:
    """``offer_served`` for the version that answered: ``served`` where the answer says
    (``Inferred.served``), else resolved (inline when loaded: it just ran; else in a thread,
    no catalog read on the event loop)."""
    if plane.capture is None:
        return
    try:
        served = served or await plane.served(model, version)
    except LambdaServeError:
        return
    offer_served(plane.capture, served, request, response)


async def offer_messages(
    plane: InferenceDataPlane,
    model: str,
    version: int,
    request: Any,
    response: Any,
    *,
    served: ServedVersion | None = None,
) -> None:
    """A gRPC call's request and response messages, as they travel (serialized only for the
    requests the sample takes)."""
    if plane.capture is not None:
        sent, answered = request.SerializeToString, response.SerializeToString
        await offer(plane, model, version, (sent, GRPC), (answered, GRPC), served=served)


def _bytes(payload: Payload) -> bytes:
    return payload() if callable(payload) else bytes(payload)
