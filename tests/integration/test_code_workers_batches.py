"""A batched handler's worker processes take batches side by side (workers by default,
`serve`'s batcher): a version with two workers runs a second batch while the first is still
running, as TorchServe's frontend gives each of a model's workers its own batch."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.support import wait_until

WAIT_S = 120
# "wait:<path>" marks <path>.held, then holds its worker until "free:<path>" (sent next, in
# a batch of its own) creates <path>; it gives up after 30 s, answering "alone".
MEETING = """
import os, time

def handle(data, context):
    if data is None:
        return None
    answers = []
    for row in data:
        verb, path = bytes(row.get("body") or row.get("data")).decode().split(":", 1)
        if verb == "free":
            open(path, "w").close()
            answers.append("freed")
            continue
        open(path + ".held", "w").close()
        deadline = time.monotonic() + 30
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.01)
        answers.append("met" if os.path.exists(path) else "alone")
    return answers
"""


def test_a_second_batch_runs_in_the_second_worker_while_the_first_runs(stack, tmp_path):
    """Given a .mar whose model-config.yaml asks for batchSize 2, maxBatchDelay 1 ms and two
    workers, behind serve's batcher,
    When one request's batch holds its worker until a later request (a batch of its own)
    frees it,
    Then both answer: the first "met" (the second batch ran beside it), not "alone"."""
    from lambdaserve.local.emulator import free_port
    from lambdaserve.processes.background import BackgroundServer
    from lambdaserve.processes.serve import build_serving_app

    (tmp_path / "handler.py").write_text(MEETING)
    config = tmp_path / "model-config.yaml"
    config.write_text("batchSize: 2\nmaxBatchDelay: 1\nminWorkers: 2\nmaxWorkers: 2\n")
    archiver = os.path.join(os.path.dirname(sys.executable), "torch-model-archiver")
    subprocess.run(
        [archiver, "--model-name", "meet", "--version", "1.0", "--handler",
         str(tmp_path / "handler.py"), "--config-file", str(config), "--export-path",
         str(tmp_path)],
        check=True, timeout=120,
    )  # fmt: skip
    mar = tmp_path / "meet.mar"
    stack.put("models/meet.mar", mar.read_bytes())
    stack.wait_state("meet", 1, "READY", timeout_s=60)
    flag = tmp_path / "flag"
    server = BackgroundServer(build_serving_app(batching=True), "127.0.0.1", free_port()).start()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            warm = client.post("/predictions/meet", content=f"free:{tmp_path / 'warm'}")
            assert warm.status_code == 200 and warm.text == "freed", warm.text
            with ThreadPoolExecutor(2) as pool:
                first = pool.submit(client.post, "/predictions/meet", content=f"wait:{flag}")
                wait_until(lambda: os.path.exists(f"{flag}.held"), WAIT_S)
                second = pool.submit(client.post, "/predictions/meet", content=f"free:{flag}")
                assert second.result().text == "freed"
                assert first.result().text == "met"
    finally:
        server.stop()
