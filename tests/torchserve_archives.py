"""TorchServe archives as TorchServe's users build them (torch-model-archiver on the
fixtures' handlers, a state dict made here), and the answers computed by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

HANDLERS = Path(__file__).parent / "fixtures" / "torchserve"


def archive(tmp_path: Path, name: str, version: str = "1.0", fmt: str = "default") -> Path:
    """``torch-model-archiver`` as TorchServe's users run it, on the fixture's files."""
    source = HANDLERS / name
    args = ["--model-name", name, "--version", version, "--handler", str(source / "handler.py")]
    if (source / "model.py").exists():
        weights = tmp_path / f"{name}.pt"
        torch.manual_seed(0)
        sys.path.insert(0, str(source))
        try:
            from model import TinyClassifier  # the fixture's model.py, as TorchServe imports it
        finally:
            sys.path.remove(str(source))
            sys.modules.pop("model", None)
        torch.save(TinyClassifier().state_dict(), weights)
        args += ["--model-file", str(source / "model.py"), "--serialized-file", str(weights)]
        args += ["--extra-files", str(source / "helpers.py")]
        args += ["--config-file", str(source / "model-config.yaml")]
    export = tmp_path / "export"
    export.mkdir(exist_ok=True)
    archiver = Path(sys.executable).parent / "torch-model-archiver"
    subprocess.run(
        [str(archiver), *args, "--export-path", str(export), "--archive-format", fmt, "-f"],
        check=True,
        timeout=120,
    )
    suffix = {"default": ".mar", "tgz": ".tar.gz"}[fmt]
    return export / f"{name}{suffix}"


def expected(tmp_path: Path, rows: list[list[float]]) -> list[dict]:
    """The same eager model, by hand: state dict, scale 2.0 from model-config.yaml, softmax."""
    sys.path.insert(0, str(HANDLERS / "tiny"))
    try:
        from model import TinyClassifier
    finally:
        sys.path.remove(str(HANDLERS / "tiny"))
        sys.modules.pop("model", None)
    net = TinyClassifier()
    net.load_state_dict(torch.load(tmp_path / "tiny.pt", weights_only=True))
    with torch.no_grad():
        probabilities = torch.softmax(net(torch.tensor(rows) * 2.0), dim=1)
    return [
        {"class": int(p.argmax()), "probabilities": [round(float(v), 6) for v in p]}
        for p in probabilities
    ]


def workflow_archive(tmp_path: Path, name: str = "pipeline") -> Path:
    """``torch-workflow-archiver`` on the workflow fixture (spec + function nodes)."""
    source = HANDLERS / "workflow"
    export = tmp_path / "export"
    export.mkdir(exist_ok=True)
    archiver = Path(sys.executable).parent / "torch-workflow-archiver"
    subprocess.run(
        [
            str(archiver),
            "--workflow-name", name,
            "--spec-file", str(source / "spec.yaml"),
            "--handler", str(source / "workflow_handler.py"),
            "--export-path", str(export),
            "-f",
        ],
        check=True,
        timeout=120,
    )  # fmt: skip
    return export / f"{name}.war"
