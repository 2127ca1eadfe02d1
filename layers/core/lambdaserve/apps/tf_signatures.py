"""The calls TF Serving's REST routes and gRPC servicer share: a signature by name, a run of
it (the default one through the dynamic batcher, as v2 infer; any other alone), and
``:classify`` / ``:regress`` on serialized tf.Examples answered as TF Serving's results.
TF Serving checks no method name by default, and neither does this: any signature taking
one serialized-Example input answers classify and regress (TF2's are all "predict")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from lambdaserve.errors import InvalidInput
from lambdaserve.protocol import tf_examples
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.serving import signatures
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.serving.version_resolver import ServedVersion


async def named_signature(
    plane: InferenceDataPlane, model: str, number: int | None, name: str
) -> tuple[ServedVersion, signatures.NamedSignature]:
    """The version and its signature ``name`` ("": the default)."""
    served = await plane.served(model, number)
    work = partial(signatures.signature_named, plane.server(), served, name)
    if not signatures.loads_to_name(served):
        return served, work()  # the version's own signature: nothing to load or read
    return served, await plane.call(model, served.version, work)


async def run_named(
    plane: InferenceDataPlane,
    model: str,
    number: int | None,
    *,
    served: ServedVersion,
    named: signatures.NamedSignature,
    request: InferRequest,
) -> Mapping[str, np.ndarray[Any, Any]]:
    if named.default:
        return (await plane.infer(model, number, request)).outputs
    work = partial(signatures.run_signature, plane.server(), served, named.key, request)
    return await plane.infer_named(served, request, work)


async def examples_results(
    plane: InferenceDataPlane,
    model: str,
    number: int | None,
    *,
    name: str,
    verb: str,
    examples: Sequence[bytes],
) -> tuple[ServedVersion, signatures.NamedSignature, dict[str, Any]]:
    """Serialized ``examples`` through signature ``name`` for ``verb`` (classify or
    regress): the version, the signature and TF Serving's ``{"results": ...}``."""
    served, named = await named_signature(plane, model, number, name)
    request = _examples_request(named, verb, examples)
    outputs = await run_named(plane, model, number, served=served, named=named, request=request)
    results = (
        tf_examples.classify_results(outputs, len(examples))
        if verb == tf_examples.CLASSIFY
        else tf_examples.regress_results(outputs, len(examples))
    )
    return served, named, results


def _examples_request(
    named: signatures.NamedSignature, verb: str, examples: Sequence[bytes]
) -> InferRequest:
    inputs = named.signature.inputs
    if len(inputs) != 1 or inputs[0].datatype != "BYTES":
        raise InvalidInput(
            f"signature {named.key!r} is no {verb} signature: it takes "
            f"{[f'{t.name} ({t.datatype})' for t in inputs]}, not one serialized tf.Example "
            f"input; call Predict (:predict) on it, or name a {verb} signature in signature_name"
        )
    if not examples:
        raise InvalidInput("the request has no examples: send at least one")
    array = np.array(list(examples), dtype=object)
    return InferRequest((InferInput(inputs[0].name, "BYTES", array.shape, array),))
