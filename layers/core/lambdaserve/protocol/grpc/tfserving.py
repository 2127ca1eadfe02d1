"""TF Serving's gRPC messages (``tensorflow.serving``) to the domain and back.

``TensorProto`` carries a tensor either as ``tensor_content`` (little-endian bytes, what
``tf.make_tensor_proto`` writes for numbers) or in its typed ``*_val`` fields, where fewer
values than elements repeat the last one, as TensorFlow reads them. Outputs go back as
``tensor_content`` (strings in ``string_val``), which ``tf.make_ndarray`` reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from google.protobuf import json_format

from lambdaserve.errors import InvalidInput
from lambdaserve.protocol import tfserving as rest
from lambdaserve.protocol.grpc.protos import tensorflow_core_pb2 as tf
from lambdaserve.protocol.grpc.protos import tensorflow_serving_pb2 as pb
from lambdaserve.protocol.v2 import InferInput, InferRequest, RequestedOutput
from lambdaserve.tensors import encoding
from lambdaserve.tensors.signature import Signature, SignatureDef

_V2 = {
    tf.DT_FLOAT: "FP32",
    tf.DT_DOUBLE: "FP64",
    tf.DT_HALF: "FP16",
    tf.DT_BFLOAT16: "BF16",
    tf.DT_INT8: "INT8",
    tf.DT_INT16: "INT16",
    tf.DT_INT32: "INT32",
    tf.DT_INT64: "INT64",
    tf.DT_UINT8: "UINT8",
    tf.DT_UINT16: "UINT16",
    tf.DT_UINT32: "UINT32",
    tf.DT_UINT64: "UINT64",
    tf.DT_BOOL: "BOOL",
    tf.DT_STRING: "BYTES",
}
_TF = {v2: dtype for dtype, v2 in _V2.items()}
# Where TensorFlow keeps each datatype's typed values (FP16/BF16: bit patterns in half_val).
_VALUES = {
    "FP32": "float_val",
    "FP64": "double_val",
    "FP16": "half_val",
    "BF16": "half_val",
    "INT8": "int_val",
    "INT16": "int_val",
    "INT32": "int_val",
    "UINT8": "int_val",
    "UINT16": "int_val",
    "INT64": "int64_val",
    "UINT32": "uint32_val",
    "UINT64": "uint64_val",
    "BOOL": "bool_val",
    "BYTES": "string_val",
}


def predict_request(message: pb.PredictRequest, signature: Signature) -> InferRequest:
    """The domain's request for the signature ``model_spec.signature_name`` names (its
    tensors: ``signature``); InvalidInput says what is wrong."""
    if not message.inputs:
        raise InvalidInput(f"the request has no inputs; the model takes {_names(signature)}")
    known = {spec.name for spec in signature.inputs}
    inputs = []
    for name in sorted(message.inputs):
        if name not in known:
            raise InvalidInput(f"unknown input {name!r}; the model takes {_names(signature)}")
        datatype, array = tensor_to_array(name, message.inputs[name])
        inputs.append(InferInput(name, datatype, tuple(array.shape), array))
    outputs = tuple(RequestedOutput(name) for name in message.output_filter)
    return InferRequest(tuple(inputs), outputs)


def predict_response(
    model: str,
    version: int,
    outputs: Mapping[str, np.ndarray[Any, Any]],
    signature_name: str = rest.SIGNATURE,
) -> pb.PredictResponse:
    response = pb.PredictResponse()
    fill_spec(response.model_spec, model, version, signature_name)
    for name, array in outputs.items():
        response.outputs[name].CopyFrom(array_to_tensor(array))
    return response


def serialized_examples(message: pb.Input) -> list[bytes]:
    """An ``Input``'s examples, serialized; with a context, the context merged into each
    (protobuf merges messages by concatenation: the example's own features win)."""
    kind = message.WhichOneof("kind")
    if kind == "example_list":
        examples = list(message.example_list.examples)
    elif kind == "example_list_with_context":
        context = message.example_list_with_context.context
        examples = [context + e for e in message.example_list_with_context.examples]
    else:
        examples = []
    return examples  # none: the signature is checked first, then the examples


def classification_result(results: Sequence[Sequence[Sequence[Any]]]) -> pb.ClassificationResult:
    """TF Serving's REST results (``[[label, score], ...]`` per example) as the message."""
    message = pb.ClassificationResult()
    for pairs in results:
        classes = message.classifications.add().classes
        for pair in pairs:
            classes.add(label=str(pair[0]), score=float(pair[1]) if len(pair) > 1 else 0.0)
    return message


def regression_result(results: Sequence[float]) -> pb.RegressionResult:
    message = pb.RegressionResult()
    message.regressions.extend(pb.Regression(value=v) for v in results)
    return message


def metadata_response(
    model: str,
    version: int,
    signature: Signature | Mapping[str, SignatureDef],
    fields: Sequence[str],
) -> pb.GetModelMetadataResponse:
    """``signature_def`` (the only metadata TF Serving serves) as a packed SignatureDefMap."""
    if not fields:
        raise InvalidInput(
            'GetModelMetadataRequest must specify at least one metadata_field: "signature_def"'
        )
    unknown = sorted(set(fields) - {"signature_def"})
    if unknown:
        raise InvalidInput(f"Metadata field {unknown[0]} is not supported; ask for signature_def")
    document = rest.metadata(model, version, signature)["metadata"]["signature_def"]
    for definition in document["signature_def"].values():
        definition.pop("defaults")  # not in lambdaserve's SignatureDef message: none to send
    signatures = json_format.ParseDict(document, pb.SignatureDefMap())
    response = pb.GetModelMetadataResponse()
    fill_spec(response.model_spec, model, version)
    # packed in place: the map's Any is the protos' own pool's class (protos/pool.py), not
    # any_pb2.Any, and CopyFrom takes only its own class
    response.metadata["signature_def"].Pack(signatures)
    return response


def status_response(versions: Sequence[tuple[int, str, str]]) -> pb.GetModelStatusResponse:
    """Each (version, lambdaserve state, reason) as TF Serving's ModelVersionStatus."""
    response: pb.GetModelStatusResponse = json_format.ParseDict(
        rest.version_status(versions), pb.GetModelStatusResponse()
    )
    return response


def tensor_to_array(name: str, tensor: tf.TensorProto) -> tuple[str, np.ndarray[Any, Any]]:
    datatype = _V2.get(tensor.dtype)
    if datatype is None:
        raise InvalidInput(
            f"input {name!r}: dtype {tf.DataType.Name(tensor.dtype)} is not served; use one "
            f"of {', '.join(tf.DataType.Name(d) for d in _V2)}"
        )
    if tensor.tensor_shape.unknown_rank:
        raise InvalidInput(f"input {name!r}: the tensor's shape has unknown rank; give its dims")
    shape = encoding.check_shape(name, [d.size for d in tensor.tensor_shape.dim])
    if tensor.tensor_content:
        if datatype == "BYTES":
            raise InvalidInput(f"input {name!r}: DT_STRING travels in string_val")
        content = memoryview(tensor.tensor_content)
        return datatype, encoding.from_binary(name, datatype, shape, content)
    return datatype, _from_values(name, datatype, shape, getattr(tensor, _VALUES[datatype]))


def array_to_tensor(array: np.ndarray[Any, Any]) -> tf.TensorProto:
    datatype = encoding.v2_datatype(array)
    tensor = tf.TensorProto(dtype=_TF[datatype])
    tensor.tensor_shape.dim.extend(tf.TensorShapeProto.Dim(size=d) for d in array.shape)
    if datatype == "BYTES":
        tensor.string_val.extend(_as_bytes(v) for v in array.reshape(-1))
    else:
        tensor.tensor_content = bytes(encoding.to_binary(array))
    return tensor


def _from_values(
    name: str, datatype: str, shape: tuple[int, ...], values: Any
) -> np.ndarray[Any, Any]:
    count = encoding.element_count(shape)
    given = len(values)
    if given > count:
        raise InvalidInput(
            f"input {name!r}: shape {list(shape)} holds {count} elements, the tensor has {given}"
        )
    dtype = encoding.numpy_dtype(datatype, name)
    if datatype == "BYTES":
        flat = np.array(list(values) or [b""], dtype=object)
    elif datatype in ("FP16", "BF16"):
        flat = np.array(values or [0], dtype=np.uint16).view(dtype)
    else:
        try:
            flat = np.array(values or [0], dtype=dtype)
        except OverflowError as exc:
            raise InvalidInput(f"input {name!r}: a value does not fit {datatype}: {exc}") from None
    if flat.size < count:  # TensorFlow repeats the last value (zeros when none is given)
        flat = np.concatenate([flat, np.repeat(flat[-1:], count - flat.size)])
    return flat[:count].reshape(shape)


def fill_spec(
    spec: pb.ModelSpec, model: str, version: int, signature_name: str = rest.SIGNATURE
) -> None:
    """A response's ``model_spec``: the model, the version and the signature that ran."""
    spec.name = model
    spec.version.value = version
    spec.signature_name = signature_name


def _names(signature: Signature) -> list[str]:
    return sorted(spec.name for spec in signature.inputs)


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()
