"""Paddle Inference for the Paddle models OpenVINO does not read: Paddle 1.x's ``__model__``
(one file per parameter, or ``__params__``) and programs with old operators (``mul``), built
by paddle itself (tests/paddle_models.py) and answered as Paddle's own predictor answers."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.abc import MetaPathFinder
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest

from lambdaserve.catalog import version_policy
from lambdaserve.config.model_config import ModelConfig
from lambdaserve.errors import ModelRejected
from lambdaserve.handlers import load_check
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.publishing.serving_check import InProcessCheck
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.runtimes.paddle_inference.program import read_program
from lambdaserve.runtimes.paddle_inference.runtime import PaddleInferenceRuntime
from lambdaserve.tensors.signature import TensorSpec
from lambdaserve.wiring.inference import build_model_server
from tests.paddle_models import INPUT, build_paddle_models, version_files
from tests.unit.test_validation import validate

# paddle's native library is loaded here: these tests run in a pytest process of their own
# (`make test` runs `-m own_process` after the rest), see the marker in pyproject.toml
pytestmark = [
    pytest.mark.own_process,
    pytest.mark.skipif(
        find_spec("paddle") is None, reason="paddlepaddle is not installed (make install-test)"
    ),
]
UCI_SIGNATURE = ((TensorSpec("x", "FP32", (-1, 13)),), (TensorSpec("fc_0.tmp_1", "FP32", (-1, 1)),))


@pytest.fixture(scope="module")
def paddle_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("paddle")
    return root, build_paddle_models(root)


@pytest.mark.parametrize("layout", ["uci_housing", "uci_combined"])
def test_the_program_says_its_signature_ops_and_parameters_without_paddle(paddle_models, layout):
    # Given Paddle 1.x's __model__ as paddle wrote it
    root, _ = paddle_models
    # When its ProgramDesc is read
    program = read_program((root / layout / "__model__").read_bytes(), "__model__")
    # Then its feed and fetch are the signature, and mul and its parameters are named
    assert (program.signature.inputs, program.signature.outputs) == UCI_SIGNATURE
    assert "mul" in program.ops
    assert program.parameters == ("fc_0.b_0", "fc_0.w_0")


@pytest.mark.parametrize(
    ("layout", "config", "runtime"),
    [
        ("uci_housing", "", "paddle_inference"),  # Paddle Serving's uci_housing_model
        ("uci_combined", "", "paddle_inference"),
        ("mul_pdmodel", "", "paddle_inference"),  # OpenVINO: no creator for mul
        ("linear_pdmodel", "", "openvino"),  # OpenVINO reads it: the default
        ("linear_pdmodel", "paddle_inference", "paddle_inference"),  # the config forces it
        ("uci_housing", "paddle", "paddle_inference"),  # Triton's name for Paddle's backend
    ],
)
def test_the_runtime_is_chosen_by_what_openvino_reads(aws, paddle_models, layout, config, runtime):
    # Given a Paddle model in one of its users' layouts (and a config's backend)
    root, _ = paddle_models
    files = version_files(root, layout)
    # When it is validated
    result = validate(aws, "uci", 1, files, ModelConfig(name="uci", backend=config))
    # Then the runtime that reads it is recorded, with the program's signature
    assert result.runtime == runtime
    assert result.signature.inputs[0] == TensorSpec("x", "FP32", (-1, 13))
    if layout == "mul_pdmodel":  # why Paddle Inference serves it is kept with the version
        assert "served by Paddle Inference" in result.notes and "mul" in result.notes


def test_a_parameter_file_left_out_is_named(aws, paddle_models):
    # Given uci_housing_model uploaded without its weights file
    root, _ = paddle_models
    files = version_files(root, "uci_housing")
    del files["fc_0.w_0"]
    # Then the version is refused naming the file and the two layouts that work
    with pytest.raises(ModelRejected, match=r"fc_0\.w_0 that are not in the version: upload "):
        validate(aws, "uci", 1, files)


def test_openvino_forced_on_a_mul_program_is_refused_with_openvinos_reason(aws, paddle_models):
    # Given the mul program with backend: "openvino"
    root, _ = paddle_models
    files = version_files(root, "mul_pdmodel")
    # Then OpenVINO's own refusal is the reason (the config chose it)
    with pytest.raises(ModelRejected, match="mul"):
        validate(aws, "uci", 1, files, ModelConfig(name="uci", backend="openvino"))


@pytest.mark.parametrize("layout", ["uci_housing", "uci_combined", "mul_pdmodel", "linear_pdmodel"])
def test_paddle_inference_answers_what_paddles_predictor_computed(paddle_models, layout):
    # Given each layout, loaded by the runtime with two threads
    root, expected = paddle_models
    model_file = "__model__" if layout.startswith("uci") else "model.pdmodel"
    runtime = PaddleInferenceRuntime()
    path = root / layout / model_file
    signature = runtime.inspect(path, ModelConfig(name="uci"))
    model = runtime.load(path, ModelConfig(name="uci"), signature, LoadOptions(intra_op_threads=2))
    # When it runs the input Paddle's predictor ran (a read-only view, as binary bodies are)
    name, answer = expected[layout]
    view = INPUT.copy()
    view.flags.writeable = False
    got = model.run({"x": view}, [name])
    # Then it answers the same numbers, with the shape the batch asks
    np.testing.assert_allclose(got[name], answer, rtol=1e-6, atol=1e-6)
    assert got[name].shape == (4, 1)


# Preludes run before the load in a fresh interpreter (what that process has, or lacks)
_WITHOUT_PADDLE = r"""
from importlib.abc import MetaPathFinder


