"""Payload capture: a model's requests and answers kept in S3 for monitoring, drift checks
and retraining, in SageMaker's Data Capture layout, so Model Monitor and the tools built
for it read them unchanged.

One documented setting, the model config's ``data_capture`` parameter (in config.pbtxt, or
set through the management API's ``PUT /models/{m}`` like any config field), a JSON object:
``sampling_percentage`` (0-100), ``capture`` (``["input", "output"]`` or either),
``text_content_types`` (kept as text; every other type base64), ``kms_key_id`` (SSE-KMS).

Never in the way of an answer: a captured pair is queued (bounded by ``max_pending``
records; what does not fit is dropped and counted) and written by a thread of its own (every
``interval_s``, or as soon as the backlog is half full), one
JSONL object per model version and hour per flush
(``<prefix>/<model>/<version>/yyyy/mm/dd/hh/<time>-<id>.jsonl``); a write that fails is
logged and counted, never raised.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import random
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lambdaserve.errors import InvalidInput

PARAMETER = "data_capture"
JSON_TYPES = ("application/json",)
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CaptureSetting:
    """The ``data_capture`` parameter, checked (``capture_setting``): no pydantic here, the
    first request's import path stays light."""

    sampling_percentage: float = 100.0
    capture: tuple[str, ...] = ("input", "output")
    text_content_types: tuple[str, ...] = ("application/json", "text/csv")
    kms_key_id: str = ""


_FIELDS = {"sampling_percentage", "capture", "text_content_types", "kms_key_id"}
_EXAMPLE = '(e.g. {"sampling_percentage": 10, "capture": ["input", "output"]})'


def capture_setting(parameters: Mapping[str, str]) -> CaptureSetting | None:
    """The model's setting, or None when it captures nothing; InvalidInput naming the fix."""
    raw = parameters.get(PARAMETER)
    if not raw:
        return None
    try:
        given = json.loads(raw)
    except ValueError:
        raise InvalidInput(f'the "data_capture" parameter is not JSON {_EXAMPLE}') from None
    if not isinstance(given, dict) or set(given) - _FIELDS:
        unknown = sorted(set(given) - _FIELDS) if isinstance(given, dict) else given
        raise InvalidInput(f'"data_capture" takes {sorted(_FIELDS)}, not {unknown} {_EXAMPLE}')
    rate = given.get("sampling_percentage", 100)
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 100:
        raise InvalidInput(f'"data_capture".sampling_percentage is 0 to 100, not {rate!r}')
    capture = _strings(given, "capture", ("input", "output"))
    if not capture or set(capture) - {"input", "output"}:
        raise InvalidInput(f'"data_capture".capture takes "input" and "output", not {capture}')
    kms = given.get("kms_key_id", "")
    if not isinstance(kms, str):
        raise InvalidInput('"data_capture".kms_key_id is a KMS key id or ARN')
    types = _strings(given, "text_content_types", ("application/json", "text/csv"))
    return CaptureSetting(float(rate), capture, tuple(t.lower() for t in types), kms)


@functools.lru_cache(maxsize=256)
def capture_setting_of(parameters: tuple[tuple[str, str], ...]) -> CaptureSetting | None:
    """``capture_setting`` of a config's parameters, parsed once per distinct config (the
    doors ask on every request)."""
    return capture_setting(dict(parameters))


