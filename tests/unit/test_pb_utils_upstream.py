"""``triton_python_backend_utils`` against python_backend's own list of public names (test
data written from its source, the commit named in the file): every name exists here, and
the ones its examples lean on answer as python_backend's do."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from lambdaserve.metrics.custom import CUSTOM_METRICS, CustomMetrics
from lambdaserve.metrics.prometheus import exposition, metrics_registry
from lambdaserve.metrics.stats import StatsRegistry
from lambdaserve.runtimes import model_calls
from lambdaserve.runtimes.triton_python import pb_utils

UPSTREAM = json.loads(
    (
        Path(__file__).parents[1] / "fixtures" / "upstream" / "python_backend_pb_utils_names.json"
    ).read_text()
)


@pytest.mark.parametrize("name", UPSTREAM["module"])
def test_every_public_name_of_python_backends_module_exists(name: str) -> None:
    """Given a name python_backend's pb_utils defines
    When a model reads it from pb_utils here
    Then it is there."""
    assert hasattr(pb_utils, name), f"pb_utils lacks {name}"


@pytest.mark.parametrize(
    ("owner", "attribute"),
    [(owner, attribute) for owner, names in UPSTREAM["classes"].items() for attribute in names],
)
def test_every_method_of_its_classes_exists(owner: str, attribute: str) -> None:
    """Given a class of python_backend's pb_utils and one of its methods or constants
    When a model reaches it here
    Then the class has it."""
    assert hasattr(getattr(pb_utils, owner), attribute), f"pb_utils.{owner} lacks {attribute}"


def _objects(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The objects python_backend hands models rather than names: a response sender, the
    iterator a decoupled BLS call returns, a metric."""
    model_calls_port(monkeypatch, infer=lambda *_, **__: {}, stream=lambda *_: iter(()))
    request = pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[])
    family = pb_utils.MetricFamily("n", "d", pb_utils.MetricFamily.GAUGE, store=CustomMetrics())
    return {
        "InferenceResponseSender": pb_utils.InferenceResponseSender(lambda *_: None),
        "ResponseIterator": request.exec(decoupled=True),
        "Metric": family.Metric(labels={"a": "b"}),
    }


def test_the_objects_it_hands_models_have_their_methods(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the objects python_backend hands a model (sender, decoupled BLS iterator, metric)
    When a model calls their methods
    Then each method exists."""
    objects = _objects(monkeypatch)
    for owner, names in UPSTREAM["objects"].items():
        for name in names:
            assert hasattr(objects[owner], name), f"{owner} lacks {name}"


def test_decoupled_examples_read_the_transaction_policy_as_upstream() -> None:
    """Given configs as json.loads(args["model_config"]) gives them
    When python_backend's decoupled examples ask whether the model is decoupled
    Then the answer follows model_transaction_policy."""
    check = pb_utils.using_decoupled_model_transaction_policy
    assert check({"model_transaction_policy": {"decoupled": True}}) is True
    assert check({"model_transaction_policy": {"decoupled": False}}) is False
    assert check({"name": "m"}) is False


def test_type_helpers_answer_tritons_numbers() -> None:
    """Given numpy types and Triton's type numbers and names
    When the type helpers convert them
    Then they answer python_backend's values (FP32 is 11, STRING is 13 and an object array)."""
    assert pb_utils.numpy_to_triton_type(np.float32) == 11
    assert pb_utils.numpy_to_triton_type(np.dtype(np.object_)) == 13
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.complex64) is None
    for number in range(1, 14):
        assert pb_utils.numpy_to_triton_type(pb_utils.triton_to_numpy_type(number)) == number
    assert pb_utils.triton_to_numpy_type(99) is None
    assert pb_utils.TRITON_STRING_TO_NUMPY["TYPE_STRING"] is np.object_
    assert pb_utils.triton_string_to_numpy("TYPE_FP16") is np.float16
    assert pb_utils.Tensor("x", np.ones(2, np.int64)).triton_dtype() == 9


def test_request_accessors_and_release_flags() -> None:
    """Given a request with a timeout, flags and a string correlation id
    When a model reads them and sets release flags
    Then it reads what was given, RELEASE_ALL is taken and RESCHEDULE refused with why."""
    request = pb_utils.InferenceRequest(
        model_name="m", inputs=[], correlation_id="seq-1", timeout=500, flags=1
    )
    assert request.timeout() == 500
    assert request.correlation_id() == "seq-1"
    request.set_flags(pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END)
    assert request.flags() == 2
    assert request.trace().get_context() is None
    assert request.is_cancelled() is False
    request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL)
    with pytest.raises(pb_utils.TritonModelException, match="not rescheduled"):
        request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)


def test_model_control_from_a_model_is_refused_with_the_way_to_do_it() -> None:
    """Given a model calling pb_utils.load_model / unload_model
    When it runs here, where model code never changes the catalog
    Then it gets Triton's exception type naming the management API instead."""
    with pytest.raises(pb_utils.TritonModelException, match="/v2/repository/models/m/load"):
        pb_utils.load_model("m")
    with pytest.raises(pb_utils.TritonModelException, match="/v2/repository/models/m/unload"):
        pb_utils.unload_model("m")


def test_a_cancelled_decoupled_bls_iterator_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given a decoupled BLS call with three responses
    When the model cancels after the first
    Then no further response is read."""

    def three(*_: Any) -> Any:
        for i in range(3):
            yield {"y": np.array([i])}

    model_calls_port(monkeypatch, infer=lambda *_, **__: {}, stream=three)
    responses = pb_utils.InferenceRequest(model_name="m", inputs=[]).exec(decoupled=True)
    first = next(responses)
    responses.cancel()
    assert first.output_tensors()[0].as_numpy().tolist() == [0]
    assert list(responses) == []


def test_a_metric_familys_description_is_its_help_line_on_metrics() -> None:
    """Given a custom metric as python_backend's custom_metrics example declares it
    When /metrics is rendered
    Then its description is the family's # HELP line, it is typed counter, and its series
    carries the family's own name, as Triton writes them (the example's client looks for
    all three; prometheus_client alone would write them as requests_process_latency_ns_total)."""
    family = pb_utils.MetricFamily(
        name="requests_process_latency_ns",
        description="Cumulative time spent processing requests",
        kind=pb_utils.MetricFamily.COUNTER,
        store=(store := CustomMetrics()),  # its own: the process's may hold this name already
    )
    family.Metric(labels={"model": "custom_metrics"}).increment(5)
    registry = metrics_registry(StatsRegistry)
    registry.unregister(CUSTOM_METRICS)
    registry.register(store)
    text = exposition(registry).decode()
    assert "# HELP requests_process_latency_ns Cumulative time spent processing requests\n" in text
    assert "# TYPE requests_process_latency_ns counter\n" in text
    assert 'requests_process_latency_ns{model="custom_metrics"} 5.0\n' in text
    assert "requests_process_latency_ns_total" not in text, text


def model_calls_port(monkeypatch: pytest.MonkeyPatch, **calls: Any) -> None:
    """This process's model-to-model port, for the test: only ``calls``."""
    monkeypatch.setattr(model_calls, "current", lambda: SimpleNamespace(**calls))
