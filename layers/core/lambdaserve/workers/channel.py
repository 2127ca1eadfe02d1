"""The small headers between the serving process and a worker: a 4-byte little-endian length
and a JSON document (orjson), over a Unix socket pair. Tensors never go in them (they cross
in the shared areas); no message is pickled."""

from __future__ import annotations

import socket
import struct
from typing import Any

import orjson

_LENGTH = struct.Struct("<I")


class ChannelClosed(Exception):
    """The other side is gone (its process died or closed the socket)."""


class Channel:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._timeout: float | None = None

    def send(self, message: dict[str, Any]) -> None:
        body = orjson.dumps(message)
        try:
            self.sock.sendall(_LENGTH.pack(len(body)) + body)
        except OSError as exc:
            raise ChannelClosed(str(exc)) from None

    def receive(self, timeout: float | None = None) -> dict[str, Any]:
        """The next message; TimeoutError after ``timeout`` seconds without one."""
        if timeout != self._timeout:
            self.sock.settimeout(timeout)
            self._timeout = timeout
        (length,) = _LENGTH.unpack(self._exactly(_LENGTH.size))
        message: dict[str, Any] = orjson.loads(self._exactly(length))
        return message

    def _exactly(self, count: int) -> bytes:
        chunks, missing = [], count
        while missing:
            try:
                chunk = self.sock.recv(missing)
            except TimeoutError:
                raise
            except OSError as exc:
                raise ChannelClosed(str(exc)) from None
            if not chunk:
                raise ChannelClosed("the other side closed the channel")
            chunks.append(chunk)
            missing -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def close(self) -> None:
        self.sock.close()