class NoPaddle(MetaPathFinder):  # as if paddlepaddle were not installed
    def find_spec(self, name, path=None, target=None):
        if name == "paddle" or name.startswith("paddle."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoPaddle())
"""
_AFTER_TENSORFLOW = """
import tensorflow  # as model code running in-process may have done
"""
_LOAD_UCI = """
import json, sys
from pathlib import Path
{prelude}
from lambdaserve.config.model_config import ModelConfig
from lambdaserve.errors import InferenceError
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.runtimes.paddle_inference.runtime import PaddleInferenceRuntime

path = Path(sys.argv[1])
runtime = PaddleInferenceRuntime()
signature = runtime.inspect(path, ModelConfig(name="uci"))
try:
    runtime.load(path, ModelConfig(name="uci"), signature, LoadOptions())
except InferenceError as exc:
    reason = exc.message
else:
    reason = "loaded"
print(json.dumps({"inputs": [s.name for s in signature.inputs], "reason": reason,
                  "paddle_imported": "paddle" in sys.modules}))
"""


def load_in_a_fresh_process(prelude: str, root: Path) -> subprocess.CompletedProcess[str]:
    """uci_housing inspected and loaded by a new interpreter after ``prelude``; its last line
    of output is what it saw, as JSON."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            _LOAD_UCI.replace("{prelude}", prelude),
            str(root / "uci_housing" / "__model__"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_without_paddle_the_signature_is_read_and_the_load_names_the_fix(paddle_models):
    # Given a process where paddle cannot be imported (a meta-path finder refuses it)
    root, _ = paddle_models
    done = load_in_a_fresh_process(_WITHOUT_PADDLE, root)
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    # Then the manage side still reads the signature (no paddle needed)
    assert answer["inputs"] == ["x"] and not answer["paddle_imported"]
    # And the load says what is missing and each way to install it
    reason = answer["reason"]
    assert reason.startswith("Paddle Inference (the paddlepaddle package) is not installed")
    assert "make dev PADDLE=1" in reason and "make build VARIANT=paddle" in reason
    assert "pip install 'lambdaserve[paddle]'" in reason


def test_after_tensorflow_the_load_is_refused_with_why_not_a_crash(paddle_models):
    # Given a process where TensorFlow was imported first (libpaddle segfaults beside it)
    if find_spec("tensorflow") is None:  # found, never imported here: it would stay loaded
        pytest.skip("tensorflow is not installed (make install-test)")
    root, _ = paddle_models
    # When a Paddle 1.x model is loaded there
    done = load_in_a_fresh_process(_AFTER_TENSORFLOW, root)
    # Then the process lives, paddle was never imported, and the reason says what to do
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert not answer["paddle_imported"]
    assert "TensorFlow was imported here first" in answer["reason"]
    assert "LAMBDASERVE_CODE_WORKERS" in answer["reason"]


class _NoPaddle(MetaPathFinder):
    """The import system as it is where paddlepaddle is not installed."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "paddle" or name.startswith("paddle."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def test_a_paddle_version_is_unavailable_without_paddle_and_ready_after_a_load(
    aws, paddle_models, monkeypatch
):
    # Given the stack checking versions where they serve (as `lambdaserve dev` does), in a
    # process where paddle cannot be imported (not installed: the import system refuses it)
    serving = build_model_server(aws.settings, aws.clients)
    aws.services.registrar.check_where_it_serves(
        InProcessCheck(lambda event: load_check.handle(event, serving))
    )
    blocker = _NoPaddle()
    monkeypatch.setattr(sys, "meta_path", [blocker, *sys.meta_path])
    for name in [m for m in sys.modules if m == "paddle" or m.startswith("paddle.")]:
        monkeypatch.delitem(sys.modules, name)
    root, expected = paddle_models
    # When uci_housing_model is published
    for path, body in version_files(root, "uci_housing").items():
        aws.put(f"models/uci/1/{path}", body)
    aws.services.registrar.on_version_change("uci", 1)
    # Then it is never READY: the reason says where it was checked and what installs paddle
    record = aws.services.catalog.get_version("uci", 1)
    assert record.state == version_policy.UNAVAILABLE
    assert record.reason.startswith("failed to load where it serves (the infer process")
    assert "Paddle Inference (the paddlepaddle package) is not installed" in record.reason
    assert "make dev PADDLE=1" in record.reason
    # When paddle is installed and Triton's load is asked for
    monkeypatch.undo()
    aws.services.manager.load("uci")
    # Then the check runs again, and the version is READY and answers Paddle's numbers
    assert aws.services.catalog.get_version("uci", 1).state == version_policy.READY
    name, answer = expected["uci_housing"]
    got = serving.infer("uci", None, InferRequest(inputs=[v2_input()]), lambda _, o: o)
    np.testing.assert_allclose(got[name], answer, rtol=1e-6, atol=1e-6)


def v2_input() -> InferInput:
    return InferInput("x", "FP32", INPUT.shape, INPUT)
