"""`dev --server-mode`'s HTTP API: requests become API Gateway payload 2.0 events for the
infer function's handler, and its answers (binary ones too) go back as API Gateway sends
them."""

from __future__ import annotations

import asyncio
import base64

import httpx

from lambdaserve.local.deployed_api import HttpApiEmulation


def on_a_private_loop(work):
    """asyncio.run would leave the main thread without a loop, and later tests of the
    Lambda handler (Mangum asks for the thread's loop) would fail."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(work)
    finally:
        loop.close()


def test_a_request_and_its_answer_travel_as_api_gateway_carries_them():
    events: list[dict] = []

    def handler(event, context):
        events.append(event)
        return {
            "statusCode": 201,
            "headers": {"content-type": "application/octet-stream", "x-kept": "yes"},
            "body": base64.b64encode(b"\x00\x01binary").decode(),
            "isBase64Encoded": True,
            "cookies": ["a=1"],
        }

    async def run() -> httpx.Response:
        app = HttpApiEmulation(handler, None, max_body_bytes=1024)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            return await client.post(
                "/v2/models/m/infer?x=1&x=2",
                content=b"\xff\xfe raw",
                headers={"content-type": "application/octet-stream", "cookie": "s=1; t=2"},
            )

    answer = on_a_private_loop(run())
    [event] = events
    assert event["version"] == "2.0" and event["rawPath"] == "/v2/models/m/infer"
    assert event["rawQueryString"] == "x=1&x=2"
    assert event["queryStringParameters"] == {"x": "1,2"}
    assert event["cookies"] == ["s=1", "t=2"]
    assert event["isBase64Encoded"] and base64.b64decode(event["body"]) == b"\xff\xfe raw"
    assert event["requestContext"]["http"]["method"] == "POST"
    assert answer.status_code == 201 and answer.content == b"\x00\x01binary"
    assert answer.headers["x-kept"] == "yes" and answer.headers["set-cookie"] == "a=1"


def test_a_body_over_the_payload_limit_is_a_413_before_the_function_runs():
    called: list[int] = []

    async def run() -> httpx.Response:
        app = HttpApiEmulation(lambda e, c: called.append(1) or {}, None, max_body_bytes=10)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            return await client.post("/v2/models/m/infer", content=b"x" * 11)

    assert on_a_private_loop(run()).status_code == 413 and not called
