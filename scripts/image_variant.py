"""The stack's images in one variant, chosen by one argument: writes a copy of template.yaml
whose image functions carry the Docker build arguments of that variant, for `sam build -t`.

    python scripts/image_variant.py cpu|torch|torchserve|paddle|tensorflow|mixed
    # prints the variant template's path

- cpu (default): ONNX Runtime and OpenVINO (the Dockerfiles' defaults);
- torch: PyTorch 2.13.0 (CPU wheels) beside them, for TorchScript versions;
- torchserve: TorchServe's `ts` package and PyTorch, for handlers run by TorchServe's code;
- paddle: Paddle Inference (paddlepaddle, CPU) in the infer image, for the Paddle models
  OpenVINO does not read (Paddle 1.x's __model__, old operators). The manage image needs no
  paddle: it reads a Paddle program's signature from its protobuf.
- mixed: TorchServe's `ts` and PyTorch, and TensorFlow, in the infer image: a mixed team's
  handlers and every signature of its SavedModels from one image (the mixed-team profile);
- tensorflow: TensorFlow (tensorflow-cpu) in the infer image, for the SavedModels OpenVINO
  does not serve (graphs it refuses, signatures other than serving_default). The manage image
  needs no TensorFlow: it reads a SavedModel's signatures from its protobuf.

The GPU image for ECS (GpuImageUri, ServerModeImageUri) is functions/infer/Dockerfile.gpu,
built with `make gpu-image`: SAM builds only the Lambda images.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# variant -> Dockerfile -> EXTRAS
VARIANTS: dict[str, dict[str, str]] = {
    "cpu": {},
    "torch": {
        "functions/infer/Dockerfile": "images,openvino,torch",
        "functions/manage/Dockerfile": "openvino,torch",
    },
    "torchserve": {
        "functions/infer/Dockerfile": "images,openvino,torchserve",
        "functions/manage/Dockerfile": "openvino,torch",
    },
    "paddle": {"functions/infer/Dockerfile": "images,openvino,paddle"},
    "tensorflow": {"functions/infer/Dockerfile": "images,openvino,tensorflow"},
    "mixed": {
        "functions/infer/Dockerfile": "images,openvino,torchserve,tensorflow",
        "functions/manage/Dockerfile": "openvino,torch",
    },
}
# The lock each variant's image installs (locks/NAME.txt), where it is not the Dockerfile's own
# default; the torch variants have none (PyTorch's CPU wheels are not on PyPI: the Dockerfiles
# resolve them under the test lock's versions instead)
LOCKS: dict[str, dict[str, str]] = {
    "paddle": {"functions/infer/Dockerfile": "infer-paddle"},
    "tensorflow": {"functions/infer/Dockerfile": "infer-tensorflow"},
}
# Variants whose wheels come from PyTorch's CPU index (the others need no extra index)
TORCH_VARIANTS = frozenset({"torch", "torchserve", "mixed"})
_METADATA = re.compile(
    r"^(?P<indent> +)Dockerfile: (?P<dockerfile>\S+)\n(?P=indent)DockerContext: \.\n"
    r"(?P=indent)DockerTag: (?P<tag>\S+)\n",
    re.M,
)


def variant_template(variant: str, template: str) -> str:
    """``template`` with each image function's build arguments for ``variant``."""
    if variant not in VARIANTS:
        raise SystemExit(f"unknown variant {variant!r}: one of {', '.join(VARIANTS)}")
    extras = VARIANTS[variant]

    def with_args(match: re.Match[str]) -> str:
        wanted = extras.get(match["dockerfile"])
        if not wanted:
            return match[0]
        indent, tag = match["indent"], match["tag"]
        index = f"{indent}  TORCH_INDEX: {TORCH_INDEX}\n" if variant in TORCH_VARIANTS else ""
        lock = LOCKS.get(variant, {}).get(match["dockerfile"])
        index += f"{indent}  LOCK: {lock}\n" if lock else ""
        return (
            match[0].replace(f"DockerTag: {tag}", f"DockerTag: {tag}-{variant}")
            + f"{indent}DockerBuildArgs:\n"
            f"{indent}  EXTRAS: {wanted}\n" + index
        )

    return _METADATA.sub(with_args, template)


def main() -> None:
    variant = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    out = ROOT / ".aws-sam" / f"template.{variant}.yaml"
    out.parent.mkdir(exist_ok=True)
    out.write_text(variant_template(variant, (ROOT / "template.yaml").read_text()))
    print(out.relative_to(ROOT))


if __name__ == "__main__":
    main()
