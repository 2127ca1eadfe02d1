"""Warm-up: the config's ``model_warmup`` samples (Triton's), else sample requests shipped
as ``warmup/*.json`` in a version, else zero inputs.

Samples are checked at publish (a malformed one rejects the version with its file name),
and warm-up tensors are bounded in bytes, so warm-up can neither exhaust memory nor, when
it fails anyway, turn into an error blamed on a client's request.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lambdaserve.config.warmup_samples import MAX_SAMPLE_BYTES, WarmupSample, sample_inputs
from lambdaserve.errors import LambdaServeError, ModelRejected
from lambdaserve.metrics.stats import not_counted
from lambdaserve.protocol.v2 import parse_infer_request
from lambdaserve.runtimes.base import LoadedModel
from lambdaserve.serving.binding import bind_inputs
from lambdaserve.tensors.encoding import element_count, numpy_dtype
from lambdaserve.tensors.signature import Signature, TensorSpec

logger = logging.getLogger(__name__)

MAX_WARMUP_BYTES = MAX_SAMPLE_BYTES  # one limit for warm-up inputs, however they are given
Inputs = dict[str, np.ndarray[Any, Any]]


def check_warmup(directory: Path, signature: Signature) -> None:
    """At publish: every sample parses, fits the signature and stays within the bound."""
    for sample in _samples(directory):
        name = sample.relative_to(directory).as_posix()
        if sample.stat().st_size > MAX_WARMUP_BYTES:
            raise ModelRejected(
                f"{name} is {sample.stat().st_size} bytes; warm-up samples may have at most "
                f"{MAX_WARMUP_BYTES} bytes"
            )
        try:
            bind_inputs(parse_infer_request(sample.read_bytes()), signature)
        except LambdaServeError as exc:
            raise ModelRejected(
                f"{name} is not a valid v2 request for this model: {exc.message}"
            ) from None


def warm_up(
    loaded: LoadedModel,
    signature: Signature,
    directory: Path,
    samples: Sequence[WarmupSample] = (),
    batched: bool = False,
    *,
    zeros: bool = True,
    label: str = "the model",
    fixed: Inputs | None = None,
) -> None:
    """Run the samples (or zeros) once; a failure is logged, never raised. Model code
    (``zeros=False``) runs only on samples it was given, as Triton warms a Python model only
    with ``model_warmup``: zeros would run user code with side effects on nothing.
    ``label`` names the model and version in the log lines; ``fixed`` replaces the zeros of
    the inputs it names (a sequence model's controls: ``serving.sequences.controls``)."""
    names = [t.name for t in signature.outputs]
    # each sample's tensors are built once (up to 64 MiB) and run ``count`` times
    runs = (
        ((sample_inputs(s, directory, batched), s.count) for s in samples)
        if samples
        else (
            (inputs | (fixed or {}), 1)
            for inputs in _warmup_inputs(directory, signature, zeros, label)
        )
    )
    for inputs, count in runs:
        for _ in range(count):
            try:
                with not_counted():
                    loaded.run(inputs, names)
            except Exception as exc:
                # A model with data-dependent shapes may refuse zeros; it still serves.
                logger.warning("%s: warm-up run failed: %s", label, getattr(exc, "message", exc))


def zero_inputs(specs: Sequence[TensorSpec]) -> Inputs | None:
    """One zero (or empty-string) input per tensor, dynamic dims set to 1; None when that
    would take more than MAX_WARMUP_BYTES."""
    shapes = {spec.name: tuple(1 if d < 0 else d for d in spec.shape) for spec in specs}
    size = sum(
        element_count(shapes[s.name]) * (8 if s.datatype == "BYTES" else _itemsize(s.datatype))
        for s in specs
    )
    if size > MAX_WARMUP_BYTES:
        return None
    inputs = {}
    for spec in specs:
        if spec.datatype == "BYTES":
            inputs[spec.name] = np.full(shapes[spec.name], b"", dtype=object)
        else:
            inputs[spec.name] = np.zeros(shapes[spec.name], dtype=numpy_dtype(spec.datatype))
    return inputs


def _warmup_inputs(
    directory: Path, signature: Signature, zeros_allowed: bool, label: str
) -> list[Inputs]:
    batches = []
    for sample in _samples(directory):
        try:
            batches.append(bind_inputs(parse_infer_request(sample.read_bytes()), signature))
        except (LambdaServeError, OSError) as exc:
            logger.warning("%s: skipping warm-up sample %s: %s", label, sample.name, exc)
    if batches or not zeros_allowed:
        return batches
    zeros = zero_inputs(signature.inputs)
    if zeros is None:
        logger.warning(
            "%s: no warm-up, zero inputs would take over %d bytes", label, MAX_WARMUP_BYTES
        )
        return []
    return [zeros]


def _samples(directory: Path) -> list[Path]:
    return sorted(directory.glob("warmup/*.json"))


def _itemsize(datatype: str) -> int:
    try:
        return numpy_dtype(datatype).itemsize
    except LambdaServeError:
        return 8
