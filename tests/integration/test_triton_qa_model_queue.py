"""Triton's qa/L0_model_queue, its own test file unchanged (tests/fixtures/triton_qa), against
`lambdaserve serve` as Triton's test.sh runs it: one fresh server per test case, the
``custom_zero_1_float32`` model configured by test.sh's lines (dims [-1], max_batch_size 32,
one KIND_CPU instance, then each case's dynamic_batching). Triton's C++ identity model is a
Python model here that sleeps the config's ``execute_delay_ms``
(tests/fixtures/python_models/sleeping_identity). The suite's trials on its custom model run,
over HTTP and gRPC; its ensemble's are left out, and test_policy_reject with them, whose
metrics check counts the ensemble's failures (tests/integration/qa_custom_trials.py says why).

The suite dials localhost:8000 (HTTP) and :8001 (gRPC), and reads Triton's metrics on :8002
(tests/integration/triton_qa_serve.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.triton_qa_serve import tritons_ports

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
QA = FIXTURES / "triton_qa"
SLEEPING = FIXTURES / "python_models" / "sleeping_identity" / "1" / "model.py"
# test.sh's dynamic_batching block for each case (the lines it echoes into config.pbtxt)
CASES = {
    "test_max_queue_size": """
dynamic_batching {
    preferred_batch_size: [ 4, 8 ]
    default_queue_policy {
        max_queue_size: 8
    }
}
parameters [
{ key: "execute_delay_ms"; value: { string_value: "5000" }}
]
""",
    "test_policy_delay": """
dynamic_batching {
    preferred_batch_size: [ 4, 8 ]
    max_queue_delay_microseconds: 10000000
    default_queue_policy {
        timeout_action: DELAY
        default_timeout_microseconds: 100000
    }
}
""",
    "test_policy_reject": """
dynamic_batching {
    preferred_batch_size: [ 4, 8 ]
    max_queue_delay_microseconds: 10000000
    default_queue_policy {
        default_timeout_microseconds: 100000
    }
}
""",
    "test_timeout_override": """
dynamic_batching {
    preferred_batch_size: [ 4, 8 ]
    max_queue_delay_microseconds: 10000000
    default_queue_policy {
        allow_timeout_override: true
        default_timeout_microseconds: 1000000
    }
}
""",
    "test_priority_levels": """
dynamic_batching {
    preferred_batch_size: [ 4, 8 ]
    max_queue_delay_microseconds: 10000000
    priority_levels: 2
    default_priority_level: 2
}
""",
    "test_max_priority_levels": """
dynamic_batching {
    preferred_batch_size: [ 4, 8 ]
    max_queue_delay_microseconds: 10000000
    priority_levels: 18446744073709551615
    default_priority_level: 4294967296
}
""",
    "test_priority_with_policy": """
dynamic_batching {
    preferred_batch_size: [ 4, 8, 32 ]
    max_queue_delay_microseconds: 10000000
    priority_levels: 2
    default_priority_level: 2
    default_queue_policy {
        timeout_action: DELAY
        allow_timeout_override: true
        default_timeout_microseconds: 11000000
    }
    priority_queue_policy {
        key: 2
        value: {
            timeout_action: REJECT
            allow_timeout_override: true
            default_timeout_microseconds: 11000000
        }
    }
}
""",
}
# make test's share (CI's budget): the cases that hold requests for Triton's 10 s queue delay
# in every one of their four trials run where LAMBDASERVE_QA_FULL=1 (all seven passed when
# this was written: docs/from-triton.md)
QUICK = ("test_max_queue_size", "test_timeout_override", "test_priority_levels")
# its metrics check counts the ensemble's failures too (qa_custom_trials.py)
REFUSED = {"test_policy_reject"}


def custom_config(case: str) -> bytes:
    """test.sh's custom_zero_1_float32: the qa config, its seds and echoes, on Python."""
    config = (QA / "custom_models" / "custom_zero_1_float32" / "config.pbtxt").read_text()
    config = re.sub(r"dims:.*\[.*\]", "dims: [ -1 ]", config)
    config = re.sub(r"max_batch_size:.*", "max_batch_size: 32", config)
    config = config.replace('backend: "identity"', 'backend: "python"')
    config += "instance_group [ { kind: KIND_CPU count: 1 }]\n"
    return (config + CASES[case]).encode()


def publish(stack, case: str) -> None:
    stack.put("models/custom_zero_1_float32/config.pbtxt", custom_config(case))
    stack.put("models/custom_zero_1_float32/1/model.py", SLEEPING.read_bytes())
    stack.wait_state("custom_zero_1_float32", 1, "READY", 60)


def run_case(case: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Triton's test method on its custom model's trials (tests/integration/qa_custom_trials.py
    says why the ensemble's are left out)."""
    path = os.pathsep.join(str(p) for p in (QA / "common", QA / "L0_model_queue"))
    return subprocess.run(
        [sys.executable, str(Path(__file__).with_name("qa_custom_trials.py")), case],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path, "TRITONSERVER_IPADDR": "localhost"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


CHOSEN = (
    tuple(c for c in CASES if c not in REFUSED)
    if os.environ.get("LAMBDASERVE_QA_FULL") == "1"
    else QUICK
)


@pytest.mark.parametrize("case", CHOSEN)
def test_tritons_model_queue_case_passes(case, stack, tmp_path):
    # Given test.sh's models for the case, and serve where the suite dials
    publish(stack, case)
    with tritons_ports(tmp_path / "serve.log") as log:
        # When Triton's test method runs (its trials on the model, over HTTP and gRPC)
        done = run_case(case, tmp_path)
        # Then it passes, and its result file counts one test, no error, no failure
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:] + log.read_text()[-3000:]
    assert (tmp_path / "test_results.txt").read_text() == '{"total": 1, "errors": 0, "failures": 0}'
