"""scripts/shipped_envs.py reads each image's recipe rather than copying it: what it would run
for each environment follows the Dockerfiles' own lines and scripts/image_variant.py's build
arguments, and a Dockerfile line it cannot follow stops the build instead of being skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shipped import shipped_envs

PY = "/opt/python3.12"


def plan(name: str, target: Path) -> tuple[list, dict[str, str], str]:
    module = shipped_envs()
    steps = module.dockerfile_plan(module.ENVS[name], target, PY)
    runs = [step for step in steps if step.kind == "run"]
    return steps, dict(runs[-1].environment), " && ".join(step.command for step in runs)


@pytest.mark.parametrize(
    ("name", "extras", "index"),
    [
        ("infer", "images,openvino", ""),
        ("infer-torchserve", "images,openvino,torchserve", "https://download.pytorch.org/whl/cpu"),
        ("infer-paddle", "images,openvino,paddle", ""),
        ("manage", "openvino", ""),
        ("manage-torch", "openvino,torch", "https://download.pytorch.org/whl/cpu"),
    ],
)
def test_the_lambda_images_install_as_their_dockerfile_says(
    name: str, extras: str, index: str, tmp_path: Path
):
    # Given an image's environment and its variant
    # When its Dockerfile is read against a directory
    steps, environment, command = plan(name, tmp_path / "env")
    context = f"{tmp_path / 'env.build'}"
    # Then the build context is the Dockerfile's COPY sources, under the copy of /build
    copies = {(s.source, s.dest) for s in steps if s.kind == "copy"}
    assert ("layers/core/lambdaserve", f"{context}/layers/core/lambdaserve") in copies
    assert ("pyproject.toml", f"{context}/") in copies
    # And the install is the Dockerfile's own pip line: into the task root, with the
    # variant's EXTRAS and index, under python3.12
    assert f'pip() {{ "{PY}" -m pip "$@"; }}' in command
    assert '--target "${LAMBDA_TASK_ROOT}"' in command
    assert f'"{context}[${{EXTRAS}}]"' in command
    assert environment["LAMBDA_TASK_ROOT"] == str(tmp_path / "env")
    assert (environment["EXTRAS"], environment["TORCH_INDEX"]) == (extras, index)


def test_the_gpu_image_builds_its_venv_then_swaps_onnxruntime_for_the_gpu_wheel(tmp_path: Path):
    # When Dockerfile.gpu is read
    _, environment, command = plan("gpu", tmp_path / "env")
    venv = tmp_path / "env" / "venv"
    # Then its venv comes first (python3.12), and later pip lines are the venv's, on PATH
    first, second = command.split(" && ", 1)
    assert first.endswith(f"python3 -m venv {venv}")
    assert "pip() {" not in second
    assert environment["PATH"].startswith(f"{venv}/bin:")
    # And its lock (hashes required), the package's extras (the server's, never the
    # emulator's), then onnxruntime-gpu at the locked onnxruntime's version, as written
    assert '--require-hashes -r "' in command and environment["LOCK"] == "gpu"
    assert "[${EXTRAS}]" in command and environment["EXTRAS"] == "server,images"
    assert 'pip uninstall -y onnxruntime && pip install "onnxruntime-gpu==${ort}"' in command


def test_a_dockerfile_line_the_reader_does_not_know_stops_the_build(tmp_path: Path, monkeypatch):
    # Given a recipe with an instruction the reader has no meaning for
    module = shipped_envs()
    recipe = tmp_path / "Dockerfile"
    recipe.write_text("FROM python:3.12\nVOLUME /data\nRUN pip install x\n")
    monkeypatch.setattr(module, "ROOT", tmp_path)
    env = module.Env("odd", "Dockerfile")
    # When it is read, Then the build stops naming the instruction
    with pytest.raises(SystemExit, match="no reading of VOLUME"):
        module.dockerfile_plan(env, tmp_path / "env", PY)
