"""``lambdaserve dev --server-mode``: the deployed synchronous path, end to end, without AWS.

Two parts beside the rest of ``dev``:

- the **HTTP API as deployed** (``--http-api-port``): each request becomes an API Gateway
  (payload 2.0) event for the infer function's handler, run in-process, so a request for a
  ``KIND_GPU`` model is forwarded to server mode, or queued when server mode has no capacity,
  exactly as the Lambda does it;
- **server mode** (``--server-port``): ``lambdaserve serve`` in a process of its own against
  the same emulator, bucket and catalog; stop it (``kill``) to try the zero-capacity path,
  where the request waits on the queue that ``dev``'s batcher drains.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]
Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
_TEXT_TYPES = ("application/json", "text/", "application/problem+json")


class HttpApiEmulation:
    """An ASGI app answering every request through a Lambda handler, as the HTTP API does."""

    def __init__(self, handler: Handler, context: Any, max_body_bytes: int) -> None:
        self._handler = handler
        self._context = context
        self._max_body_bytes = max_body_bytes
        # One invocation at a time, as one Lambda instance takes them (and Mangum keeps its
        # event loop in the thread that first ran it)
        self._instance = ThreadPoolExecutor(1, thread_name_prefix="infer-function")

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if len(body) > self._max_body_bytes:  # API Gateway's payload limit
                await _respond(
                    send,
                    413,
                    {"content-type": "application/json"},
                    b'{"message":"Request Entity Too Large"}',
                )
                return
            if not message.get("more_body"):
                break
        event = http_api_event_of(scope, bytes(body))
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self._instance, self._handler, event, self._context)
        headers = {k.lower(): str(v) for k, v in (result.get("headers") or {}).items()}
        payload = result.get("body") or ""
        data = base64.b64decode(payload) if result.get("isBase64Encoded") else payload.encode()
        await _respond(
            send, int(result.get("statusCode", 200)), headers, data, result.get("cookies")
        )


def http_api_event_of(scope: MutableMapping[str, Any], body: bytes) -> dict[str, Any]:
    """The payload 2.0 event API Gateway's HTTP API sends for this request."""
    headers: dict[str, str] = {}
    cookies: list[str] = []
    for raw_name, raw_value in scope.get("headers", []):
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        if name == "cookie":
            cookies += [c.strip() for c in value.split(";") if c.strip()]
            continue
        headers[name] = f"{headers[name]},{value}" if name in headers else value
    query = scope.get("query_string", b"").decode("latin-1")
    parameters: dict[str, str] = {}
    for pair in filter(None, query.split("&")):
        key, _, value = pair.partition("=")
        parameters[key] = f"{parameters[key]},{value}" if key in parameters else value
    content_type = headers.get("content-type", "")
    text = not body or content_type.startswith(_TEXT_TYPES)
    now = datetime.now(UTC)
    client = scope.get("client") or ("127.0.0.1", 0)
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": scope["path"],
        "rawQueryString": query,
        "headers": headers,
        "requestContext": {
            "http": {
                "method": scope["method"],
                "path": scope["path"],
                "protocol": f"HTTP/{scope.get('http_version', '1.1')}",
                "sourceIp": client[0],
                "userAgent": headers.get("user-agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "accountId": "000000000000",
            "apiId": "local",
            "domainName": headers.get("host", "localhost"),
            "domainPrefix": "local",
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now.timestamp() * 1000),
        },
        "body": body.decode("utf-8", errors="replace") if text else base64.b64encode(body).decode(),
        "isBase64Encoded": not text,
    }
    if parameters:
        event["queryStringParameters"] = parameters
    if cookies:
        event["cookies"] = cookies
    return event


async def _respond(
    send: Callable[[Any], Awaitable[None]],
    status: int,
    headers: dict[str, str],
    body: bytes,
    cookies: list[str] | None = None,
) -> None:
    pairs = [(k.encode(), v.encode()) for k, v in headers.items() if k != "content-length"]
    pairs.append((b"content-length", str(len(body)).encode()))
    pairs += [(b"set-cookie", c.encode()) for c in cookies or []]
    await send({"type": "http.response.start", "status": status, "headers": pairs})
    await send({"type": "http.response.body", "body": body})


class ServeProcess:
    """``lambdaserve serve`` against the same stack, in a process of its own."""

    def __init__(self, host: str, port: int) -> None:
        self.url = f"http://{host}:{port}"
        self._command = [
            sys.executable,
            "-m",
            "lambdaserve.cli",
            "serve",
            "--host",
            host,
            "--port",
            str(port),
            "--grpc-port",
            "0",  # dev's own gRPC port answers gRPC
        ]
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> ServeProcess:
        environment = {k: v for k, v in os.environ.items() if k != "LAMBDASERVE_SERVER_URL"}
        self._process = subprocess.Popen(self._command, env=environment, start_new_session=True)
        return self

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def stop(self) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        os.killpg(self._process.pid, signal.SIGTERM)
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(10)


def start_server_mode(
    host: str, server_port: int, http_api_port: int, access_log: bool
) -> tuple[ServeProcess, Any]:
    """``serve`` in its own process, and the HTTP API emulation in front of the infer
    function's handler (LAMBDASERVE_SERVER_URL already points at ``serve``)."""
    from lambdaserve.handlers import infer
    from lambdaserve.processes.background import BackgroundServer
    from lambdaserve.processes.event_pump import LocalContext
    from lambdaserve.settings import get_settings

    serve = ServeProcess(host, server_port).start()
    try:
        api = HttpApiEmulation(
            infer.api_handler, LocalContext("infer"), get_settings().max_request_bytes
        )
        server = BackgroundServer(api, host, http_api_port, access_log=access_log).start()
    except BaseException:
        serve.stop()  # its own session: nothing else would stop it
        raise
    return serve, server


def banner_lines(
    host: str, server_port: int, http_api_port: int, serve_pid: int | None
) -> list[str]:
    return [
        f"  HTTP API          http://{host}:{http_api_port}  (as deployed: API Gateway events to "
        "the infer function; KIND_GPU models forwarded to server mode)",
        f"  server mode       http://{host}:{server_port}  (`lambdaserve serve`, pid {serve_pid}; "
        "kill it to try the zero-capacity path: requests queue and wait)",
    ]
