"""ONNX Runtime backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort

from lambdaserve.errors import ModelRejected
from lambdaserve.modelconfig import ModelConfig, TensorSpec
from lambdaserve.runtimes import Signature

_ORT_TO_V2 = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
    "tensor(bfloat16)": "BF16",
}


class OnnxRuntime:
    """Validates and (later) serves ``model.onnx`` with onnxruntime."""

    name = "onnxruntime"

    def inspect(self, model_path: Path, config: ModelConfig) -> Signature:
        check_external_data(model_path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        try:
            session = ort.InferenceSession(
                str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises several unrelated types
            raise ModelRejected(f"onnxruntime cannot load model.onnx: {_first_line(exc)}") from exc
        return Signature(
            inputs=tuple(_spec(i) for i in session.get_inputs()),
            outputs=tuple(_spec(o) for o in session.get_outputs()),
        )


def check_external_data(model_path: Path) -> None:
    """Reject external-data references that leave the version directory."""
    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError and friends
        raise ModelRejected(
            f"model.onnx is not an ONNX model ({_first_line(exc)}); export it with "
            "torch.onnx.export or onnx.save"
        ) from exc
    root = model_path.parent.resolve()
    for tensor in onnx.external_data_helper._get_all_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        target = (root / location).resolve()
        if Path(location).is_absolute() or not target.is_relative_to(root):
            raise ModelRejected(
                f"tensor {tensor.name!r} points its external data at {location!r}, outside the "
                "version directory; keep external data files next to model.onnx"
            )
        if not target.is_file():
            raise ModelRejected(
                f"tensor {tensor.name!r} needs external data file {location!r}; upload it "
                "into the same version directory"
            )


def _spec(node: Any) -> TensorSpec:
    shape = tuple(d if isinstance(d, int) and d > 0 else -1 for d in (node.shape or []))
    return TensorSpec(node.name, _ORT_TO_V2.get(node.type, node.type), shape)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
