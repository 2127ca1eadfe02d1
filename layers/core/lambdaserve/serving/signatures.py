"""A version's named signatures (TF Serving's ``signature_name``): which it has, and one run
by name. A model with one signature (every runtime but TensorFlow's) has
``serving_default``, its own signature under TF Serving's name.

A named signature other than the default runs alone, outside the dynamic batcher (its
tensors are not the version's signature); the default one goes through ``infer`` as any
request does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lambdaserve.config.runtime_names import TENSORFLOW_RUNTIME
from lambdaserve.errors import InvalidInput, LambdaServeError
from lambdaserve.metrics.stats import Execution
from lambdaserve.protocol.v2 import InferRequest
from lambdaserve.runtimes.base import SignaturesModel
from lambdaserve.serving.binding import bind_inputs, check_batch_size, select_outputs
from lambdaserve.serving.execution import execution_scope
from lambdaserve.serving.model_server import ModelServer
from lambdaserve.serving.version_resolver import ServedVersion
from lambdaserve.tensors.signature import Signature, SignatureDef
from lambdaserve.tracing.request_trace import computed

DEFAULT = "serving_default"
PREDICT = "tensorflow/serving/predict"


def loads_to_name(served: ServedVersion) -> bool:
    """Whether naming ``served``'s signatures loads it (a SavedModel's are in the model);
    every other version has one, its own."""
    return served.record.runtime == TENSORFLOW_RUNTIME


def signature_defs(server: ModelServer, served: ServedVersion) -> dict[str, SignatureDef]:
    """Each signature's key: its method name and tensors (the model is loaded to know them
    when it has several)."""
    if served.record.runtime != TENSORFLOW_RUNTIME:
        return {DEFAULT: SignatureDef(PREDICT, served.signature)}
    loaded = server.load(served)
    if isinstance(loaded, SignaturesModel):
        return dict(loaded.signature_defs())
    return {DEFAULT: SignatureDef(PREDICT, served.signature)}


def default_key(server: ModelServer, served: ServedVersion) -> str:
    """The key a request without ``signature_name`` gets."""
    if served.record.runtime != TENSORFLOW_RUNTIME:
        return DEFAULT
    loaded = server.load(served)
    return loaded.default_signature if isinstance(loaded, SignaturesModel) else DEFAULT


@dataclass(frozen=True)
class NamedSignature:
    """A signature asked for by name: its key, method name, tensors, and whether it is the
    default one (then it runs as any request does, through the batcher)."""

    key: str
    method: str
    signature: Signature
    default: bool


def signature_named(server: ModelServer, served: ServedVersion, key: str) -> NamedSignature:
    """Signature ``key`` ("": the default); InvalidInput naming the signatures the model
    has, as TF Serving words it."""
    if key in ("", DEFAULT) and not loads_to_name(served):  # every request without a name
        return NamedSignature(DEFAULT, PREDICT, served.signature, True)
    defs = signature_defs(server, served)
    default = default_key(server, served)
    key = key or default
    found = defs.get(key)
    if found is None:
        raise InvalidInput(
            f'Serving signature name: "{key}" not found in signature def; this model has '
            f"{sorted(defs)}"
        )
    if key == default:  # the version's own signature (with its config's reshapes)
        return NamedSignature(key, found.method, served.signature, True)
    return NamedSignature(key, found.method, found.signature, False)


def run_signature(
    server: ModelServer, served: ServedVersion, key: str, request: InferRequest
) -> dict[str, np.ndarray[Any, Any]]:
    """``request`` bound to signature ``key``'s tensors and run once, counted in the
    version's statistics as any request is; the response cache answers it where the version
    caches, under the signature's name (two signatures answer the same inputs otherwise)."""
    keyed = replace(request, parameters={**request.parameters, "signature_name": key})
    lookup = server.cache_lookup(served, keyed)
    if lookup is not None and lookup.outputs is not None:
        return dict(lookup.outputs)
    loaded = server.load(served)  # a cold load is not inference time, as in Triton's stats
    started = time.perf_counter_ns()
    try:
        named = signature_named(server, served, key)
        inputs = bind_inputs(request, named.signature)
        names = select_outputs(request, named.signature)
        check_batch_size(inputs, served.model, served.config.max_batch_size)
        bound = time.perf_counter_ns()
        with execution_scope(server.executions, served, (request,)) as held:
            if isinstance(loaded, SignaturesModel):
                outputs = loaded.run_signature(named.key, inputs, names)
            else:
                outputs = loaded.run(inputs, names)
    except LambdaServeError as exc:
        server.stats.record_failure(
            served.model, served.version, time.perf_counter_ns() - started, exc
        )
        raise
    ran = time.perf_counter_ns()
    computed((request,), (started, bound, ran, ran))
    rows = next((int(a.shape[0]) for a in inputs.values() if a.ndim), 1)
    waited = held.waited_ns  # for the rate limiter's resource or a fleet slot: queue time
    execution = Execution(1, rows, waited, bound - started, ran - bound - waited, 0)
    server.stats.record_success(served.model, served.version, execution)
    if lookup is not None:
        server.cache_store(served, lookup, outputs)
    return outputs
