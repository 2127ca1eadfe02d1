"""Prove the CUDA paths of the runtimes on a GPU machine (also a smoke test for the ECS image).

Builds a seeded MLP 784->256->10 as TorchScript and ONNX, loads each through lambdaserve's
runtimes with a KIND_GPU config (``LoadOptions(device="auto")``), checks where it runs,
compares outputs with a CPU load of the same file, and times a batch on each device.

    python scripts/gpu_check.py            # exits non-zero if a CUDA path misbehaves
"""

from __future__ import annotations

import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.runtimes.onnx import OnnxRuntime
from lambdaserve.runtimes.torchscript import TorchScriptRuntime
from lambdaserve.tensors.signature import Signature, TensorSpec

SIGNATURE = Signature(
    inputs=(TensorSpec("INPUT__0", "FP32", (-1, 784)),),
    outputs=(TensorSpec("OUTPUT__0", "FP32", (-1, 10)),),
)
GPU = ModelConfig(
    name="mlp",
    max_batch_size=0,
    inputs=SIGNATURE.inputs,
    outputs=SIGNATURE.outputs,
    instance_kind="GPU",
)
CPU = ModelConfig(
    name="mlp", inputs=SIGNATURE.inputs, outputs=SIGNATURE.outputs, instance_kind="CPU"
)


def timed_ms(run, repeats: int = 50) -> float:
    for _ in range(5):
        run()
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    return (time.perf_counter() - start) / repeats * 1000


def main() -> int:
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    ).eval()
    batch = np.random.default_rng(0).random((256, 784), dtype=np.float32)
    report: dict[str, object] = {"cuda_available": torch.cuda.is_available()}
    failures = []
    with tempfile.TemporaryDirectory() as scratch:
        pt, onnx_path = Path(scratch, "model.pt"), Path(scratch, "model.onnx")
        torch.jit.save(torch.jit.trace(module, torch.zeros(1, 784)), str(pt))
        buffer = io.BytesIO()
        torch.onnx.export(
            module,
            (torch.zeros(1, 784),),
            buffer,
            input_names=["INPUT__0"],
            output_names=["OUTPUT__0"],
            dynamic_axes={"INPUT__0": {0: "b"}, "OUTPUT__0": {0: "b"}},
            opset_version=17,
            dynamo=False,
        )
        onnx_path.write_bytes(buffer.getvalue())
        for name, runtime, path in (
            ("torchscript", TorchScriptRuntime(), pt),
            ("onnxruntime", OnnxRuntime(), onnx_path),
        ):
            on_gpu = runtime.load(path, GPU, SIGNATURE, LoadOptions(device="auto"))
            on_cpu = runtime.load(path, CPU, SIGNATURE, LoadOptions(device="auto"))
            got = on_gpu.run({"INPUT__0": batch}, ["OUTPUT__0"])["OUTPUT__0"]
            want = on_cpu.run({"INPUT__0": batch}, ["OUTPUT__0"])["OUTPUT__0"]
            entry = {
                "device_for_KIND_GPU": on_gpu.device,
                "device_for_KIND_CPU": on_cpu.device,
                "max_abs_diff_vs_cpu": float(np.abs(got - want).max()),
                "batch256_ms_gpu_load": round(
                    timed_ms(lambda m=on_gpu: m.run({"INPUT__0": batch}, ["OUTPUT__0"])), 3
                ),
                "batch256_ms_cpu_load": round(
                    timed_ms(lambda m=on_cpu: m.run({"INPUT__0": batch}, ["OUTPUT__0"])), 3
                ),
            }
            if name == "onnxruntime":
                import onnxruntime as ort

                entry["available_providers"] = ort.get_available_providers()
                cuda_ep = "CUDAExecutionProvider" in ort.get_available_providers()
                expected = "cuda" if cuda_ep else "cpu"
            else:
                expected = "cuda" if torch.cuda.is_available() else "cpu"
            if on_gpu.device != expected or on_cpu.device != "cpu":
                failures.append(f"{name}: KIND_GPU ran on {on_gpu.device}, expected {expected}")
            if entry["max_abs_diff_vs_cpu"] > 1e-3:
                failures.append(
                    f"{name}: GPU and CPU outputs differ by {entry['max_abs_diff_vs_cpu']}"
                )
            report[name] = entry
    print(json.dumps(report, indent=2))
    for failure in failures:
        print("FAIL:", failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
