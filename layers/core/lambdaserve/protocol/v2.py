"""KServe v2 inference requests and responses, JSON and Triton's binary tensor extension."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.limits import MAX_JSON_DEPTH, check_depth
from lambdaserve.protocol.request_headers import VERSION_HEADER
from lambdaserve.tensors import encoding
from lambdaserve.tensors.shared_memory import (
    RegionSlice,
    SystemSharedMemory,
    no_shared_memory,
    region_slice,
)

HEADER_LENGTH = "inference-header-content-length"
REQUEST_FIELDS = frozenset({"id", "inputs", "outputs", "parameters"})


@dataclass(frozen=True)
class InferInput:
    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray[Any, Any]


@dataclass(frozen=True)
class RequestedOutput:
    name: str
    binary: bool | None = None
    # Triton's classification extension: answer the top k as "score:index[:label]".
    classification: int | None = None
    # Triton's shared-memory extension: the output written there, not into the answer
    shared_memory: RegionSlice | None = None


@dataclass(frozen=True)
class InferRequest:
    """A decoded v2 request; ``outputs`` empty means every output of the model."""

    inputs: tuple[InferInput, ...]
    outputs: tuple[RequestedOutput, ...] = ()
    id: str | None = None
    binary_output: bool = False
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EncodedResponse:
    body: bytes
    headers: dict[str, str]


def parse_infer_request(
    body: bytes, header_length: int | None = None, shared: SystemSharedMemory | None = None
) -> InferRequest:
    """Decode a v2 request body; ``header_length`` is Inference-Header-Content-Length;
    ``shared``: the regions inputs may name (None: no tensor may be in shared memory)."""
    document, binary = split_body(body, header_length)
    return parse_infer_document(document, binary, shared)


def split_body(body: bytes, header_length: int | None) -> tuple[dict[str, Any], memoryview]:
    """The JSON header as an object, and the binary tensor data after it."""
    if header_length is not None and not 0 < header_length <= len(body):
        raise InvalidInput(
            f"Inference-Header-Content-Length is {header_length} but the body has {len(body)} bytes"
        )
    view = memoryview(body)
    header_bytes = view[:header_length] if header_length is not None else view
    document = _json_object(bytes(header_bytes))
    binary = view[header_length:] if header_length is not None else view[len(body) :]
    return document, binary


def parse_infer_document(
    document: dict[str, Any], binary: memoryview, shared: SystemSharedMemory | None = None
) -> InferRequest:
    """Decode an already-parsed v2 request (and the binary tensors that follow it)."""
    raw_inputs = document.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise InvalidInput('the request needs "inputs": a non-empty list of tensors')
    inputs, used = [], 0
    for raw in raw_inputs:
        tensor, size = _parse_input(raw, binary[used:], shared)
        inputs.append(tensor)
        used += size
    if used != len(binary):
        raise InvalidInput(
            f"the body carries {len(binary)} bytes of binary tensor data, inputs declare {used}"
        )
    parameters = _parameters(document, "request")
    outputs = tuple(_parse_output(o, shared) for o in _list(document, "outputs"))
    names = [o.name for o in outputs]
    if len(set(names)) != len(names):
        repeated = next(n for n in names if names.count(n) > 1)
        raise InvalidInput(
            f"output {repeated!r} already exists in request: it is requested more than once; "
            "name it once"
        )
    return InferRequest(
        inputs=tuple(inputs),
        outputs=outputs,
        id=str(document["id"]) if document.get("id") is not None else None,
        binary_output=bool(parameters.get("binary_data_output", False)),
        parameters=parameters,
    )


def encode_infer_response(
    model_name: str,
    model_version: int,
    request: InferRequest,
    outputs: Mapping[str, np.ndarray[Any, Any]],
    shared: SystemSharedMemory | None = None,
) -> EncodedResponse:
    """Encode outputs as JSON, with binary tensors appended where the request asked (and
    written to ``shared`` memory where it named a region)."""
    entries, blobs = [], []
    # binary_data_output is for the outputs a request does not name; a named one is binary
    # only where its own binary_data says so (Triton's binary extension, qa/L0_http).
    binary_by_name = {o.name: bool(o.binary) for o in request.outputs}
    regions = {o.name: o.shared_memory for o in request.outputs if o.shared_memory}
    for name, array in outputs.items():
        entry: dict[str, Any] = {
            "name": name,
            "datatype": encoding.v2_datatype(array),
            "shape": list(array.shape),
        }
        wants_binary = binary_by_name.get(name)
        if name in regions:
            entry["parameters"] = write_shared(shared, regions[name], name, array)
        elif wants_binary if wants_binary is not None else request.binary_output:
            blob = encoding.to_binary(array)
            entry["parameters"] = {
                "binary_data_size": len(blob) if isinstance(blob, bytes) else blob.nbytes
            }
            blobs.append(blob)
        else:
            entry["data"] = encoding.to_json(array)
        entries.append(entry)
    document: dict[str, Any] = {
        "model_name": model_name,
        "model_version": str(model_version),
        "outputs": entries,
    }
    if request.id is not None:
        document["id"] = request.id
    header = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
    version = document["model_version"]  # said in a header too, as on every HTTP door
    if not blobs:
        return EncodedResponse(
            header, {"content-type": "application/json", VERSION_HEADER: version}
        )
    return EncodedResponse(
        b"".join([header, *blobs]),
        {
            "content-type": "application/octet-stream",
            HEADER_LENGTH: str(len(header)),
            VERSION_HEADER: version,
        },
    )


def write_shared(
    shared: SystemSharedMemory | None, where: RegionSlice, name: str, array: np.ndarray[Any, Any]
) -> dict[str, Any]:
    """Output ``name`` written to its region; the parameters its answer entry carries."""
    if shared is None:
        raise no_shared_memory(f"output {name!r}")
    blob = encoding.to_binary(array)
    shared.write(where, blob, name)
    return {"shared_memory_region": where.region, "shared_memory_byte_size": len(blob)}


def _parse_input(
    raw: Any, binary: memoryview, shared: SystemSharedMemory | None = None
) -> tuple[InferInput, int]:
    if not isinstance(raw, dict):
        raise InvalidInput("every input must be an object with name, datatype, shape and data")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput("every input needs a name")
    datatype = raw.get("datatype")
    if not isinstance(datatype, str):
        raise InvalidInput(f"input {name!r} needs a datatype such as FP32")
    shape = encoding.check_shape(name, raw.get("shape"))
    parameters = _parameters(raw, f"input {name!r}")
    where = region_slice(parameters, f"input {name!r}")
    if where is not None:
        if shared is None:
            raise no_shared_memory(f"input {name!r}")
        data = memoryview(shared.read(where))
        return InferInput(
            name, datatype, shape, encoding.from_binary(name, datatype, shape, data)
        ), 0
    size = parameters.get("binary_data_size")
    if size is not None:
        if not isinstance(size, int) or size < 0 or size > len(binary):
            raise InvalidInput(
                f"input {name!r}: binary_data_size {size} exceeds the {len(binary)} bytes left "
                "after the JSON header"
            )
        return InferInput(
            name, datatype, shape, encoding.from_binary(name, datatype, shape, binary[:size])
        ), size
    if "data" not in raw:
        raise InvalidInput(f"input {name!r} has neither data nor binary_data_size")
    return InferInput(
        name, datatype, shape, encoding.from_json(name, datatype, shape, raw["data"])
    ), 0


def _parse_output(raw: Any, shared: SystemSharedMemory | None = None) -> RequestedOutput:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise InvalidInput('every requested output must be an object with a "name"')
    parameters = _parameters(raw, f"output {raw['name']!r}")
    binary = parameters.get("binary_data")
    classes = parameters.get("classification")
    if classes is not None and (
        isinstance(classes, bool) or not isinstance(classes, int) or classes < 1
    ):
        raise InvalidInput(
            f"output {raw['name']!r}: classification is the number of top classes to "
            f"return, a positive integer; got {classes!r}"
        )
    where = region_slice(parameters, f"output {raw['name']!r}")
    if where is not None and shared is None:
        raise no_shared_memory(f"output {raw['name']!r}")
    return RequestedOutput(raw["name"], None if binary is None else bool(binary), classes, where)


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc):
            raise InvalidInput(
                f"the request nests deeper than {MAX_JSON_DEPTH} levels; flatten it"
            ) from None
        raise InvalidInput(f"the request is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidInput("the request must be a JSON object")
    return document


def _list(document: dict[str, Any], key: str) -> Sequence[Any]:
    value = document.get(key, [])
    if not isinstance(value, list):
        raise InvalidInput(f'"{key}" must be a list')
    return value


def _parameters(document: dict[str, Any], where: str) -> dict[str, Any]:
    value = document.get("parameters") or {}
    if not isinstance(value, dict):
        raise InvalidInput(f'{where}: "parameters" must be an object')
    if value:
        check_depth(value, f'{where}: "parameters"', limit=8)
    return value
