"""One serving plane per process: `serve`'s HTTP and gRPC doors share its batchers, so a
TorchServe handler that batches meets its requests in one lane whichever door they came by."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.integration.grpc_support import lambdaserve_serve
from tests.integration.test_grpc_peers import peer, torchserve_stubs  # noqa: F401 (a fixture)

# every row of a batch answers with the batch's size
COUNTING_HANDLER = """
def handle(data, context):
    if data is None:
        return None
    return [str(len(data))] * len(data)
"""
# batchSize 4: two requests never fill a batch, so it closes when the delay runs out; the
# delay is long enough for the gRPC peer (a Python process of its own) to start and call
BATCHING = "batchSize: 4\nmaxBatchDelay: 5000\n"


def counting_archive(tmp_path: Path) -> bytes:
    """A .mar of the counting handler whose model-config.yaml asks for ``BATCHING``."""
    (tmp_path / "handler.py").write_text(COUNTING_HANDLER)
    config = tmp_path / "model-config.yaml"
    config.write_text(BATCHING)
    archiver = os.path.join(os.path.dirname(sys.executable), "torch-model-archiver")
    subprocess.run(
        [archiver, "--model-name", "count", "--version", "1.0", "--handler",
         str(tmp_path / "handler.py"), "--config-file", str(config), "--export-path",
         str(tmp_path)],
        check=True, timeout=120,
    )  # fmt: skip
    return (tmp_path / "count.mar").read_bytes()


def test_a_handlers_http_and_grpc_requests_meet_in_one_batch(
    stack,
    torchserve_stubs,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
):
    """Given `lambdaserve serve --grpc-port` and a handler's .mar whose model-config.yaml
    asks for batchSize 4 and maxBatchDelay 5000 ms,
    When one prediction comes by HTTP (POST /predictions/count) and one by TorchServe's gRPC
    Predictions, at the same time,
    Then the handler sees them in one batch of 2: both answer "2"."""
    stack.put("models/count.mar", counting_archive(tmp_path))
    stack.wait_state("count", 1, "READY", timeout_s=60)
    hello = base64.b64encode(b"hello").decode()
    with (
        lambdaserve_serve() as served,
        httpx.Client(base_url=f"http://127.0.0.1:{served.http}", timeout=60) as client,
        ThreadPoolExecutor(1) as pool,
    ):
        by_http = pool.submit(client.post, "/predictions/count", content=b"hello")
        [by_grpc] = peer(
            "torchserve_client.py",
            served.grpc_url,
            [{"rpc": "Predictions", "model": "count", "input": {"data": hello}}],
            str(torchserve_stubs),
        )
        answer = by_http.result()
    assert answer.status_code == 200 and answer.text == "2", answer.text
    assert base64.b64decode(by_grpc["predictions"][0]) == b"2", by_grpc
