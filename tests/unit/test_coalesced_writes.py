"""A response's writes in one loop step leave together, and none is lost to a close
(processes/asgi/coalesced_writes.py), over a real asyncio transport on a socket pair."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from lambdaserve.processes.asgi.coalesced_writes import CoalescedWrites
from lambdaserve.processes.asgi.slow_clients import HeaderTimeoutHttp


class _Sends(asyncio.Protocol):
    pass


async def _pair() -> tuple[asyncio.Transport, socket.socket]:
    ours, theirs = socket.socketpair()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_connection(_Sends, sock=ours)
    theirs.setblocking(False)
    return transport, theirs


async def _read_all(peer: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    received = b""
    while chunk := await loop.sock_recv(peer, 1 << 20):
        received += chunk
    return received


def test_writes_of_one_step_are_sent_together_at_its_end_in_order() -> None:
    """Given a cycle's transport wrapped,
    When the status line, headers and body are written in one step,
    Then nothing is sent during the step; at its end all of it is, in order."""

    async def scenario() -> tuple[int, bytes]:
        transport, peer = await _pair()
        wrapped = CoalescedWrites(transport, asyncio.get_running_loop())
        wrapped.write(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n")
        wrapped.write(b"body")
        during = len(peer.recv(1 << 16)) if _readable(peer) else 0
        await asyncio.sleep(0)
        transport.close()
        return during, await _read_all(peer)

    during, received = asyncio.run(scenario())
    assert during == 0
    assert received == b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nbody"


def test_a_close_by_the_cycle_sends_what_is_held_first() -> None:
    """Given a response written in one step,
    When the cycle closes the connection in that same step (keep-alive off),
    Then the peer receives the whole response before the end of the stream."""

    async def scenario() -> bytes:
        transport, peer = await _pair()
        wrapped = CoalescedWrites(transport, asyncio.get_running_loop())
        wrapped.write(b"head;")
        wrapped.write(b"body")
        wrapped.close()
        return await _read_all(peer)

    assert asyncio.run(scenario()) == b"head;body"


def test_the_servers_shutdown_in_the_same_step_still_sends_the_response() -> None:
    """Given `serve`'s HTTP protocol (HeaderTimeoutHttp) on a real connection, and an app
    that answers and, in that same loop step, meets the server's graceful shutdown (which
    closes an idle connection's raw transport at once),
    When a request arrives,
    Then the client receives the whole answer: the held writes go out before the close."""

    async def scenario() -> bytes:
        loop = asyncio.get_running_loop()
        ours, peer = socket.socketpair()
        peer.setblocking(False)
        protocols: list[HeaderTimeoutHttp] = []

        async def app(scope: Any, receive: Any, send: Any) -> None:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-length", b"4")],
                }
            )
            await send({"type": "http.response.body", "body": b"body"})
            protocols[0].shutdown()  # the server stops in this very step

        config = Config(app=app, lifespan="off", log_level="warning")
        config.load()

        def made() -> HeaderTimeoutHttp:
            protocols.append(HeaderTimeoutHttp(config, ServerState(), {}))
            return protocols[0]

        await loop.create_connection(made, sock=ours)
        await loop.sock_sendall(peer, b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
        return await asyncio.wait_for(_read_all(peer), 5)

    received = asyncio.run(scenario())
    assert received.startswith(b"HTTP/1.1 200 OK\r\n")
    assert received.endswith(b"\r\n\r\nbody")


def test_a_large_body_is_sent_as_written_after_what_is_held() -> None:
    """Given headers held, When a body of 64 KB or more is written,
    Then the headers go first and the body is not joined to them, in order."""

    async def scenario() -> bytes:
        transport, peer = await _pair()
        wrapped = CoalescedWrites(transport, asyncio.get_running_loop())
        wrapped.write(b"head;")
        wrapped.write(b"x" * 100_000)
        reading = asyncio.ensure_future(_read_all(peer))
        await asyncio.sleep(0)
        transport.close()
        return await reading

    assert asyncio.run(scenario()) == b"head;" + b"x" * 100_000


def _readable(peer: socket.socket) -> bool:
    try:
        return bool(peer.recv(1, socket.MSG_PEEK))
    except BlockingIOError:
        return False
