"""A SavedModel under ``backend: "openvino"`` stays OpenVINO's (TensorFlow would serve it
otherwise: tests/integration/test_tensorflow.py), and its publish says what it serves: a
second signature is named in the version's notes and describe as not served; a graph OpenVINO
refuses for its lookup tables is told to let TensorFlow serve it, not to save it again. The
SavedModels are made by TensorFlow itself, in an interpreter of their own: TensorFlow is
never imported here."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import wait_until

pytest.importorskip("openvino")
if importlib.util.find_spec("tensorflow") is None:  # looked up, never imported here
    pytest.skip("TensorFlow builds these SavedModels", allow_module_level=True)
pytestmark = pytest.mark.openvino

BUILDER = Path(__file__).parent.parent / "fixtures" / "tf_builders" / "savedmodels.py"


@pytest.fixture(scope="module")
def savedmodels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("savedmodels")
    subprocess.run([sys.executable, str(BUILDER), str(out)], check=True, capture_output=True)
    return out


def publish(stack, name: str, directory: Path) -> None:
    # the config first, in the catalog before the version's files arrive: the queue keeps no
    # order, and a version validated without it would be TensorFlow's
    stack.put(f"models/{name}/config.pbtxt", b'backend: "openvino"')
    wait_until(
        lambda: (
            (record := stack.services.catalog.get_model(name)) is not None
            and bool(record.file_config)
        ),
        20,
    )
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        stack.put(f"models/{name}/1/{path.relative_to(directory)}", path.read_bytes())


def test_a_second_signature_is_named_as_not_served(stack, savedmodels):
    """Given a SavedModel with serving_default and times_two, under backend: "openvino",
    When it is published,
    Then it is READY, answers serving_default, and its notes (describe) say that times_two
    is not served."""
    publish(stack, "two", savedmodels / "two")
    stack.wait_state("two", 1, "READY", timeout_s=60)
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1.0, 2.0]}]}
    answer = stack.inference.post("/v2/models/two/infer", json=body)
    assert answer.status_code == 200 and answer.json()["outputs"][0]["data"] == [2.0, 3.0]
    [described] = stack.api.get("/models/two/1").json()
    assert "not served: 'times_two' (predict)" in described["notes"], described["notes"]
    assert "serves signature 'serving_default'" in described["notes"]


def test_a_lookup_table_is_told_where_it_can_serve_not_to_save_again(stack, savedmodels):
    """Given a SavedModel whose graph holds a tf.lookup table, under backend: "openvino",
    When it is published,
    Then it is UNAVAILABLE saying OpenVINO does not convert lookup tables and that TensorFlow
    serves it, never to save it again with tf.saved_model.save."""
    publish(stack, "lookup", savedmodels / "lookup")
    # the files' events come in any order: a validation that ran before saved_model.pb
    # arrived says "no model file" until the next one sees it (the catalog converges)
    reason = str(
        wait_until(
            lambda: (
                (state := stack.state("lookup", 1)) is not None
                and state[0] == "UNAVAILABLE"
                and "no model file" not in str(state[1])
                and state[1]
            ),
            60,
        )
    )
    assert "lookup tables (tf.lookup)" in reason and "let TensorFlow serve it" in reason
    assert "tf.saved_model.save(" not in reason
    assert stack.services.catalog.get_version("lookup", 1).runtime in ("", "openvino")
