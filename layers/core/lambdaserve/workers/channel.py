"""The small headers between the serving process and a worker: a 4-byte little-endian length
and a JSON document (orjson), over a Unix socket pair. Tensors never go in them (they cross
in the shared areas); no message is pickled."""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any

import orjson

from lambdaserve import errors
from lambdaserve.errors import LambdaServeError

_LENGTH = struct.Struct("<I")
# a worker's log record on its output, beside what its code prints (workers.child writes it,
# workers.process reads it)
RECORD_MARK = "\x1elambdaserve-log "
_CHUNK = 1 << 16


class ChannelClosed(Exception):
    """The other side is gone (its process died or closed the socket)."""


class Channel:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._timeout: float | None = None
        self._buffer = bytearray()
        self._sending = threading.Lock()  # a worker's BLS and its responses send from two threads

    def send(self, message: dict[str, Any]) -> None:
        body = orjson.dumps(message)
        try:
            with self._sending:
                self.sock.sendall(_LENGTH.pack(len(body)) + body)
        except OSError as exc:
            raise ChannelClosed(str(exc)) from None

    def receive(self, timeout: float | None = None) -> dict[str, Any]:
        """The next message; TimeoutError after ``timeout`` seconds without one."""
        if timeout != self._timeout:
            self.sock.settimeout(timeout)
            self._timeout = timeout
        # one recv usually brings the length and the whole document: one syscall, not two
        while len(self._buffer) < _LENGTH.size:
            self._fill()
        (length,) = _LENGTH.unpack_from(self._buffer)
        end = _LENGTH.size + length
        while len(self._buffer) < end:
            self._fill()
        message: dict[str, Any] = orjson.loads(memoryview(self._buffer)[_LENGTH.size : end])
        del self._buffer[:end]
        return message

    def _fill(self) -> None:
        try:
            chunk = self.sock.recv(_CHUNK)
        except TimeoutError:
            raise
        except OSError as exc:
            raise ChannelClosed(str(exc)) from None
        if not chunk:
            raise ChannelClosed("the other side closed the channel")
        self._buffer += chunk

    def close(self) -> None:
        self.sock.close()


_ERRORS = {
    name: getattr(errors, name)
    for name in (
        "InferenceError",
        "InvalidInput",
        "ModelNotReady",
        "ModelCodeFailed",
        "ModelNotFound",
    )
}


def error_document(exc: BaseException) -> dict[str, str]:
    """An exception as the typed error document the other side rebuilds."""
    if isinstance(exc, LambdaServeError):
        return {"type": type(exc).__name__, "message": exc.message}
    return {"type": "InferenceError", "message": f"{type(exc).__name__}: {exc}"}


def error_from(document: dict[str, str]) -> LambdaServeError:
    """A worker's error document as the typed error it was there."""
    kind: type[LambdaServeError] = _ERRORS.get(document.get("type", ""), errors.InferenceError)
    return kind(document.get("message", "the model's code failed"))
