"""TF Serving's warm-up file, ``assets.extra/tf_serving_warmup_requests``: a TFRecord file of
``PredictionLog`` protobufs, replayed at load before the version is READY (as TF Serving's
``saved_model_warmup`` does). Read here from the wire format; the tensors stay serialized
``TensorProto`` bytes, which TensorFlow decodes where it serves (``runtime``).

Predict, classify, regress and multi-inference logs are replayed (classify and regress run
their serialized tf.Examples, a context merged into each, through the signature's one string
input); session-run and streamed logs are refused naming the fix.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from lambdaserve.errors import ModelRejected
from lambdaserve.runtimes.protobuf_wire import fields as _fields

WARMUP_FILE = "assets.extra/tf_serving_warmup_requests"
MAX_RECORDS = 1000  # TF Serving replays at most this many (kMaxNumRecords)
# PredictionLog: classify_log = 2, regress_log = 3, multi_inference_log = 4,
# session_run_log = 5, predict_log = 6, predict_streamed_log = 7; each log's request = 1;
# PredictRequest: model_spec = 1 (ModelSpec.signature_name = 3), inputs = 2 (a map);
# Classification/RegressionRequest: model_spec = 1, input = 2 (Input: example_list = 1,
# example_list_with_context = 2; examples = 1, context = 2); MultiInferenceRequest: tasks = 1
# (InferenceTask.model_spec = 1), input = 2
_REFUSED = {5: "session_run", 7: "streamed"}
_CLASSIFY, _REGRESS, _MULTI, _PREDICT_LOG = 2, 3, 4, 6
_REQUEST, _MODEL_SPEC, _SIGNATURE_NAME, _INPUTS, _INPUT = 1, 1, 3, 2, 2


@dataclass(frozen=True)
class WarmupRequest:
    """One request of the file: its signature and its inputs as TensorProto bytes (predict),
    or its serialized tf.Examples (classify, regress, each task of a multi-inference)."""

    signature_name: str
    inputs: tuple[tuple[str, bytes], ...] = ()
    examples: tuple[bytes, ...] = ()


def warmup_requests(version_dir: Path) -> tuple[WarmupRequest, ...]:
    """The version's warm-up requests (none without the file); ModelRejected names what in
    the file cannot be replayed."""
    path = version_dir / WARMUP_FILE
    if not path.is_file():
        return ()
    requests: list[WarmupRequest] = []
    for index, record in enumerate(_records(path.read_bytes())[:MAX_RECORDS]):
        requests += _requests(record, index)
    return tuple(requests)


def _records(data: bytes) -> list[bytes]:
    """TFRecord framing: length (uint64 LE), its masked CRC, the bytes, their masked CRC."""
    records, position = [], 0
    while position < len(data):
        if position + 12 > len(data):
            raise ModelRejected(f"{WARMUP_FILE} is truncated at byte {position}: not a TFRecord")
        (length,) = struct.unpack_from("<Q", data, position)
        start = position + 12
        if start + length + 4 > len(data):
            raise ModelRejected(
                f"{WARMUP_FILE}: a record of {length} bytes at byte {position} runs past the "
                "end of the file; write it with tf.io.TFRecordWriter"
            )
        records.append(data[start : start + length])
        position = start + length + 4
    return records


def _requests(record: bytes, index: int) -> list[WarmupRequest]:
    try:
        logs = dict(_fields(record))
        for number, kind in _REFUSED.items():
            if number in logs:
                raise ModelRejected(
                    f"{WARMUP_FILE}: record {index} is a {kind} log; lambdaserve replays "
                    "predict, classify, regress and multi-inference logs: write the warm-up "
                    "requests as one of those"
                )
        for number in (_PREDICT_LOG, _CLASSIFY, _REGRESS, _MULTI):
            log = logs.get(number)
            request = dict(_fields(log)).get(_REQUEST) if isinstance(log, bytes) else None
            if isinstance(request, bytes):
                return _decoded(number, request)
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise ModelRejected(f"{WARMUP_FILE}: record {index} is not a PredictionLog") from exc
    raise ModelRejected(f"{WARMUP_FILE}: record {index} holds no request")


def _decoded(kind: int, request: bytes) -> list[WarmupRequest]:
    parts = list(_fields(request))
    if kind == _PREDICT_LOG:
        signature, inputs = "", []
        for number, value in parts:
            if number == _MODEL_SPEC and isinstance(value, bytes):
                signature = _signature_name(value)
            elif number == _INPUTS and isinstance(value, bytes):
                pair = dict(_fields(value))
                key, tensor = pair.get(1, b""), pair.get(2, b"")
                if isinstance(key, bytes) and isinstance(tensor, bytes):
                    inputs.append((key.decode(), tensor))
        return [WarmupRequest(signature, tuple(inputs))]
    examples = next((_examples(v) for n, v in parts if n == _INPUT and isinstance(v, bytes)), ())
    specs = [v for n, v in parts if n == 1]  # model_spec; a multi-inference's tasks
    if kind == _MULTI:  # each InferenceTask's model_spec = 1
        specs = [dict(_fields(t)).get(_MODEL_SPEC, b"") for t in specs if isinstance(t, bytes)]
    return [
        WarmupRequest(_signature_name(spec) if isinstance(spec, bytes) else "", (), examples)
        for spec in specs or [b""]
    ]


def _examples(data: bytes) -> tuple[bytes, ...]:
    """Input's serialized Examples: example_list (1), or example_list_with_context (2) with
    the context merged into each (protobuf merges messages by concatenation)."""
    for kind, listed in _fields(data):
        if not isinstance(listed, bytes):
            continue
        examples = [v for n, v in _fields(listed) if n == 1 and isinstance(v, bytes)]
        context = b"".join(v for n, v in _fields(listed) if n == 2 and isinstance(v, bytes))
        return tuple(context + e for e in examples) if kind == 2 else tuple(examples)
    return ()


def _signature_name(spec: bytes) -> str:
    name = dict(_fields(spec)).get(_SIGNATURE_NAME, b"")
    return name.decode() if isinstance(name, bytes) else ""
