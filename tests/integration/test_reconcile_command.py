"""`lambdaserve reconcile` heals what the event path missed (over HTTP to the emulator)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests import builders


def test_reconcile_command_brings_the_catalog_in_line_with_the_bucket(stack):
    # Given uploads whose events are lost (pump stopped, queue purged)
    stack.pump.stop()
    stack.put("models/lost/1/model.onnx", builders.onnx_mlp())
    stack.put("models/lost/2/model.onnx", b"garbage" * 5)
    stack.clients.sqs.purge_queue(QueueUrl=stack.resources.repository_events.url)
    assert stack.state("lost", 1) is None
    # When an operator runs the command with the stack's environment
    done = subprocess.run(
        [sys.executable, "-m", "lambdaserve.cli", "reconcile"],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    # Then it reports the models it reconciled and the catalog shows the bucket's truth
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"models": 1}
    assert stack.state("lost", 1) == ("READY", "")
    assert stack.state("lost", 2)[0] == "UNAVAILABLE"
