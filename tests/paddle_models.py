"""Paddle inference models built by paddle itself, in the layouts Paddle users have them, with
what Paddle's own predictor answers for one input.

Paddle Serving's classic example, uci_housing (13 floats -> fc -> 1 float), saved as Paddle
1.x saved it: a static program whose ``fc`` is the ``mul`` operator, written as ``__model__``
with one file per parameter (uci_housing_model's layout) or with ``__params__``; the same
program as ``model.pdmodel`` (a re-saved model keeping ``mul``, which OpenVINO cannot read);
and a Paddle 2 program (``paddle.nn.Linear``: ``matmul_v2``, which OpenVINO reads).

Built in a subprocess: the legacy ProgramDesc format needs FLAGS_enable_pir_api=0 before
paddle is imported, and the tests' own process should not carry paddle's global state.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

INPUT = np.random.RandomState(1).standard_normal((4, 13)).astype(np.float32)
# layout -> its files' directory under the build root; each answers one output
LAYOUTS = ("uci_housing", "uci_combined", "mul_pdmodel", "linear_pdmodel")

_SCRIPT = r"""
import json, os, shutil, sys
from pathlib import Path
os.environ["FLAGS_enable_pir_api"] = "0"
import numpy as np
import paddle
import paddle.inference as inference

out = Path(sys.argv[1])
x_value = np.array(json.loads(sys.argv[2]), dtype=np.float32)
paddle.enable_static()
exe = paddle.static.Executor(paddle.CPUPlace())
scope = paddle.static.global_scope()


def program(layer):
    main, start = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, start):
        x = paddle.static.data("x", [None, 13], "float32")
        y = layer(x)
    exe.run(start)
    rng = np.random.RandomState(0)
    for parameter in main.all_parameters():  # weights that make every output differ
        value = rng.standard_normal(parameter.shape).astype(np.float32)
        scope.var(parameter.name).get_tensor().set(value, paddle.CPUPlace())
    return main, x, y


def saved(main, x, y, prefix):
    paddle.static.save_inference_model(str(prefix), [x], [y], exe, program=main)
    return Path(f"{prefix}.pdmodel"), Path(f"{prefix}.pdiparams")


main, x, y = program(lambda x: paddle.static.nn.fc(x, 1))  # Paddle 1.x's fc: mul
ops = sorted({op.type for op in main.global_block().ops})
pdmodel, pdiparams = saved(main, x, y, out / "build" / "fc")
for name in ("uci_housing", "uci_combined", "mul_pdmodel"):
    (out / name).mkdir(parents=True)
shutil.copy(pdmodel, out / "uci_housing" / "__model__")
parameters = [v for v in main.list_vars() if v.persistable and v.name not in ("feed", "fetch")]
paddle.static.io.save_vars(exe, str(out / "uci_housing"), main, vars=parameters)
shutil.copy(pdmodel, out / "uci_combined" / "__model__")
shutil.copy(pdiparams, out / "uci_combined" / "__params__")
shutil.copy(pdmodel, out / "mul_pdmodel" / "model.pdmodel")
shutil.copy(pdiparams, out / "mul_pdmodel" / "model.pdiparams")

main, x, y = program(lambda x: paddle.nn.Linear(13, 1)(x))  # Paddle 2: matmul_v2
(out / "linear_pdmodel").mkdir()
pdmodel, pdiparams = saved(main, x, y, out / "build" / "linear")
shutil.copy(pdmodel, out / "linear_pdmodel" / "model.pdmodel")
shutil.copy(pdiparams, out / "linear_pdmodel" / "model.pdiparams")
shutil.rmtree(out / "build")


def predicted(config):
    config.disable_gpu()
    config.disable_glog_info()
    predictor = inference.create_predictor(config)
    handle = predictor.get_input_handle(predictor.get_input_names()[0])
    handle.reshape(list(x_value.shape))
    handle.copy_from_cpu(x_value)
    predictor.run()
    (name,) = predictor.get_output_names()
    return name, predictor.get_output_handle(name).copy_to_cpu().tolist()


answers = {
    "uci_housing": predicted(inference.Config(str(out / "uci_housing"))),
    "uci_combined": predicted(
        inference.Config(str(out / "uci_combined/__model__"), str(out / "uci_combined/__params__"))
    ),
}
for name in ("mul_pdmodel", "linear_pdmodel"):
    d = out / name
    config = inference.Config(str(d / "model.pdmodel"), str(d / "model.pdiparams"))
    answers[name] = predicted(config)
(out / "expected.json").write_text(json.dumps({"ops": ops, "answers": answers}))
"""


def build_paddle_models(root: Path) -> dict[str, tuple[str, np.ndarray]]:
    """Each layout's directory under ``root``; returns layout -> (output name, what Paddle's
    predictor answered for ``INPUT``). Raises with paddle's output when it fails."""
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(root), json.dumps(INPUT.tolist())],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"building the Paddle models failed:\n{done.stderr[-3000:]}")
    expected = json.loads((root / "expected.json").read_text())
    assert "mul" in expected["ops"], expected["ops"]  # the old operator under test
    return {
        layout: (name, np.array(values, dtype=np.float32))
        for layout, (name, values) in expected["answers"].items()
    }


def version_files(root: Path, layout: str) -> dict[str, bytes]:
    """A layout's files, as they go into a version directory."""
    return {p.name: p.read_bytes() for p in sorted((root / layout).iterdir()) if p.is_file()}
