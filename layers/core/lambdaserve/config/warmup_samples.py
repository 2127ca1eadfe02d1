"""Triton's ``model_warmup``: named samples of zeros, random data or raw files, run at load.

``input_data_file`` names a file in the version's ``warmup/`` directory holding the tensor's
raw bytes (row-major; BYTES elements each a 4-byte little-endian length and the bytes), as
Triton reads it. Samples are checked at publish against the model's signature and their
files, so a version whose warm-up cannot run never becomes READY; at load they run
``count`` times each before the first request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from lambdaserve.errors import InvalidInput, LambdaServeError, ModelRejected
from lambdaserve.tensors.encoding import element_count, from_binary, numpy_dtype, shape_fits

if TYPE_CHECKING:  # model_config imports this module, and runtimes import model_config
    from lambdaserve.tensors.signature import Signature

Source = Literal["zero", "random", "file"]
Inputs = dict[str, np.ndarray[Any, Any]]
MAX_SAMPLE_BYTES = 64 * 1024**2


@dataclass(frozen=True)
class WarmupInput:
    name: str
    datatype: str
    dims: tuple[int, ...]
    source: Source
    file: str = ""


@dataclass(frozen=True)
class WarmupSample:
    name: str
    batch_size: int
    count: int
    inputs: tuple[WarmupInput, ...]


def samples_of(message: Any, to_v2: dict[str, str]) -> tuple[WarmupSample, ...]:
    """The samples a Triton ``ModelConfig`` message declares; ``to_v2`` maps TYPE_* names."""
    from lambdaserve.config.triton_proto import pb

    samples = []
    for warmup in message.model_warmup:
        label = f"model_warmup {warmup.name!r}"
        inputs = []
        for name, spec in sorted(warmup.inputs.items()):
            datatype = to_v2.get(pb.DataType.Name(spec.data_type))
            if datatype is None:
                raise InvalidInput(f"{label} input {name!r} needs a data_type such as TYPE_FP32")
            dims = tuple(int(d) for d in spec.dims)
            if any(d < 1 for d in dims):
                raise InvalidInput(
                    f"{label} input {name!r}: warm-up dims are fixed positive sizes, got "
                    f"{list(dims)}"
                )
            kind = spec.WhichOneof("input_data_type")
            if kind is None:
                raise InvalidInput(
                    f"{label} input {name!r} needs zero_data, random_data or input_data_file"
                )
            file = spec.input_data_file
            if kind == "input_data_file" and (not file or "/" in file or file in (".", "..")):
                raise InvalidInput(
                    f"{label} input {name!r}: input_data_file {file!r} must name a file in the "
                    "version's warmup/ directory"
                )
            source: Source = {"zero_data": "zero", "random_data": "random"}.get(kind, "file")  # type: ignore[assignment]
            inputs.append(WarmupInput(name, datatype, dims, source, file))
        samples.append(
            WarmupSample(
                warmup.name, int(warmup.batch_size), max(1, int(warmup.count)), tuple(inputs)
            )
        )
    return tuple(samples)


def sample_inputs(sample: WarmupSample, directory: Path, batched: bool) -> Inputs:
    """One sample's tensors: ``[batch_size, *dims]`` for a batching model, else ``dims``."""
    inputs: Inputs = {}
    rng = np.random.default_rng(0)
    for spec in sample.inputs:
        shape = (max(1, sample.batch_size), *spec.dims) if batched else spec.dims
        if spec.source == "file":
            raw = (directory / "warmup" / spec.file).read_bytes()
            if spec.datatype != "BYTES" and batched:
                # Triton's file holds one batch row; every row of the sample repeats it.
                row = from_binary(spec.name, spec.datatype, spec.dims, memoryview(raw))
                inputs[spec.name] = np.broadcast_to(row, shape).copy()
            else:
                inputs[spec.name] = _bytes_sample(spec, raw, shape)
        elif spec.datatype == "BYTES":
            inputs[spec.name] = np.full(shape, b"0" if spec.source == "random" else b"", object)
        elif spec.source == "random":
            dtype = numpy_dtype(spec.datatype)
            inputs[spec.name] = rng.random(shape).astype(dtype)
        else:
            inputs[spec.name] = np.zeros(shape, dtype=numpy_dtype(spec.datatype))
    return inputs


def check_samples(
    samples: Sequence[WarmupSample], directory: Path, signature: Signature, batched: bool
) -> None:
    """At publish: every sample names the model's inputs with their datatypes, fits their
    shapes, and its files exist with the right byte size."""
    expected = {t.name: t for t in signature.inputs}
    for sample in samples:
        label = f"model_warmup {sample.name!r}"
        named = {spec.name for spec in sample.inputs}
        if named != set(expected):
            raise ModelRejected(
                f"{label} gives inputs {sorted(named)}; the model takes {sorted(expected)}"
            )
        for spec in sample.inputs:
            tensor = expected[spec.name]
            if spec.datatype != tensor.datatype:
                raise ModelRejected(
                    f"{label} input {spec.name!r} is {spec.datatype}; the model takes "
                    f"{tensor.datatype}"
                )
            size = element_count(spec.dims) * max(1, sample.batch_size)
            if spec.source == "file":
                path = directory / "warmup" / spec.file
                if not path.is_file():
                    raise ModelRejected(
                        f"{label} input {spec.name!r} reads warmup/{spec.file}, which the "
                        "version does not have; upload it beside the model file"
                    )
                if path.stat().st_size > MAX_SAMPLE_BYTES:
                    raise ModelRejected(
                        f"{label}: warmup/{spec.file} is over {MAX_SAMPLE_BYTES} bytes"
                    )
            elif (
                spec.datatype != "BYTES"
                and size * numpy_dtype(spec.datatype).itemsize > MAX_SAMPLE_BYTES
            ):
                raise ModelRejected(f"{label} input {spec.name!r} is over {MAX_SAMPLE_BYTES} bytes")
        try:
            inputs = sample_inputs(sample, directory, batched)
        except (LambdaServeError, ValueError) as exc:
            raise ModelRejected(f"{label}: {getattr(exc, 'message', exc)}") from None
        for name, value in inputs.items():
            want = expected[name].shape
            if not shape_fits(value.shape, want):
                raise ModelRejected(
                    f"{label} input {name!r} has shape {list(value.shape)}; the model takes "
                    f"{list(want)}"
                )


def _bytes_sample(spec: WarmupInput, raw: bytes, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    if spec.datatype == "BYTES":
        row = from_binary(spec.name, "BYTES", (element_count(spec.dims),), memoryview(raw))
        return np.broadcast_to(row.reshape(spec.dims), shape).copy()
    return from_binary(spec.name, spec.datatype, shape, memoryview(raw))
