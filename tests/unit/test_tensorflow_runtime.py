"""TensorFlow's runtime on half_plus_two (TF Serving's test model, built here): where
TensorFlow is missing the load fails naming each fix, and a load after it is installed
succeeds; every signature runs by name; bad inputs are a 400 naming the signature."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.errors import InferenceError, InvalidInput
from lambdaserve.runtimes.base import LoadOptions, SignaturesModel
from lambdaserve.runtimes.registry import runtime_named

pytestmark = [
    pytest.mark.tensorflow,  # TensorFlow's native library: a pytest process of its own
    pytest.mark.skipif(
        importlib.util.find_spec("tensorflow") is None, reason="tensorflow is not installed"
    ),
]
TF1 = (
    Path(__file__).parent.parent
    / "fixtures"
    / "half_plus_two"
    / "tf1"
    / "00000123"
    / "saved_model.pb"
)


def load(options: LoadOptions | None = None):
    runtime = runtime_named("tensorflow")
    config = ModelConfig(name="half_plus_two")
    return runtime.load(TF1, config, runtime.inspect(TF1, config), options or LoadOptions())


def test_without_tensorflow_the_load_names_each_fix_and_a_later_load_succeeds(monkeypatch):
    # Given an environment where tensorflow cannot be imported
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    # When the version loads; Then it fails naming every way to install TensorFlow
    with pytest.raises(InferenceError) as missing:
        load()
    for fix in (
        "make dev TENSORFLOW=1",
        "make build VARIANT=tensorflow",
        "pip install 'lambdaserve[tensorflow]'",
    ):
        assert fix in missing.value.message
    # And once TensorFlow is there, a load imports it again and serves
    monkeypatch.delitem(sys.modules, "tensorflow")
    model = load(LoadOptions(intra_op_threads=1))
    assert model.run({"x": np.array([[2.0]], np.float32)}, ["y"])["y"].tolist() == [[3.0]]


def test_every_signature_runs_by_name():
    model = load()
    assert isinstance(model, SignaturesModel) and model.default_signature == "serving_default"
    assert model.signature_defs()["regress_x2_to_y3"].method == "tensorflow/serving/regress"
    y3 = model.run_signature("regress_x2_to_y3", {"inputs": np.array([[1.0]], np.float32)}, ())
    assert y3["outputs"].tolist() == [[3.5]]  # y3 = 0.5 * x2 + 3


def test_a_bad_input_is_a_400_naming_the_signature():
    model = load()
    with pytest.raises(InvalidInput, match="regress_x_to_y"):
        model.run_signature("regress_x_to_y", {"inputs": np.array([b"not an Example"])}, ())
    with pytest.raises(InvalidInput, match="not found in signature def"):
        model.run_signature("nope", {}, ())
