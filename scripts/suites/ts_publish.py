"""Publishing by upload for the TorchServe suites: the equivalent of ``POST /models?url=``.

TorchServe registers a ``.mar`` from a URL; lambdaserve refuses that by design and serves
what is uploaded to its bucket. ``Publisher.publish(name)`` uploads a small TorchServe
handler as ``models/<name>/1/handler.py``, waits until the catalog shows that upload READY,
and labels version 1 ``1.0`` (the version TorchServe gives a ``.mar`` by default).

``PublishHelper`` serves ``POST /publish?model=<name>`` on an ephemeral local port so that
a newman pre-request script can publish at the right point of a collection run.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import boto3

HANDLER = '''"""Stand-in for the TorchServe archive {name!r} (lambdaserve peer suite, upload {n}).

It has no weights: it answers, per request, what reached it (TorchServe's data rows)."""

import json


def handle(data, context):
    if data is None:
        return None
    answers = []
    for row in data:
        fields = {{}}
        for key, value in row.items():
            if isinstance(value, (bytes, bytearray)):
                fields[key] = {{"bytes": len(value)}}
            else:
                fields[key] = {{"json": type(value).__name__, "chars": len(json.dumps(value))}}
        answers.append({{"model": context.model_name, "fields": fields}})
    return answers
'''


@dataclass
class Publisher:
    management_url: str
    aws_endpoint: str
    bucket: str = "lambdaserve-models"
    prefix: str = "models/"
    timeout_s: float = 60.0
    log: list[str] = field(default_factory=list)
    _uploads: int = 0

    def __post_init__(self) -> None:
        self._s3 = boto3.client(
            "s3",
            endpoint_url=self.aws_endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )

    def publish(self, name: str, label: str = "1.0") -> str:
        """Upload a fresh handler for ``name`` v1 and wait for it; returns a one-line log."""
        self._uploads += 1
        body = HANDLER.format(name=name, n=self._uploads).encode()
        digest = hashlib.sha256(body).hexdigest()
        self._s3.put_object(Bucket=self.bucket, Key=f"{self.prefix}{name}/1/handler.py", Body=body)
        started = time.monotonic()
        state = self._wait_ready(name, digest)
        status, answer = self._request("PUT", f"/models/{name}/labels/{label}", {"version": 1})
        if status != 200:
            raise RuntimeError(f"label {label} of {name}: {status} {answer}")
        took = time.monotonic() - started
        line = f"published {name} v1 (label {label}) by upload: {state} in {took:.1f}s"
        self.log.append(line)
        return line

    def _wait_ready(self, name: str, digest: str) -> str:
        deadline = time.monotonic() + self.timeout_s
        last = "not in the catalog"
        while time.monotonic() < deadline:
            status, answer = self._request("GET", f"/models/{name}/1")
            if status == 200 and isinstance(answer, list) and answer:
                entry = answer[0]
                last = f"{entry.get('state')} {entry.get('reason', '')}".strip()
                if entry.get("state") == "READY" and _digest_matches(entry, digest):
                    return "READY"
                if entry.get("state") == "UNAVAILABLE" and _digest_matches(entry, digest):
                    raise RuntimeError(f"{name} v1 is UNAVAILABLE: {entry.get('reason')}")
            time.sleep(0.2)
        raise RuntimeError(f"{name} v1 not READY within {self.timeout_s:.0f}s: {last}")

    def _request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.management_url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(errors="replace")


def _digest_matches(entry: dict[str, Any], digest: str) -> bool:
    """The catalog entry describes this upload (not a stale one of the same name)."""
    files = entry.get("files")
    text = json.dumps(files) + json.dumps(entry.get("sha256"))
    return digest in text


class PublishHelper:
    """``POST /publish?model=<name>`` on 127.0.0.1:<ephemeral> for newman scripts."""

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self.errors: list[str] = []
        helper = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                name = query.get("model", [""])[0]
                try:
                    status, text = 200, helper.publisher.publish(name)
                except Exception as error:  # reported, and fails the request that needs it
                    status, text = 500, f"publishing {name!r} failed: {error}"
                    helper.errors.append(text)
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(text.encode())

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> PublishHelper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
