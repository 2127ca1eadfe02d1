"""Triton's qa/L0_rate_limiter against `lambdaserve serve --rate-limit execution_count`: its
test file unchanged (tests/fixtures/triton_qa), the models configured by its test.sh's lines
(custom_zero_1_float32 needing 4 of resource1; _v2 needing 2 of resource1 and 2 of global
resource2 at priority 2; each execution sleeping 100 ms), on the sleeping Python model.

test.sh's refusals: a model needing more of a resource than --rate-limit-resource gives is
refused with Triton's reason, word for word. In Triton the whole server then fails to start;
here the version is UNAVAILABLE with the reason (every other model still serves).

Left out, by design: test_cross_model_prioritization_limited_resource (it counts requests, and
without a dynamic_batching block Triton runs one request an execution, where lambdaserve
batches what queued, up to max_batch_size: the model run less often brings bigger batches,
and the ratio measured 1.74 against the 1.8 it asks), test_single_model_dynamic_batching (it
needs Triton's TRITONSERVER_DELAY_SCHEDULER hook, which holds requests in the scheduler) and
test_single_model_sequence_batching (Triton's C++ custom_sequence_int32; a sequence's steps
here are not held by the rate limiter: their state lives outside the instance)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.triton_qa_serve import tritons_ports
from tests.support import wait_until

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
QA = FIXTURES / "triton_qa"
SLEEPING = FIXTURES / "python_models" / "sleeping_identity" / "1" / "model.py"
FIRST = 'rate_limiter { resources [{name: "resource1" count: 4 }]}'
SECOND = (
    'rate_limiter { resources [{name: "resource1" count: 2 }, '
    '{name: "resource2" global: True count: 2 }] priority: 2}'
)
DELAY = '\nparameters [\n{ key: "execute_delay_ms"; value: { string_value: "100" }}\n]\n'
# test.sh's refusals: (flags, the model refused, Triton's reason)
REFUSALS = {
    "resource1:1": (
        ("--rate-limit-resource=resource1:1",),
        "custom_zero_1_float32",
        'Resource count for "resource1" is limited to 1 which will prevent scheduling of one '
        "or more model instances, the minimum required count is 4",
    ),
    "resource1:3": (
        ("--rate-limit-resource=resource1:3", "--rate-limit-resource=resource2:2"),
        "custom_zero_1_float32",
        'Resource count for "resource1" is limited to 3 which will prevent scheduling of one '
        "or more model instances, the minimum required count is 4",
    ),
    "resource1:10:10": (
        ("--rate-limit-resource=resource1:10:10", "--rate-limit-resource=resource2:2"),
        "custom_zero_1_float32",
        'Resource count for "resource1" is limited to 0 which will prevent scheduling of one '
        "or more model instances, the minimum required count is 4",
    ),
}
# test.sh's runs of Triton's tests: (its method, the flags, the models published)
RUNS = {
    "plenty": (
        "test_cross_model_prioritization_plenty_resource",
        ("--rate-limit-resource=resource1:6", "--rate-limit-resource=resource2:2"),
        ("custom_zero_1_float32", "custom_zero_1_float32_v2"),
    ),
    "single": ("test_single_model", (), ("custom_zero_1_float32",)),
}


def config(name: str, limiter: str) -> bytes:
    """test.sh's config: the qa custom model's, its seds and echoes, on Python."""
    text = (QA / "custom_models" / "custom_zero_1_float32" / "config.pbtxt").read_text()
    text = text.replace("custom_zero_1_float32", name)
    text = re.sub(r"dims:.*\[.*\]", "dims: [ -1 ]", text)
    text = re.sub(r"max_batch_size:.*", "max_batch_size: 4", text)
    text = text.replace('backend: "identity"', 'backend: "python"')
    return f"{text}instance_group [{{\nkind: KIND_GPU count: 1\n{limiter}\n}}]{DELAY}".encode()


LIMITERS = {
    "custom_zero_1_float32": FIRST,
    "custom_zero_1_float32_v2": SECOND,
    "custom_zero_1_float32_v3": SECOND.replace("global: True", "global: False"),
}


def publish(stack, names: tuple[str, ...]) -> None:
    for name in names:
        stack.put(f"models/{name}/config.pbtxt", config(name, LIMITERS[name]))
        stack.put(f"models/{name}/1/model.py", SLEEPING.read_bytes())
    for name in names:
        stack.wait_state(name, 1, "READY", 60)


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_resource_given_short_refuses_the_model_with_tritons_reason(case, stack, tmp_path):
    # Given test.sh's two models, and a --rate-limit-resource too small for the first
    flags, refused, reason = REFUSALS[case]
    publish(stack, ("custom_zero_1_float32", "custom_zero_1_float32_v2"))
    with tritons_ports(tmp_path / "serve.log", "--rate-limit=execution_count", *flags) as log:
        # When serve loads them, Then that model is UNAVAILABLE with Triton's reason, in the
        # repository index and in the server's log (where test.sh greps it)
        state = wait_until(
            lambda: (s := stack.state(refused, 1)) and s[0] == "UNAVAILABLE" and s, 60
        )
        assert reason in state[1], state
        assert reason in log.read_text()


def test_a_resource_both_global_and_per_device_refuses_with_tritons_reason(stack, tmp_path):
    # Given test.sh's _v3: _v2 with resource2 per device, beside _v2 where it is global
    publish(stack, ("custom_zero_1_float32_v2", "custom_zero_1_float32_v3"))
    with tritons_ports(tmp_path / "serve.log", "--rate-limit=execution_count") as log:
        # Then the one loaded second is refused with Triton's reason
        reason = (
            'Resource "resource2" is present as both global and device-specific resource in '
            "the model configuration."
        )
        wait_until(lambda: reason in log.read_text(), 60)
        states = [stack.state(f"custom_zero_1_float32_v{n}", 1) for n in (2, 3)]
        assert sorted(s[0] for s in states if s) == ["READY", "UNAVAILABLE"], states


@pytest.mark.parametrize("run", sorted(RUNS))
def test_tritons_rate_limiter_test_passes(run, stack, tmp_path):
    method, flags, names = RUNS[run]
    # Given test.sh's models and flags for the run
    publish(stack, names)
    with tritons_ports(tmp_path / "serve.log", "--rate-limit=execution_count", *flags) as log:
        # When Triton's test method runs against serve
        done = subprocess.run(
            [
                sys.executable,
                str(QA / "L0_rate_limiter" / "rate_limiter_test.py"),
                f"RateLimiterTest.{method}",
            ],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(QA / "common")},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        # Then it passes, and its result file counts one test, no error, no failure
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:] + log.read_text()[-3000:]
    assert (tmp_path / "test_results.txt").read_text() == '{"total": 1, "errors": 0, "failures": 0}'
