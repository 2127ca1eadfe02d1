"""TF Serving's warm-up file, ``assets.extra/tf_serving_warmup_requests``: a TFRecord file of
``PredictionLog`` protobufs, replayed at load before the version is READY (as TF Serving's
``saved_model_warmup`` does). Read here from the wire format; the tensors stay serialized
``TensorProto`` bytes, which TensorFlow decodes where it serves (``runtime``).

Predict logs are replayed. Classify, regress and multi-inference logs are refused naming the
fix (send them as predict logs to the signature): their Example inputs would need the
classify path at load, which lambdaserve does not replay yet.
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
# session_run_log = 5, predict_log = 6, predict_streamed_log = 7; PredictLog.request = 1;
# PredictRequest: model_spec = 1 (ModelSpec.signature_name = 3), inputs = 2 (a map),
# output_filter = 3
_KINDS = {2: "classify", 3: "regress", 4: "multi_inference", 5: "session_run", 7: "streamed"}
_PREDICT_LOG, _REQUEST, _MODEL_SPEC, _SIGNATURE_NAME, _INPUTS = 6, 1, 1, 3, 2


@dataclass(frozen=True)
class WarmupRequest:
    """One predict request of the file: its signature and its inputs as TensorProto bytes."""

    signature_name: str
    inputs: tuple[tuple[str, bytes], ...]


def warmup_requests(version_dir: Path) -> tuple[WarmupRequest, ...]:
    """The version's warm-up requests (none without the file); ModelRejected names what in
    the file cannot be replayed."""
    path = version_dir / WARMUP_FILE
    if not path.is_file():
        return ()
    requests = []
    for index, record in enumerate(_records(path.read_bytes())):
        if index >= MAX_RECORDS:
            break
        requests.append(_request(record, index))
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


def _request(record: bytes, index: int) -> WarmupRequest:
    try:
        logs = dict(_fields(record))
    except (ValueError, IndexError) as exc:
        raise ModelRejected(f"{WARMUP_FILE}: record {index} is not a PredictionLog") from exc
    for number, kind in _KINDS.items():
        if number in logs:
            raise ModelRejected(
                f"{WARMUP_FILE}: record {index} is a {kind} log; lambdaserve replays predict "
                "logs (PredictionLog.predict_log) at load: write the warm-up requests as "
                "PredictRequests to the same signature"
            )
    log = logs.get(_PREDICT_LOG)
    request = dict(_fields(log)).get(_REQUEST) if isinstance(log, bytes) else None
    if not isinstance(request, bytes):
        raise ModelRejected(f"{WARMUP_FILE}: record {index} has no predict_log request")
    signature, inputs = "", []
    for number, value in _fields(request):
        if number == _MODEL_SPEC and isinstance(value, bytes):
            name = dict(_fields(value)).get(_SIGNATURE_NAME, b"")
            signature = name.decode() if isinstance(name, bytes) else ""
        elif number == _INPUTS and isinstance(value, bytes):
            pair = dict(_fields(value))
            key, tensor = pair.get(1, b""), pair.get(2, b"")
            if isinstance(key, bytes) and isinstance(tensor, bytes):
                inputs.append((key.decode(), tensor))
    return WarmupRequest(signature, tuple(inputs))
