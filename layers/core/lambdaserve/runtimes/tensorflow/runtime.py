"""TensorFlow backend: ``tf.saved_model.load`` and every signature of a SavedModel, for what
OpenVINO does not serve (graphs it refuses: lookup tables, string ops, custom ops; signatures
other than ``serving_default``) and for any SavedModel under ``backend: "tensorflow"``.

``tensorflow`` (the CPU wheel) is the optional ``tensorflow`` extra, imported only in
``load``: ``inspect`` (the manage function) reads the signatures from ``saved_model.pb``
without it (``metagraph``) and checks the warm-up file (``warmup``); the load is checked
where it serves, before READY. Without TensorFlow there, ``load`` fails naming the fixes,
and a later load imports again (a package installed since is found).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.runtime_names import TENSORFLOW_RUNTIME, RuntimeName
from lambdaserve.errors import InferenceError, InvalidInput, ModelRejected
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.runtimes.tensorflow.metagraph import (
    SavedSignature,
    has_saver,
    read_signatures,
    served_signature,
)
from lambdaserve.runtimes.tensorflow.warmup import WARMUP_FILE, WarmupRequest, warmup_requests
from lambdaserve.tensors.signature import Arrays, Signature, SignatureDef

logger = logging.getLogger(__name__)
NAME: RuntimeName = TENSORFLOW_RUNTIME
MISSING = (
    "TensorFlow (the tensorflow-cpu package) is not installed where it serves: run "
    "`make dev TENSORFLOW=1` locally, deploy `make build VARIANT=tensorflow`, or "
    "`pip install 'lambdaserve[tensorflow]'`"
)


def _tensorflow() -> Any:
    importlib.invalidate_caches()  # a package installed since the last try is found
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise InferenceError(f"{MISSING} ({exc})") from exc
    return tf


def read_checked(model_path: Path) -> tuple[tuple[SavedSignature, ...], SavedSignature]:
    """Every signature, the one served by default, and the warm-up file's requests checked
    against them (no TensorFlow needed)."""
    data = model_path.read_bytes()
    signatures = read_signatures(data)
    default = served_signature(signatures)
    if has_saver(data) and not (model_path.parent / "variables" / "variables.index").is_file():
        raise ModelRejected(
            "the SavedModel restores variables but variables/variables.index is not in the "
            "version: upload the whole directory tf.saved_model.save wrote (saved_model.pb "
            "and variables/)"
        )
    keys = {s.key: s for s in signatures}
    for index, request in enumerate(warmup_requests(model_path.parent)):
        target = keys.get(request.signature_name or default.key)
        if target is None:
            raise ModelRejected(
                f"{WARMUP_FILE}: request {index} names signature {request.signature_name!r}; "
                f"the SavedModel has {sorted(keys)}"
            )
    return signatures, default


class TensorFlowRuntime:
    """Validates from ``saved_model.pb`` (no TensorFlow) and serves with TensorFlow on CPU."""

    name: RuntimeName = NAME

    def inspect(self, model_path: Path, config: ModelConfig) -> Signature:
        # TensorFlow checks the shapes, as TF Serving leaves them to it
        return replace(read_checked(model_path)[1].signature, runtime_checks_shapes=True)

    def load(
        self, model_path: Path, config: ModelConfig, signature: Signature, options: LoadOptions
    ) -> TensorFlowModel:
        try:
            signatures, default = read_checked(model_path)
        except ModelRejected as exc:
            raise InferenceError(exc.message) from exc
        tf = _tensorflow()
        _set_threads(tf, options.intra_op_threads)
        try:
            with tf.device("/CPU:0"):
                loaded = tf.saved_model.load(str(model_path.parent))
        except Exception as exc:  # TF raises its own errors, with pages of C++ context
            raise InferenceError(f"TensorFlow cannot load the SavedModel: {_reason(exc)}") from exc
        model = TensorFlowModel(tf, loaded, signatures, default.key)
        model.warm_up(warmup_requests(model_path.parent))
        return model


def _set_threads(tf: Any, intra_op_threads: int) -> None:
    """TensorFlow's thread pools are the process's, set once before its first op: the first
    load's setting holds (LAMBDASERVE_INTRA_OP_THREADS; TF's own default: every core)."""
    if not intra_op_threads:
        return
    try:
        tf.config.threading.set_intra_op_parallelism_threads(intra_op_threads)
        tf.config.threading.set_inter_op_parallelism_threads(intra_op_threads)
    except RuntimeError:  # already initialized by an earlier load in this process
        logger.debug("TensorFlow's op threads were set by an earlier load")


class TensorFlowModel:
    """A loaded SavedModel: ``run`` calls the default signature, ``run_signature`` any one.
    TensorFlow's functions may be called from several threads at once."""

    device = "cpu"

    def __init__(
        self, tf: Any, loaded: Any, signatures: Sequence[SavedSignature], default: str
    ) -> None:
        self._tf = tf
        self._loaded = loaded  # holds the variables the functions read
        self._functions = dict(loaded.signatures)
        self.default_signature = default
        self.signatures: dict[str, SavedSignature] = {
            s.key: s for s in signatures if s.key in self._functions
        }

    def run(self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]) -> Arrays:
        return self.run_signature(self.default_signature, inputs, outputs)

    def signature_defs(self) -> dict[str, SignatureDef]:
        defs = {key: s.definition() for key, s in self.signatures.items()}
        return {
            key: replace(d, signature=replace(d.signature, runtime_checks_shapes=True))
            for key, d in defs.items()
        }

    def run_signature(
        self, key: str, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]
    ) -> Arrays:
        """Signature ``key`` on ``inputs`` (named by its input keys); ``outputs`` names what
        to return (every output when empty)."""
        function = self._functions.get(key)
        if function is None:
            raise InvalidInput(
                f'Serving signature name: "{key}" not found in signature def; this model has '
                f"{sorted(self.signatures)}"
            )
        tf = self._tf
        try:
            with tf.device("/CPU:0"):
                answer = function(**{n: tf.constant(a) for n, a in inputs.items()})
        except (tf.errors.InvalidArgumentError, TypeError, ValueError) as exc:
            raise InvalidInput(f"signature {key!r} refused the inputs: {_reason(exc)}") from exc
        except tf.errors.OpError as exc:
            raise InferenceError(f"TensorFlow failed: {_reason(exc)}") from exc
        names = list(outputs) or sorted(answer)
        for name in names:
            if name not in answer:
                raise InvalidInput(
                    f"signature {key!r} has no output {name!r}; it has {sorted(answer)}"
                )
        return {name: _array(answer[name].numpy()) for name in names}

    def warm_up(self, requests: Sequence[WarmupRequest]) -> None:
        """Each warm-up request run once (TF Serving's replay), its tensors decoded by TF."""
        if not requests:
            return
        from tensorflow.core.framework import tensor_pb2

        for index, request in enumerate(requests):
            key = request.signature_name or self.default_signature
            inputs = {
                name: self._tf.make_ndarray(tensor_pb2.TensorProto.FromString(raw))
                for name, raw in request.inputs
            }
            known = self.signatures.get(key)
            if request.examples and known and len(known.signature.inputs) == 1:
                # classify / regress: the Examples into the signature's one (string) input
                name = known.signature.inputs[0].name
                inputs = {name: np.array(list(request.examples), dtype=object)}
            try:
                self.run_signature(key, inputs, ())
            except (InvalidInput, InferenceError) as exc:
                raise InferenceError(
                    f"{WARMUP_FILE}: warm-up request {index} failed: {exc.message}"
                ) from exc
        logger.info("replayed %d warm-up requests", len(requests))


def _array(value: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """String tensors as object arrays of bytes, as the other runtimes give them."""
    return value.astype(object) if value.dtype.kind == "S" else value


def _reason(exc: BaseException) -> str:
    """The first line that says what is wrong, without TF's graph context."""
    text = getattr(exc, "message", None) or str(exc)
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return (lines or [type(exc).__name__])[0][:300]
