"""KServe v2 / Triton ``inference.GRPCInferenceService`` messages to the domain and back.

Inputs arrive as typed ``contents`` or as ``raw_input_contents`` (the same bytes as the HTTP
binary extension: little-endian numbers, BYTES as 4-byte length + bytes); outputs always go
out raw, as Triton's server sends them. ``classification`` on a requested output is Triton's
classification extension, as on HTTP.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb

from lambdaserve.config.triton_proto import pb as config_pb
from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.v2 import InferInput, InferRequest, RequestedOutput, write_shared
from lambdaserve.tensors import encoding
from lambdaserve.tensors.shared_memory import (
    RegionSlice,
    SystemSharedMemory,
    no_shared_memory,
    region_slice,
)

# The typed contents field of each datatype; FP16 and BF16 travel raw only (as in Triton).
_CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def infer_request(
    message: pb.ModelInferRequest, shared: SystemSharedMemory | None = None
) -> InferRequest:
    """The domain's request; InvalidInput saying what is wrong with the message.
    ``shared``: the regions tensors may name (None: none may be in shared memory)."""
    if not message.inputs:
        raise InvalidInput("the request needs inputs: a non-empty list of tensors")
    # most tensors carry no parameters: no map is read for them (every request asks)
    regions = [
        region_slice(parameters(t.parameters), f"input {t.name!r}") if t.parameters else None
        for t in message.inputs
    ]
    carried = regions.count(None)  # the inputs not in shared memory
    raw = message.raw_input_contents
    if raw and len(raw) != carried:
        raise InvalidInput(
            f"expected {carried} raw_input_contents, one per input not in shared memory (in "
            f"order), got {len(raw)}; send every such input raw or none"
        )
    inputs, used = [], 0
    for tensor, where in zip(message.inputs, regions, strict=True):
        if where is not None:
            inputs.append(_shared_input(tensor, where, shared))
        else:
            inputs.append(_input(tensor, memoryview(raw[used]) if raw else None))
            used += 1 if raw else 0
    outputs = tuple(_requested(o, shared) for o in message.outputs)
    names = [o.name for o in outputs]
    if len(set(names)) != len(names):
        repeated = next(n for n in names if names.count(n) > 1)
        raise InvalidInput(f"output {repeated!r} is requested more than once; name it once")
    return InferRequest(
        inputs=tuple(inputs),
        outputs=outputs,
        id=message.id or None,
        parameters=parameters(message.parameters),
    )


def infer_response(
    model: str,
    version: int,
    request_id: str | None,
    outputs: Mapping[str, np.ndarray[Any, Any]],
    request: InferRequest | None = None,
    *,
    shared: SystemSharedMemory | None = None,
) -> pb.ModelInferResponse:
    """The answer; an output the ``request`` asked for in shared memory is written there
    (its tensor carries the region, and no raw contents are sent: Triton's way)."""
    response = pb.ModelInferResponse(
        model_name=model, model_version=str(version), id=request_id or ""
    )
    regions = (
        {o.name: o.shared_memory for o in request.outputs if o.shared_memory} if request else {}
    )
    for name, array in outputs.items():
        tensor = response.outputs.add(
            name=name, datatype=encoding.v2_datatype(array), shape=list(array.shape)
        )
        if name in regions:
            written = write_shared(shared, regions[name], name, array)
            tensor.parameters["shared_memory_region"].string_param = written["shared_memory_region"]
            tensor.parameters["shared_memory_byte_size"].int64_param = written[
                "shared_memory_byte_size"
            ]
        else:
            response.raw_output_contents.append(bytes(encoding.to_binary(array)))
    return response


def sequence_of(message: Any) -> tuple[str, Any] | None:
    """(model, sequence id) of a request that carries Triton's ``sequence_id``; else None."""
    if "sequence_id" not in message.parameters:
        return None
    sequence_id = parameters(message.parameters).get("sequence_id")
    return None if sequence_id in (0, "", None) else (message.model_name, sequence_id)


def _shared_input(
    tensor: pb.ModelInferRequest.InferInputTensor,
    where: RegionSlice,
    shared: SystemSharedMemory | None,
) -> InferInput:
    name, datatype = tensor.name, tensor.datatype
    if shared is None:
        raise no_shared_memory(f"input {name!r}")
    shape = encoding.check_shape(name, list(tensor.shape))
    encoding.numpy_dtype(datatype, name)
    data = memoryview(shared.read(where))
    return InferInput(name, datatype, shape, encoding.from_binary(name, datatype, shape, data))


def parameters(message: Mapping[str, Any]) -> dict[str, Any]:
    """A parameter map as plain values (the oneof's one value each): a request's, an output's
    or a repository load's, whose messages all name their oneof ``parameter_choice``."""
    values: dict[str, Any] = {}
    if not message:
        return values
    for key, parameter in message.items():
        kind = parameter.WhichOneof("parameter_choice")
        values[key] = getattr(parameter, kind) if kind else None
    return values


def model_metadata(document: Mapping[str, Any]) -> pb.ModelMetadataResponse:
    return json_format.ParseDict(document, pb.ModelMetadataResponse())


def model_statistics(document: Mapping[str, Any]) -> pb.ModelStatisticsResponse:
    return json_format.ParseDict(document, pb.ModelStatisticsResponse(), ignore_unknown_fields=True)


def model_config(document: Mapping[str, Any]) -> pb.ModelConfigResponse:
    config = json_format.ParseDict(document, config_pb.ModelConfig(), ignore_unknown_fields=True)
    response = pb.ModelConfigResponse()
    response.config.CopyFrom(config)
    return response


def _input(tensor: pb.ModelInferRequest.InferInputTensor, raw: memoryview | None) -> InferInput:
    name, datatype = tensor.name, tensor.datatype
    if not name:
        raise InvalidInput("every input needs a name")
    if not datatype:
        raise InvalidInput(f"input {name!r} needs a datatype such as FP32")
    shape = encoding.check_shape(name, list(tensor.shape))
    encoding.numpy_dtype(datatype, name)
    if raw is not None:
        if tensor.HasField("contents"):
            raise InvalidInput(
                f"input {name!r} has both contents and raw_input_contents; send one of them"
            )
        return InferInput(name, datatype, shape, encoding.from_binary(name, datatype, shape, raw))
    return InferInput(name, datatype, shape, _from_contents(name, datatype, shape, tensor.contents))


def _from_contents(
    name: str, datatype: str, shape: tuple[int, ...], contents: pb.InferTensorContents
) -> np.ndarray[Any, Any]:
    field = _CONTENTS.get(datatype)
    if field is None:
        raise InvalidInput(
            f"input {name!r}: {datatype} has no typed contents field; send it in "
            "raw_input_contents (tritonclient does so by default)"
        )
    values = getattr(contents, field)
    expected = encoding.element_count(shape)
    if len(values) != expected:
        raise InvalidInput(
            f"input {name!r}: shape {list(shape)} needs {expected} elements, "
            f"{field} has {len(values)}"
        )
    if datatype == "BYTES":
        return np.array(list(values), dtype=object).reshape(shape)
    dtype = encoding.numpy_dtype(datatype, name)
    try:
        return np.array(values, dtype=dtype).reshape(shape)
    except OverflowError as exc:
        raise InvalidInput(f"input {name!r}: a value does not fit {datatype}: {exc}") from None


def _requested(
    output: pb.ModelInferRequest.InferRequestedOutputTensor,
    shared: SystemSharedMemory | None = None,
) -> RequestedOutput:
    if not output.name:
        raise InvalidInput("every requested output needs a name")
    given = parameters(output.parameters) if output.parameters else {}
    where = region_slice(given, f"output {output.name!r}") if given else None
    if where is not None and shared is None:
        raise no_shared_memory(f"output {output.name!r}")
    classes = given.get("classification")
    if classes is not None and (
        isinstance(classes, bool) or not isinstance(classes, int) or classes < 1
    ):
        raise InvalidInput(
            f"output {output.name!r}: classification is the number of top classes to return, "
            f"a positive integer; got {classes!r}"
        )
    return RequestedOutput(output.name, classification=classes, shared_memory=where)
