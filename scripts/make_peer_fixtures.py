"""Generate the peer-runtime model fixtures under tests/fixtures/peer_models/ (committed).

Real TF SavedModels, Paddle inference models and OpenVINO IR, made by the frameworks themselves,
so the tests need neither TensorFlow nor Paddle. Each stage runs in its own throwaway venv
(outside the repo) and merges its part into expected.json:

    V=/work/peer-venvs  # python3.11 -m venv $V/tf, $V/paddle, $V/ov, then in each:
    $V/tf/bin/pip install tensorflow-cpu numpy  # tested: tensorflow-cpu 2.21.0
    $V/paddle/bin/pip install paddlepaddle numpy  # tested: paddlepaddle 3.3.1
    $V/ov/bin/pip install openvino numpy  # tested: openvino 2026.4.1

    $V/tf/bin/python scripts/make_peer_fixtures.py --only tf
    $V/paddle/bin/python scripts/make_peer_fixtures.py --only paddle
    $V/ov/bin/python scripts/make_peer_fixtures.py --only openvino  # IR from savedmodel_mlp
    $V/ov/bin/python scripts/make_peer_fixtures.py --only check  # what OpenVINO alone reads

`tf` writes savedmodel_mlp/, savedmodel_two_inputs/, savedmodel_bytes/; `paddle` writes
paddle_mlp/ (legacy .pdmodel, saved with FLAGS_enable_pir_api=0) and paddle_mlp_pir/ (Paddle 3
model.json); `openvino` writes openvino_mlp/ (model.xml + model.bin); `check` reads every fixture
with openvino alone, compares with expected.json and records what it read under "openvino_read".
The weights are fixed (seeded, rounded to 2 decimals), so every MLP fixture computes the same y.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "peer_models"
EXPECTED = OUT / "expected.json"
MLP_X = np.array([[0.1, 0.2, 0.3, 0.4], [1.0, -1.0, 0.5, -0.5], [0.0, 0.0, 0.0, 0.0]], np.float32)
PAIR_A = np.array([[1.0, 2.0], [-0.5, 0.25]], np.float32)
PAIR_B = np.array([[3.0, -4.0], [2.0, 8.0]], np.float32)
TEXT = [b"hello", b"", b"\xff\xfebinary", "caf\u00e9".encode()]
ATOL = 1e-5


def mlp_weights() -> dict[str, np.ndarray]:
    """4 -> 8 (relu) -> 3 (softmax); weights laid out [in, out] as TF and Paddle both keep them."""
    rng = np.random.default_rng(20240601)
    shapes = {"w1": (4, 8), "b1": (8,), "w2": (8, 3), "b2": (3,)}
    return {k: np.round(rng.uniform(-1.0, 1.0, s), 2).astype(np.float32) for k, s in shapes.items()}


def mlp_numpy(x: np.ndarray) -> np.ndarray:
    w = mlp_weights()
    logits = np.maximum(x @ w["w1"] + w["b1"], 0.0) @ w["w2"] + w["b2"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def tensor_json(a: np.ndarray) -> dict[str, Any]:
    """One tensor for expected.json (shape as declared: batch -1); bytes as base64 (data_b64)."""
    shape = [-1, *a.shape[1:]]
    if a.dtype.kind in "SO":
        data = [base64.b64encode(v).decode() for v in a.tolist()]
        return {"dtype": "string", "shape": shape, "data_b64": data}
    return {"dtype": str(a.dtype), "shape": shape, "data": a.tolist()}


def fixture_json(fmt: str, inputs: dict[str, Any], outputs: dict[str, Any], **extra: Any) -> Any:
    ins = {k: tensor_json(v) for k, v in inputs.items()}
    outs = {k: tensor_json(v) for k, v in sorted(outputs.items())}
    return {"format": fmt, "inputs": ins, "outputs": outs, **extra}


def tensor_array(t: dict[str, Any]) -> np.ndarray:
    if t["dtype"] == "string":
        return np.array([base64.b64decode(v) for v in t["data_b64"]], dtype=object)
    return np.array(t["data"], dtype=t["dtype"])


def merge_expected(
    versions: dict[str, str], fixtures: dict[str, Any], key: str = "fixtures"
) -> None:
    doc: dict[str, Any] = json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {}
    doc.setdefault("versions", {}).update(versions)
    doc.setdefault(key, {}).update(fixtures)
    EXPECTED.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {', '.join(fixtures)} into {EXPECTED.relative_to(OUT.parent.parent.parent)}")


def fresh(name: str) -> Path:
    path = OUT / name
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def stage_tf() -> None:
    import tensorflow as tf

    w = mlp_weights()

    class Mlp(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w1, self.b1 = tf.Variable(w["w1"], name="w1"), tf.Variable(w["b1"], name="b1")
            self.w2, self.b2 = tf.Variable(w["w2"], name="w2"), tf.Variable(w["b2"], name="b2")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def serve(self, x: Any) -> dict[str, Any]:
            h = tf.nn.relu(tf.matmul(x, self.w1) + self.b1)
            return {"y": tf.nn.softmax(tf.matmul(h, self.w2) + self.b2)}

    class TwoInputs(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name=n) for n in "ab"])
        def serve(self, a: Any, b: Any) -> dict[str, Any]:
            return {"sum": a + b, "product": a * b}

    class Bytes(tf.Module):
        # tf.strings.length would be the natural op, but OpenVINO has no StringLength: the
        # reversal is a Gather on strings and the index a Range, both of which it runs.
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        def serve(self, text: Any) -> dict[str, Any]:
            n = tf.size(text, out_type=tf.int64)
            return {
                "reversed": tf.gather(text, tf.range(n - 1, -1, -1)),
                "index": tf.range(n, dtype=tf.int64),
            }

    cases: list[tuple[str, tf.Module, dict[str, np.ndarray]]] = [
        ("savedmodel_mlp", Mlp(), {"x": MLP_X}),
        ("savedmodel_two_inputs", TwoInputs(), {"a": PAIR_A, "b": PAIR_B}),
        ("savedmodel_bytes", Bytes(), {"text": np.array(TEXT, dtype=object)}),
    ]
    fixtures: dict[str, Any] = {}
    for name, module, inputs in cases:
        path = fresh(name)
        tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
        # outputs from the SavedModel as TF Serving loads it, not from the in-memory module
        fn = tf.saved_model.load(str(path)).signatures["serving_default"]
        feeds = {k: tf.constant(v.tolist() if v.dtype == object else v) for k, v in inputs.items()}
        outputs = {k: t.numpy() for k, t in fn(**feeds).items()}
        if name == "savedmodel_mlp":
            np.testing.assert_allclose(outputs["y"], mlp_numpy(MLP_X), atol=ATOL)
        fixtures[name] = fixture_json("tf_savedmodel", inputs, outputs, signature="serving_default")
    merge_expected({"tensorflow": tf.__version__, "numpy(tf)": np.__version__}, fixtures)


def stage_paddle(form: str | None) -> None:
    if form is None:  # the program format is chosen at import time: one child process per form
        for child, pir in (("legacy", "0"), ("pir", "1")):
            env = {**os.environ, "FLAGS_enable_pir_api": pir}
            cmd = [sys.executable, __file__, "--only", "paddle", "--paddle-form", child]
            subprocess.run(cmd, env=env, check=True)
        return
    import paddle
    import paddle.inference as pi

    name = {"legacy": "paddle_mlp", "pir": "paddle_mlp_pir"}[form]
    paddle.seed(0)
    w = mlp_weights()

    class Mlp(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = paddle.nn.Linear(4, 8)
            self.fc2 = paddle.nn.Linear(8, 3)

        def forward(self, x: Any) -> Any:
            h = paddle.nn.functional.relu(self.fc1(x))
            return paddle.nn.functional.softmax(self.fc2(h))

    model = Mlp()
    for layer, i in ((model.fc1, 1), (model.fc2, 2)):
        layer.weight.set_value(w[f"w{i}"])
        layer.bias.set_value(w[f"b{i}"])
    model.eval()
    path = fresh(name)
    spec = [paddle.static.InputSpec([None, 4], "float32", "x")]
    paddle.jit.save(model, str(path / "model"), input_spec=spec)
    program = "model.pdmodel" if form == "legacy" else "model.json"
    assert (path / program).exists(), sorted(p.name for p in path.iterdir())
    # outputs from the saved files through Paddle Inference, as Paddle Serving runs them
    config = pi.Config(str(path / program), str(path / "model.pdiparams"))
    config.disable_gpu()
    predictor = pi.create_predictor(config)
    feed = predictor.get_input_handle("x")
    feed.reshape(list(MLP_X.shape))
    feed.copy_from_cpu(MLP_X)
    predictor.run()
    out_name = predictor.get_output_names()[0]
    y = predictor.get_output_handle(out_name).copy_to_cpu()
    np.testing.assert_allclose(y, mlp_numpy(MLP_X), atol=ATOL)
    files = sorted(p.name for p in path.iterdir())
    fixtures = {name: fixture_json(f"paddle_{form}", {"x": MLP_X}, {out_name: y}, files=files)}
    merge_expected({"paddlepaddle": paddle.__version__, "numpy(paddle)": np.__version__}, fixtures)


def stage_openvino() -> None:
    import openvino as ov

    model = ov.convert_model(str(OUT / "savedmodel_mlp"))
    path = fresh("openvino_mlp")
    path.mkdir()
    ov.save_model(model, str(path / "model.xml"), compress_to_fp16=False)
    y = ov_run(ov.Core().read_model(path / "model.xml"), {"x": MLP_X})["y"]
    np.testing.assert_allclose(y, mlp_numpy(MLP_X), atol=ATOL)
    fixture = fixture_json("openvino_ir", {"x": MLP_X}, {"y": y}, converted_from="savedmodel_mlp")
    merge_expected({"openvino": ov.__version__}, {"openvino_mlp": fixture})


def port_json(port: Any) -> dict[str, Any]:
    shape = [d.get_length() if d.is_static else -1 for d in port.get_partial_shape()]
    kind = port.get_element_type().get_type_name()
    return {"names": sorted(port.get_names()), "shape": shape, "type": kind}


def ov_run(model: Any, inputs: dict[str, np.ndarray], f32: bool = True) -> dict[str, np.ndarray]:
    """Run on CPU; f32 pins the precision (the plugin's default is bf16 where the CPU has it)."""
    import openvino as ov

    config = {"INFERENCE_PRECISION_HINT": "f32"} if f32 else {}
    request = ov.Core().compile_model(model, "CPU", config).create_infer_request()
    for name, array in inputs.items():
        if array.dtype == object:  # list of bytes: an 'S' array would drop trailing NULs
            request.set_tensor(name, ov.Tensor(array.tolist()))
        else:
            request.set_tensor(name, ov.Tensor(np.ascontiguousarray(array)))
    request.infer()
    out: dict[str, np.ndarray] = {}
    for port in model.outputs:
        t = request.get_tensor(port)
        text = t.element_type == ov.Type.string  # bytes_data: str_data would decode as UTF-8
        out.update(
            dict.fromkeys(
                port.get_names(), np.array(t.bytes_data, dtype=object) if text else t.data.copy()
            )
        )
    return out


def compare(got: dict[str, np.ndarray], outputs: dict[str, Any]) -> tuple[bool, float]:
    """(every expected output present by name and equal within ATOL, max abs diff of floats)."""
    ok, worst = True, 0.0
    for name, t in outputs.items():
        want, have = tensor_array(t), got.get(name)
        if have is None or have.shape != want.shape:
            ok = False
        elif want.dtype == object or want.dtype.kind in "iu":
            ok &= have.tolist() == want.tolist()
        else:
            worst = max(worst, float(np.abs(have - want).max()))
    return ok and worst <= ATOL, worst


def stage_check() -> None:
    import openvino as ov
    from openvino.frontend import FrontEndManager

    def paddle_frontend(path: str) -> Any:
        fe = FrontEndManager().load_by_framework("paddle")
        return fe.convert(fe.load(path))

    expected = json.loads(EXPECTED.read_text())["fixtures"]
    targets = {
        "savedmodel_mlp": ["", "saved_model.pb"],
        "savedmodel_two_inputs": ["", "saved_model.pb"],
        "savedmodel_bytes": ["", "saved_model.pb"],
        "paddle_mlp": ["model.pdmodel", ""],
        "paddle_mlp_pir": ["model.json", ""],
        "openvino_mlp": ["model.xml", ""],
    }
    readers: dict[str, Any] = {
        "read_model": ov.Core().read_model,
        "convert_model": ov.convert_model,
    }
    report: dict[str, Any] = {}
    for name, rels in targets.items():
        fixture = expected[name]
        inputs = {k: tensor_array(t) for k, t in fixture["inputs"].items()}
        these = readers | ({"paddle_frontend": paddle_frontend} if "paddle" in name else {})
        for rel in rels:
            key = f"{name}/{rel}"
            for reader, read in these.items():
                entry: dict[str, Any] = {}
                report.setdefault(key, {})[reader] = entry
                try:
                    model = read(str(OUT / key))
                except Exception as e:  # recording what fails is the point
                    entry["error"] = " ".join(str(e).replace(str(OUT), "").split())[:300]
                    print(f"{reader:15} {key:36} FAILS {entry['error'][:100]}")
                    continue
                entry["inputs"] = [port_json(p) for p in model.inputs]
                entry["outputs"] = [port_json(p) for p in model.outputs]
                entry["outputs_match_f32"] = compare(ov_run(model, inputs), fixture["outputs"])[0]
                default = compare(ov_run(model, inputs, f32=False), fixture["outputs"])[1]
                entry["max_abs_diff_default_precision"] = default
                ports = [sorted(p.get_names()) for p in (*model.inputs, *model.outputs)]
                print(f"{reader:15} {key:36} reads {ports} match={entry['outputs_match_f32']}")
    hint = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()
    versions = {"openvino(check)": ov.__version__, "openvino_cpu_default_precision(check)": hint}
    merge_expected(versions, report, key="openvino_read")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", required=True, choices=["tf", "paddle", "openvino", "check"])
    parser.add_argument("--paddle-form", choices=["legacy", "pir"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.only == "paddle":
        stage_paddle(args.paddle_form)
    else:
        {"tf": stage_tf, "openvino": stage_openvino, "check": stage_check}[args.only]()


if __name__ == "__main__":
    main()
