"""Shadow traffic (issue 52): a weighted label's ``"shadow": {"version": N, "percent": P}``
runs a sampled copy of the label's requests on version N after the answer is sent; its
request, answer (or error) and latency land under ``captures/<model>/<N>/``, marked
``"shadow": true``, and never reach the client. Budget: ~15 s.

Through ``lambdaserve dev``'s infer side (a long-running process). The deployed infer
function runs no shadows (its instance freezes once it answers): docs/rollouts.md says so.
"""

from __future__ import annotations

import json
from typing import Any

from tests.integration.label_models import BODY, CONFIG
from tests.support import wait_until

MODEL = "shadowed"
HEALTHY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        taken = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 2)]) for x in taken]
"""
BROKEN = """
class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("the shadow version is broken")
"""


def records(stack: Any, version: int) -> list[dict[str, Any]]:
    s3, bucket = stack.clients.s3, stack.settings.bucket
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"captures/{MODEL}/{version}/")
    found = []
    for item in listed.get("Contents", []):
        body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read().decode()
        found += [json.loads(line) for line in body.splitlines() if line]
    return found


def test_a_shadow_that_raises_never_reaches_the_client_and_its_records_are_in_s3(stack):
    # Given a label served by version 1, shadowed at 100% by version 2, which always raises
    stack.put(f"models/{MODEL}/config.pbtxt", CONFIG)
    stack.put(f"models/{MODEL}/1/model.py", HEALTHY.encode())
    stack.put(f"models/{MODEL}/2/model.py", BROKEN.encode())
    for version in (1, 2):
        stack.wait_state(MODEL, version, "READY", timeout_s=90)
    weights = {"versions": {"1": 100}, "shadow": {"version": 2, "percent": 100}}
    answer = stack.api.put(f"/models/{MODEL}/labels/prod", json=weights)
    assert answer.status_code == 200, answer.text
    # When clients ask the label 40 times
    answers = [
        stack.inference.post(f"/v2/models/{MODEL}/versions/prod/infer", json=BODY)
        for _ in range(40)
    ]
    # Then every answer is version 1's, right, and says so: the shadow's failure is not theirs
    assert {a.status_code for a in answers} == {200}, answers[0].text
    assert {a.headers["lambdaserve-model-version"] for a in answers} == {"1"}
    assert {tuple(a.json()["outputs"][0]["data"]) for a in answers} == {(2, 4, 6, 8)}
    # and each copy ran on version 2 after its answer, recorded as a shadow's, with its error
    shadows = stack.process.plane.shadows
    wait_until(lambda: shadows.counts.sent == 40, 30)
    stack.process.data_capture.flush()
    recorded = records(stack, 2)
    assert len(recorded) == 40 and shadows.counts.dropped == 0
    meta = recorded[0]["eventMetadata"]
    assert meta["shadow"] is True and meta["primaryVersion"] == 1 and meta["latencyMs"] >= 0
    said = json.loads(recorded[0]["captureData"]["endpointOutput"]["data"])
    assert "the shadow version is broken" in said["error"]
    asked = json.loads(recorded[0]["captureData"]["endpointInput"]["data"])
    assert asked["inputs"][0]["data"] == [1, 2, 3, 4]
    # and version 1, whose config captures nothing, left no records
    assert records(stack, 1) == []
    # And describe shows the label's shadow
    [first, *_] = stack.api.get(f"/models/{MODEL}/1").json()
    assert first["weightedLabels"]["prod"]["shadow"] == {"version": 2, "percent": 100.0}


def test_a_shadow_is_refused_where_it_cannot_shadow(stack):
    # Given a READY version 1 and nothing else
    stack.put(f"models/{MODEL}/config.pbtxt", CONFIG)
    stack.put(f"models/{MODEL}/1/model.py", HEALTHY.encode())
    stack.wait_state(MODEL, 1, "READY", timeout_s=90)
    for shadow, said in [
        ({"version": 1, "percent": 10}, "cannot shadow"),
        ({"version": 2, "percent": 0}, "percent"),
        ({"version": 9, "percent": 10}, "version 9"),
    ]:
        # When a label names it as its shadow
        body = {"versions": {"1": 100}, "shadow": shadow}
        answer = stack.api.put(f"/models/{MODEL}/labels/prod", json=body)
        # Then it is a 4xx saying why
        assert 400 <= answer.status_code < 500, answer.text
        assert said in answer.json()["message"], answer.text
