"""Payload capture's own rules: the setting checked at publish, SageMaker's record, sampling,
a bounded backlog whose drops are counted, and writes that fail counted, never raised."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest

from lambdaserve.errors import InvalidInput
from lambdaserve.metrics.emf import InvocationMetrics
from lambdaserve.publishing.config_reader import check_capture_key
from lambdaserve.serving.capture.capture_offers import GRPC, offer_served
from lambdaserve.serving.capture.data_capture import (
    CaptureSetting,
    DataCapture,
    Exchange,
    capture_setting,
)

EXCHANGE = Exchange("m", 1, b'{"inputs": []}', "application/json", b"\x00\x01", "application/x")


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("not json", "not JSON"),
        ('{"sampling": 10}', "takes"),
        ('{"sampling_percentage": 101}', "0 to 100"),
        ('{"capture": ["inputs"]}', '"input" and "output"'),
        ('{"capture": []}', '"input" and "output"'),
        ('{"kms_key_id": 3}', "KMS key"),
    ],
)
def test_a_setting_that_does_not_parse_is_refused_naming_the_fix(raw: str, says: str):
    with pytest.raises(InvalidInput, match=says):
        capture_setting({"data_capture": raw})


def test_no_parameter_captures_nothing_and_defaults_capture_both_ways():
    assert capture_setting({}) is None
    assert capture_setting({"data_capture": "{}"}) == CaptureSetting()


def test_records_keep_text_types_as_text_and_the_rest_base64():
    written: list[tuple[str, bytes, str]] = []
    capture = DataCapture(lambda *put: written.append(put), "captures", sample=lambda: 0.0)
    capture.offer(CaptureSetting(kms_key_id="key-1"), EXCHANGE)
    capture.flush()
    [(key, body, kms)] = written
    record = json.loads(body)
    assert key.startswith("captures/m/1/") and kms == "key-1"
    assert record["captureData"]["endpointInput"] == {
        "observedContentType": "application/json",
        "mode": "INPUT",
        "data": '{"inputs": []}',
        "encoding": "JSON",
    }
    assert record["captureData"]["endpointOutput"]["encoding"] == "BASE64"
    assert record["captureData"]["endpointOutput"]["data"] == "AAE="


def test_sampling_a_full_backlog_and_failed_writes_are_counted_never_raised():
    def refuse(*_: object) -> None:
        raise ConnectionError("S3 unreachable")

    draws = iter([0.05, 0.5, 0.0, 0.0])
    capture = DataCapture(
        refuse, "captures", max_pending=1, sample=lambda: next(draws), writer=False
    )
    ten_percent = CaptureSetting(sampling_percentage=10)
    capture.offer(ten_percent, EXCHANGE)  # 5 < 10: taken
    capture.offer(ten_percent, EXCHANGE)  # 50 >= 10: not sampled
    capture.offer(ten_percent, EXCHANGE)  # the backlog holds one: dropped
    capture.flush()  # the write fails: counted
    assert (capture.counts.captured, capture.counts.dropped, capture.counts.failed) == (1, 1, 1)


def test_a_door_builds_the_bytes_only_for_a_sampled_request_and_lambda_reports_losses():
    # Given a capture sampling half the requests, and the EMF lines watching its counts
    draws = iter([0.9, 0.1, 0.1])
    capture = DataCapture(
        lambda *_: None, "captures", max_pending=1, sample=lambda: next(draws), writer=False
    )
    stream = io.StringIO()
    metrics = InvocationMetrics("lambdaserve-infer", stream)
    metrics.watch_capture(capture.snapshot)
    built: list[str] = []

    def serialized() -> bytes:
        built.append("request")
        return b"\x08\x01"

    served = SimpleNamespace(
        model="m",
        version=1,
        config=SimpleNamespace(parameters=(("data_capture", '{"sampling_percentage": 50}'),)),
    )
    # When three requests offer their exchanges (unsampled, sampled, sampled with a full backlog)
    for _ in range(3):
        offer_served(capture, served, (serialized, GRPC), (b"\x10", GRPC))  # type: ignore[arg-type]
    metrics.flush()
    # Then only the sampled ones built their bytes, and the drop is an EMF count
    assert built == ["request", "request"]
    assert capture.snapshot() == {"captured": 1, "dropped": 1, "failed": 0}
    [line] = [json.loads(text) for text in stream.getvalue().splitlines()]
    assert line["CaptureDropped"] == 1 and line["CaptureFailed"] == 0
    assert line["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"]]
    metrics.flush()  # nothing lost since: no line
    assert len(stream.getvalue().splitlines()) == 1


KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


@pytest.mark.parametrize("named", [KEY, "1234abcd-12ab-34cd-56ef-1234567890ab"])
def test_a_capture_key_must_be_the_model_buckets(named):
    # Given the stack's model bucket key, named by ARN or key id: accepted
    check_capture_key(named, (KEY,))
    # When another key is named, or any key where the stack has none
    with pytest.raises(InvalidInput, match="only with the model bucket's key") as other:
        check_capture_key("alias/captures", (KEY,))
    with pytest.raises(InvalidInput, match="ModelBucketKmsKeyArn") as none:
        check_capture_key(named, ())
    # Then each refusal says what to name instead
    assert KEY in other.value.message
    assert "leave kms_key_id out" in none.value.message
