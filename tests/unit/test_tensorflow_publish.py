"""What the manage function knows of a SavedModel without TensorFlow: the signatures of
half_plus_two read from ``saved_model.pb``'s protobuf, the runtime chosen for
it, the warm-up file checked, and TF Serving's ``examples`` and row habits encoded. Nothing
here imports TensorFlow (one test proves it, in an interpreter of its own)."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lambdaserve.errors import InvalidInput, ModelRejected
from lambdaserve.protocol import tf_examples, tfserving
from lambdaserve.runtimes.protobuf_wire import fields
from lambdaserve.runtimes.tensorflow.metagraph import read_signatures
from lambdaserve.runtimes.tensorflow.runtime import read_checked
from lambdaserve.runtimes.tensorflow.warmup import WARMUP_FILE, warmup_requests
from lambdaserve.tensors.signature import Signature, TensorSpec

HALF = Path(__file__).parent.parent / "fixtures" / "half_plus_two"
TF1 = HALF / "tf1" / "00000123"
TF2 = HALF / "tf2" / "00000123"


def test_tf1_half_plus_two_signatures_are_read_without_tensorflow():
    # Given the TF1 half_plus_two; When its saved_model.pb is read
    signatures = {s.key: s for s in read_signatures((TF1 / "saved_model.pb").read_bytes())}
    # Then every signature is there, serving_default first, with its method and tensors
    assert next(iter(signatures)) == "serving_default"
    assert set(signatures) == {
        "serving_default",
        "classify_x_to_y",
        "regress_x_to_y",
        "regress_x_to_y2",
        "regress_x2_to_y3",
    }
    assert signatures["serving_default"].signature == Signature(
        (TensorSpec("x", "FP32", (-1, 1)),), (TensorSpec("y", "FP32", (-1, 1)),)
    )
    classify = signatures["classify_x_to_y"]
    assert classify.method == "tensorflow/serving/classify"
    assert classify.signature.inputs == (TensorSpec("inputs", "BYTES", (-1,)),)  # unknown rank
    assert classify.signature.outputs == (TensorSpec("scores", "FP32", (-1, 1)),)


def test_tf2_half_plus_two_marks_every_signature_predict():
    signatures = read_signatures((TF2 / "saved_model.pb").read_bytes())
    assert {s.method for s in signatures} == {"tensorflow/serving/predict"}
    assert len(signatures) == 6


def test_not_a_savedmodel_is_refused_naming_the_fix(tmp_path):
    (tmp_path / "saved_model.pb").write_bytes(b"\x0fnot a protobuf at all")
    with pytest.raises(ModelRejected, match="save it with tf.saved_model.save"):
        read_checked(tmp_path / "saved_model.pb")


def test_the_publish_path_imports_no_tensorflow():
    """Given a fresh interpreter (the manage function has no TensorFlow),
    When half_plus_two goes through the runtime choice and TensorFlow's inspect,
    Then TensorFlow serves it, with its signature, and no tensorflow module was imported."""
    pytest.importorskip("openvino")
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from lambdaserve.config.model_config import ModelConfig\n"
        "from lambdaserve.runtimes.openvino.runtime import OpenVinoRuntime\n"
        "from lambdaserve.runtimes.tensorflow.choice import inspect_savedmodel\n"
        f"chosen = inspect_savedmodel(OpenVinoRuntime(), Path({str(TF2 / 'saved_model.pb')!r}),"
        " ModelConfig(name='m'))\n"
        "assert chosen is not None\n"
        "print(chosen[0].name, chosen[1].inputs[0].name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split("\n")[:2] == ["tensorflow x", "[]"], done.stdout + done.stderr


def test_a_warmup_file_of_session_run_logs_is_refused_naming_the_fix(tmp_path):
    # Given a warm-up file with a session-run log (PredictionLog.session_run_log = 5)
    record = b"\x2a\x00"
    (tmp_path / "assets.extra").mkdir()
    framed = struct.pack("<Q", len(record)) + b"\0" * 4 + record + b"\0" * 4
    (tmp_path / WARMUP_FILE).write_bytes(framed)
    # When it is read; Then the refusal names the logs that replay
    with pytest.raises(ModelRejected, match="replays predict, classify, regress and multi"):
        warmup_requests(tmp_path)
    (tmp_path / WARMUP_FILE).write_bytes(framed[:-6])
    with pytest.raises(ModelRejected, match="runs past the end of the file"):
        warmup_requests(tmp_path)


def test_examples_become_serialized_tf_examples_with_their_context():
    # Given TF Serving's classify body with a context shared by every example
    document = {"context": {"c": 1, "x": 0.0}, "examples": [{"x": 2.0, "s": {"b64": "AAE="}}]}
    # When it is encoded
    [example] = tf_examples.serialized_examples(document)
    # Then it is an Example whose features are the example's, over the context's
    features = dict(fields(example))[1]
    assert isinstance(features, bytes)
    decoded = {}
    for _, entry in fields(features):
        pair = dict(fields(entry))
        kind, listed = next(iter(fields(pair[2])))
        decoded[pair[1].decode()] = (kind, dict(fields(listed))[1])
    assert decoded == {
        "c": (3, b"\x01"),  # int64_list, packed
        "x": (2, struct.pack("<f", 2.0)),  # float_list: the example's own x
        "s": (1, b"\x00\x01"),  # bytes_list, from base64
    }


@pytest.mark.parametrize(
    "document", [{"instances": [1]}, {"examples": [1]}, {"examples": [{"x": [1, "a"]}]}]
)
def test_what_is_not_examples_is_a_400_naming_the_form(document):
    with pytest.raises(InvalidInput, match="example|examples"):
        tf_examples.serialized_examples(document)


def test_classify_and_regress_answer_tf_servings_results():
    scores = {"scores": np.array([[3.0]], np.float32)}
    assert tf_examples.classify_results(scores, 1) == {"results": [[["", 3.0]]]}
    labelled = {"classes": np.array([[b"a", b"b"]], object), "scores": np.array([[0.25, 0.75]])}
    assert tf_examples.classify_results(labelled, 1) == {"results": [[["a", 0.25], ["b", 0.75]]]}
    assert tf_examples.regress_results({"outputs": np.array([[3.0], [4.0]])}, 2) == {
        "results": [3.0, 4.0]
    }


def test_rows_one_rank_short_are_fed_as_tensorflow_reshapes_them():
    """Given a [-1, 1] input (TF1 half_plus_two's x), When [2.0, 3.0] is sent as rows,
    Then the input is [[2.0], [3.0]] and a [2, 1] output answers flat, as TF Serving does."""
    signature = Signature((TensorSpec("x", "FP32", (-1, 1)),), (TensorSpec("y", "FP32", (-1, 1)),))
    parsed = tfserving.parse_predict({"instances": [2.0, 3.0]}, signature)
    assert parsed.request.inputs[0].shape == (2, 1) and parsed.added_dims == 1
    answer = tfserving.encode_predict(
        {"y": np.array([[3.0], [3.5]], np.float32)}, parsed.format, parsed.added_dims
    )
    assert answer == {"predictions": [3.0, 3.5]}
    fitting = tfserving.parse_predict({"instances": [[2.0]]}, signature)
    assert fitting.added_dims == 0 and fitting.request.inputs[0].shape == (1, 1)