def _strings(given: Mapping[str, Any], name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    value = given.get(name, list(default))
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidInput(f'"data_capture".{name} is a list of strings')
    return tuple(value)


@dataclass(frozen=True)
class Exchange:
    """One request and its answer, as the door saw them."""

    model: str
    version: int
    request: bytes
    request_type: str
    response: bytes
    response_type: str
    # beside eventId and inferenceTime in the record (a shadow's: shadow, primaryVersion,
    # latencyMs)
    metadata: Mapping[str, Any] | None = None


def capture_record(setting: CaptureSetting, exchange: Exchange, at: datetime) -> dict[str, Any]:
    """SageMaker Data Capture's JSON object for one exchange."""
    data: dict[str, Any] = {}
    if "input" in setting.capture:
        data["endpointInput"] = _payload(setting, "INPUT", exchange.request, exchange.request_type)
    if "output" in setting.capture:
        data["endpointOutput"] = _payload(
            setting, "OUTPUT", exchange.response, exchange.response_type
        )
    return {
        "captureData": data,
        "eventMetadata": {
            "eventId": str(uuid.uuid4()),
            "inferenceTime": at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z",
            **(exchange.metadata or {}),
        },
        "eventVersion": "0",
    }


def _payload(setting: CaptureSetting, mode: str, body: bytes, content_type: str) -> dict[str, str]:
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind in setting.text_content_types:
        try:
            text = body.decode()
            encoding = "JSON" if kind in JSON_TYPES else "CSV"
            return {
                "observedContentType": content_type,
                "mode": mode,
                "data": text,
                "encoding": encoding,
            }
        except UnicodeDecodeError:
            pass
    return {
        "observedContentType": content_type,
        "mode": mode,
        "data": base64.b64encode(body).decode(),
        "encoding": "BASE64",
    }


@dataclass
class CaptureCounts:
    captured: int = 0
    dropped: int = 0  # the backlog was full: never queued
    failed: int = 0  # queued, and its write failed


class DataCapture:
    """The process's capture: ``offer`` samples and queues, a thread writes (``flush``: now).

    ``put``: writes one object (``key``, ``body``, ``kms_key_id``); S3's, injected."""

    def __init__(
        self,
        put: Callable[[str, bytes, str], None],
        prefix: str,
        *,
        max_pending: int = 1000,
        interval_s: float = 5.0,
        sample: Callable[[], float] = random.random,
        writer: bool = True,
    ) -> None:
        self._put = put
        self._prefix = prefix.rstrip("/")
        self._max_pending = max_pending
        self._interval_s = interval_s
        self._sample = sample
        self._pending: list[tuple[CaptureSetting, Exchange, datetime]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._writing = threading.Lock()
        self.counts = CaptureCounts()
        self._thread: threading.Thread | None = None
        self._writer = writer  # False: only ``flush`` writes (a caller that owns the timing)

    def offer(self, setting: CaptureSetting | None, exchange: Exchange) -> None:
        """Queue the exchange when the model captures and the sample takes it; never raises."""
        if self.takes(setting):
            assert setting is not None
            self.queue(setting, exchange)

    def takes(self, setting: CaptureSetting | None) -> bool:
        """Whether this request is captured (the model captures, and the sample takes it):
        asked before a door builds the exchange's bytes, so an unsampled request pays
        nothing for them."""
        return setting is not None and self._sample() * 100 < setting.sampling_percentage

    def queue(self, setting: CaptureSetting, exchange: Exchange) -> None:
        """Queue a sampled exchange (``takes``); a full backlog drops it, counted."""
        with self._lock:
            if len(self._pending) >= self._max_pending:
                self.counts.dropped += 1
                return
            self._pending.append((setting, exchange, datetime.now(UTC)))
            self.counts.captured += 1
            # a busy model fills the backlog faster than the interval: write it early
            early = len(self._pending) >= self._max_pending // 2
        self._start()
        if early:
            self._wake.set()

    def count_failed(self, records: int = 1) -> None:
        """Records that were sampled and will never be written (their write or their bytes
        failed): counted, never raised."""
        with self._lock:
            self.counts.failed += records

    def snapshot(self) -> dict[str, int]:
        """The records captured, dropped (backlog full) and failed (write failed) so far: what
        ``/metrics`` and the EMF lines report."""
        with self._lock:
            counts = self.counts
            return {"captured": counts.captured, "dropped": counts.dropped, "failed": counts.failed}

    def _start(self) -> None:
        if self._thread is None and self._writer:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="data-capture", daemon=True
                    )
                    self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(self._interval_s)
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        """Write what is queued: one object per model version, hour and KMS key."""
        with self._writing:
            with self._lock:
                pending, self._pending = self._pending, []
            groups: dict[tuple[str, int, str, str], list[dict[str, Any]]] = defaultdict(list)
            for setting, exchange, at in pending:
                hour = at.strftime("%Y/%m/%d/%H")
                group = (exchange.model, exchange.version, hour, setting.kms_key_id)
                groups[group].append(capture_record(setting, exchange, at))
            for (model, version, hour, kms), records in groups.items():
                now = datetime.now(UTC).strftime("%M-%S-%f")
                key = f"{self._prefix}/{model}/{version}/{hour}/{now}-{uuid.uuid4().hex[:8]}.jsonl"
                body = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
                try:
                    self._put(key, body.encode(), kms)
                except Exception as error:  # capture never fails what it captures
                    logger.warning(
                        "data capture: %d records to %s not written: %s", len(records), key, error
                    )
                    self.count_failed(len(records))


def s3_put(s3: Callable[[], Any], bucket: str) -> Callable[[str, bytes, str], None]:
    """``DataCapture``'s writer over an S3 client (``s3()``: made on first use): SSE-KMS
    where a key is named."""

    def put(key: str, body: bytes, kms_key_id: str) -> None:
        extra = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": kms_key_id} if kms_key_id else {}
        s3().put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/jsonl", **extra)

    return put
