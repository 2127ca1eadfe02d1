"""TorchServe archives as TorchServe's users build them (torch-model-archiver on the
fixtures' handlers, a state dict made here), and the answers computed by hand."""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

HANDLERS = Path(__file__).parent / "fixtures" / "torchserve"


def archive(
    tmp_path: Path,
    name: str,
    version: str = "1.0",
    fmt: str = "default",
    config: Path | None = None,
) -> Path:
    """``torch-model-archiver`` as TorchServe's users run it, on the fixture's files (``config``
    in place of the fixture's model-config.yaml)."""
    source = HANDLERS / name
    args = ["--model-name", name, "--version", version, "--handler", str(source / "handler.py")]
    if (source / "model.py").exists():
        args += _eager_model_args(tmp_path, source)
        args += ["--extra-files", str(source / "helpers.py")]
        args += ["--config-file", str(config or source / "model-config.yaml")]
    suffix = {"default": ".mar", "tgz": ".tar.gz"}[fmt]
    return _model_archiver(tmp_path, [*args, "--archive-format", fmt]) / f"{name}{suffix}"


def expected(tmp_path: Path, rows: list[list[float]]) -> list[dict]:
    """The same eager model, by hand: state dict, scale 2.0 from model-config.yaml, softmax."""
    net = eager_model(HANDLERS / "tiny" / "model.py")()
    net.load_state_dict(torch.load(tmp_path / "tiny.pt", weights_only=True))
    with torch.no_grad():
        probabilities = torch.softmax(net(torch.tensor(rows) * 2.0), dim=1)
    return [
        {"class": int(p.argmax()), "probabilities": [round(float(v), 6) for v in p]}
        for p in probabilities
    ]


def workflow_archive(tmp_path: Path, name: str = "pipeline", source: Path | None = None) -> Path:
    """``torch-workflow-archiver`` on the workflow fixture (spec + function nodes), or on
    ``source``, a folder of the same two files."""
    source = source or HANDLERS / "workflow"
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


def eager_model(model_py: Path) -> type[torch.nn.Module]:
    """The one ``nn.Module`` class a ``--model-file`` defines, as TorchServe finds it."""
    spec = importlib.util.spec_from_file_location(f"fixture_{model_py.parent.name}", model_py)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    [model] = [
        v for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, torch.nn.Module) and v is not torch.nn.Module
        and v.__module__ == module.__name__
    ]  # fmt: skip
    return model


def builtin_archive(
    tmp_path: Path, fixture: str, handler: str, version: str = "1.0", config: Path | None = None
) -> Path:
    """torch-model-archiver with a built-in handler name (``--handler image_classifier``), the
    fixture's eager model.py, its state dict made here, its index_to_name.json and, given one,
    a model-config.yaml."""
    source = HANDLERS / fixture
    args = ["--model-name", fixture, "--version", version, "--handler", handler]
    args += _eager_model_args(tmp_path, source)
    if (source / "index_to_name.json").exists():
        args += ["--extra-files", str(source / "index_to_name.json")]
    if config is not None:
        args += ["--config-file", str(config)]
    return _model_archiver(tmp_path, args) / f"{fixture}.mar"


def _eager_model_args(tmp_path: Path, source: Path) -> list[str]:
    """``--model-file`` and its state dict (seeded: the same weights every time), written here."""
    weights = tmp_path / f"{source.name}.pt"
    torch.manual_seed(0)
    torch.save(eager_model(source / "model.py")().state_dict(), weights)
    return ["--model-file", str(source / "model.py"), "--serialized-file", str(weights)]


def _model_archiver(tmp_path: Path, args: list[str]) -> Path:
    """``torch-model-archiver`` as TorchServe's users run it; the folder it exported to."""
    export = tmp_path / "export"
    export.mkdir(exist_ok=True)
    archiver = Path(sys.executable).parent / "torch-model-archiver"
    subprocess.run(
        [str(archiver), *args, "--export-path", str(export), "-f"], check=True, timeout=120
    )
    return export


def torchserve_answers(mar: Path, bodies: list[bytes], workdir: Path) -> list[Any]:
    """The same archive run by TorchServe's own code in this process (``torchserve_handler``)."""
    with torchserve_handler(mar, workdir, len(bodies)) as handle:
        return handle(bodies)


@contextmanager
def torchserve_handler(
    mar: Path, workdir: Path, batch_size: int = 1
) -> Iterator[Callable[[list[bytes]], list[Any]]]:
    """The archive's handler loaded by TorchServe's own ``TsModelLoader`` in this process, the
    model directory importable as TorchServe's worker has it; called as its worker calls it."""
    import ts
    from ts.context import RequestProcessor
    from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl
    from ts.model_loader import TsModelLoader

    from lambdaserve.runtimes.torchserve.torchvision_ops import import_torchvision

    import_torchvision()  # PyPI's torchvision beside the CPU torch (see the module)
    model_dir = workdir / f"torchserve-{mar.stem}"
    with zipfile.ZipFile(mar) as packed:
        packed.extractall(model_dir)
    manifest = json.loads((model_dir / "MAR-INF" / "MANIFEST.json").read_text())["model"]
    metrics = MetricsCacheYamlImpl(str(Path(ts.__file__).parent / "configs" / "metrics.yaml"))
    metrics.initialize_cache()
    with _worker_imports(model_dir):
        service = TsModelLoader().load(
            manifest["modelName"], str(model_dir), manifest["handler"], gpu_id=None,
            batch_size=batch_size, envelope=None, limit_max_image_pixels=True,
            metrics_cache=metrics,
        )  # fmt: skip

        def handle(bodies: list[bytes]) -> list[Any]:
            service.context.request_processor = [RequestProcessor({}) for _ in bodies]
            rows = [{"body": bytearray(b)} for b in bodies]
            return list(service._entry_point(rows, service.context))

        yield handle


@contextmanager
def _worker_imports(model_dir: Path):
    """TorchServe's worker runs with its model directory on the path (and no other ``model``)."""
    sys.modules.pop("model", None)
    sys.path.insert(0, str(model_dir))
    try:
        yield
    finally:
        sys.path.remove(str(model_dir))
        sys.modules.pop("model", None)


def jpeg(seed: int, size: tuple[int, int] = (300, 260)) -> bytes:
    """A photo-sized JPEG of noise (PIL), as a user's kitten.jpg reaches the handler."""
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG")
    return out.getvalue()
