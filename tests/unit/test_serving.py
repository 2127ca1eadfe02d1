"""Serving against the real catalog (in-process moto) with real runtimes, compared to
onnxruntime and torch run directly on the same inputs."""

from __future__ import annotations

import io
from dataclasses import replace
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from lambdaserve.errors import InvalidInput, ModelNotFound, ModelNotReady
from lambdaserve.protocol.v2 import InferInput, InferRequest, RequestedOutput
from lambdaserve.serving.model_server import BatchItem
from lambdaserve.serving.version_resolver import VersionResolver
from lambdaserve.wiring.inference import build_model_server
from tests import builders

RNG = np.random.default_rng(1)


def publish(aws, model: str, files: dict[str, bytes]) -> None:
    for path, body in files.items():
        aws.put(f"models/{model}/{path}", body)
    aws.services.registrar.reconcile_model(model)


def request(**arrays: np.ndarray) -> InferRequest:
    from lambdaserve.tensors.encoding import v2_datatype

    return InferRequest(tuple(InferInput(n, v2_datatype(a), a.shape, a) for n, a in arrays.items()))


def run(server, model, req, version=None):
    return server.infer(model, version, req, lambda _served, outputs: outputs)


@pytest.fixture
def server(aws):
    return build_model_server(aws.settings, aws.clients)


@pytest.mark.parametrize(
    ("name", "model", "inputs"),
    [
        (
            "add_sub",
            builders.onnx_add_sub(),
            {"a": RNG.random((3, 4), np.float32), "b": RNG.random((3, 4), np.float32)},
        ),
        ("mlp", builders.onnx_mlp(4, 3), {"INPUT__0": RNG.random((5, 4), np.float32)}),
        ("cnn", builders.onnx_cnn(), {"image": RNG.random((2, 3, 8, 8), np.float32)}),
    ],
)
def test_onnx_outputs_equal_onnxruntime_run_directly(aws, server, name, model, inputs):
    publish(aws, name, {"1/model.onnx": model})
    outputs = run(server, name, request(**inputs))
    session = ort.InferenceSession(model)
    expected = session.run(None, inputs)
    for (got_name, got), want, meta in zip(
        outputs.items(), expected, session.get_outputs(), strict=True
    ):
        assert got_name == meta.name
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.torch
def test_torchscript_twins_match_torch_and_their_onnx_twins(aws, server):
    import torch

    twins = builders.torch_twins()
    samples = {
        "add_sub": {"a": RNG.random((3, 4), np.float32), "b": RNG.random((3, 4), np.float32)},
        "mlp": {"INPUT__0": RNG.random((4, 784), np.float32)},
        "cnn": {"image": RNG.random((2, 3, 8, 8), np.float32)},
    }
    for name, (pt, onnx_bytes, config) in twins.items():
        publish(aws, f"{name}-ts", {"config.pbtxt": config, "1/model.pt": pt})
        publish(aws, f"{name}-onnx", {"config.pbtxt": config, "1/model.onnx": onnx_bytes})
        scripted = run(server, f"{name}-ts", request(**samples[name]))
        exported = run(server, f"{name}-onnx", request(**samples[name]))
        module = torch.jit.load(io.BytesIO(pt))
        with torch.inference_mode():
            direct = module(*(torch.from_numpy(v) for v in samples[name].values()))
        direct = direct if isinstance(direct, tuple) else (direct,)
        for got, twin, want in zip(scripted.values(), exported.values(), direct, strict=True):
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)
            np.testing.assert_allclose(twin, want.numpy(), rtol=1e-4, atol=1e-5)


def test_all_v2_datatypes_through_onnxruntime(aws, server):
    publish(aws, "types", {"1/model.onnx": builders.onnx_datatypes()})
    outputs = run(
        server,
        "types",
        request(
            half=np.array([[0.5, 1.5, -2.0]], np.float16),
            ids=np.array([[1, 2, 3]], np.int64),
            flags=np.array([[True, False, True]]),
            text=np.array([[b"a", "\xe9t\xe9".encode(), b""]], dtype=object),
        ),
    )
    assert outputs["doubled"].dtype == np.float16 and outputs["doubled"].tolist() == [
        [1.0, 3.0, -4.0]
    ]
    assert outputs["next"].tolist() == [[2, 3, 4]]
    assert outputs["flipped"].tolist() == [[False, True, False]]
    assert outputs["echo"].tolist() == [[b"a", "\xe9t\xe9".encode(), b""]]


def test_output_selection_returns_only_what_was_asked(aws, server):
    publish(aws, "add_sub", {"1/model.onnx": builders.onnx_add_sub()})
    ones = np.ones((1, 4), np.float32)
    req = InferRequest(request(a=ones, b=ones).inputs, outputs=(RequestedOutput("diff"),))
    assert list(run(server, "add_sub", req)) == ["diff"]
    bad = InferRequest(req.inputs, outputs=(RequestedOutput("product"),))
    with pytest.raises(InvalidInput, match="unknown output 'product'"):
        run(server, "add_sub", bad)


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        (
            {"INPUT__0": np.ones((1, 5), np.float32)},
            "input 'INPUT__0': expected shape [-1, 4], got [1, 5]",
        ),
        (
            {"INPUT__0": np.ones((1, 4), np.float64)},
            "input 'INPUT__0': expected datatype FP32, got FP64",
        ),
        ({"pixels": np.ones((1, 4), np.float32)}, "unknown input 'pixels'"),
        ({}, "missing input 'INPUT__0' (FP32 [-1, 4])"),
    ],
)
def test_mismatched_inputs_name_the_tensor_expected_and_got(aws, server, arrays, message):
    publish(aws, "mlp", {"1/model.onnx": builders.onnx_mlp()})
    with pytest.raises(InvalidInput) as error:
        run(server, "mlp", request(**arrays))
    assert error.value.message.startswith(message)


def test_versions_and_default_resolution(aws, server):
    publish(
        aws,
        "m",
        {
            "config.pbtxt": b"version_policy: { all { } }",
            "1/model.onnx": builders.onnx_mlp(4, 3),
            "2/model.onnx": builders.onnx_mlp(4, 2),
        },
    )
    x = request(INPUT__0=np.ones((1, 4), np.float32))
    assert run(server, "m", x)["OUTPUT__0"].shape == (1, 2)  # default: highest
    assert run(server, "m", x, version=1)["OUTPUT__0"].shape == (1, 3)
    with pytest.raises(ModelNotFound, match="no version 7"):
        run(server, "m", x, version=7)
    with pytest.raises(ModelNotFound, match="Request for unknown model: 'ghost' is not found"):
        run(server, "ghost", x)


def test_unavailable_versions_are_not_ready_with_the_reason(aws, server):
    publish(aws, "m", {"1/model.onnx": builders.onnx_mlp(), "2/model.onnx": b"garbage" * 4})
    x = request(INPUT__0=np.ones((1, 4), np.float32))
    with pytest.raises(ModelNotReady, match="version 2 of 'm' is UNAVAILABLE: .*ONNX"):
        run(server, "m", x, version=2)
    publish(aws, "broken", {"1/model.onnx": b"garbage" * 4})
    with pytest.raises(ModelNotReady, match="has no READY version"):
        run(server, "broken", x)


def test_the_warm_path_reads_the_catalog_once_per_ttl(aws):
    publish(aws, "mlp", {"1/model.onnx": builders.onnx_mlp()})
    now = [0.0]
    calls = []
    catalog = aws.services.catalog
    original = catalog.get_model
    catalog.get_model = lambda name: calls.append(name) or original(name)
    resolver = VersionResolver(catalog, ttl_s=2.0, clock=lambda: now[0])
    for _ in range(50):
        resolver.resolve("mlp")
    assert calls == ["mlp"]
    now[0] = 2.5
    resolver.resolve("mlp")
    assert calls == ["mlp", "mlp"]


def test_a_version_that_became_ready_within_the_ttl_answers_at_once(aws, monkeypatch):
    # Given a view cached while version 1 was still loading
    publish(aws, "mlp", {"1/model.onnx": builders.onnx_mlp()})
    catalog = aws.services.catalog
    ready = catalog.versions("mlp")[0].state
    now, reads = [0.0], []
    resolver = VersionResolver(catalog, ttl_s=2.0, clock=lambda: now[0])
    states = {"state": "LOADING"}
    original = catalog.versions

    def versions(name: str) -> list[Any]:
        reads.append(name)
        return [replace(v, state=states["state"]) for v in original(name)]

    monkeypatch.setattr(catalog, "versions", versions)
    with pytest.raises(ModelNotReady, match="version 1 of 'mlp' is LOADING"):
        resolver.resolve("mlp", 1)
    # When the catalog says READY a moment later, within the view's TTL
    states["state"] = ready
    now[0] = 0.5
    # Then the refusal is checked against the catalog once more: the version answers
    assert resolver.resolve("mlp", 1).version == 1
    assert len(reads) == 2
    # and a refusal just read is final: no second read for it
    states["state"] = "LOADING"
    now[0] = 5.0
    with pytest.raises(ModelNotReady):
        resolver.resolve("mlp", 1)
    assert len(reads) == 3


def test_a_long_running_server_serves_a_stale_view_while_it_is_re_read(aws):
    # Given a resolver that refreshes in the background (the submitted work waits here)
    publish(aws, "mlp", {"1/model.onnx": builders.onnx_mlp()})
    now, submitted = [0.0], []
    resolver = VersionResolver(aws.services.catalog, ttl_s=2.0, clock=lambda: now[0])
    resolver.refresh_in_background(submitted.append)
    assert resolver.resolve("mlp").version == 1
    # When the view goes stale and a newer version becomes the default
    publish(aws, "mlp", {"2/model.onnx": builders.onnx_mlp(seed=2)})
    now[0] = 2.5
    # Then requests are answered from the stale view at once, with one refresh queued
    assert resolver.is_fresh("mlp")
    assert [resolver.resolve("mlp").version for _ in range(5)] == [1] * 5
    assert len(submitted) == 1
    # and once the refresh has run, the new default serves
    submitted.pop()()
    assert resolver.resolve("mlp").version == 2
    # A model that disappears is forgotten by the refresh: the next request hears it
    aws.services.catalog.get_model = lambda name: None
    now[0] = 5.0
    resolver.resolve("mlp")
    submitted.pop()()
    with pytest.raises(ModelNotFound):
        resolver.resolve("mlp")


def test_loaded_versions_are_unloaded_least_recently_used_first(aws):
    # the catalog view stays fresh however slow the machine: is_loaded asks without I/O
    settings = replace(aws.settings, max_loaded_versions=2, catalog_ttl_s=3600)
    server = build_model_server(settings, aws.clients)
    for name in ("a", "b", "c"):
        publish(aws, name, {"1/model.onnx": builders.onnx_mlp()})
    x = request(INPUT__0=np.ones((1, 4), np.float32))
    for name in ("a", "b", "a", "c"):
        run(server, name, x)
    assert server.is_loaded("a", None) and server.is_loaded("c", None)
    assert not server.is_loaded("b", None)


def test_batch_entry_returns_one_result_per_request_with_errors_in_place(aws, server):
    publish(aws, "mlp", {"1/model.onnx": builders.onnx_mlp()})
    good = request(INPUT__0=np.ones((2, 4), np.float32))
    bad = request(INPUT__0=np.ones((2, 9), np.float32))
    results = server.infer_batch(
        [BatchItem("mlp", None, good), BatchItem("mlp", None, bad), BatchItem("ghost", None, good)]
    )
    assert len(results) == 3
    assert results[0].outputs["OUTPUT__0"].shape == (2, 3) and results[0].version == 1
    assert isinstance(results[1].error, InvalidInput)
    assert isinstance(results[2].error, ModelNotFound)


def test_stats_count_success_failure_and_batch_sizes(aws, server):
    publish(aws, "mlp", {"1/model.onnx": builders.onnx_mlp()})
    run(server, "mlp", request(INPUT__0=np.ones((1, 4), np.float32)))
    run(server, "mlp", request(INPUT__0=np.ones((4, 4), np.float32)))
    with pytest.raises(InvalidInput):
        run(server, "mlp", request(INPUT__0=np.ones((1, 3), np.float32)))
    [stats] = server.stats.snapshot("mlp")["model_stats"]
    assert stats["inference_count"] == 5 and stats["execution_count"] == 2
    assert stats["inference_stats"]["success"]["count"] == 2
    assert stats["inference_stats"]["fail"]["count"] == 1
    assert [b["batch_size"] for b in stats["batch_stats"]] == [1, 4]
    assert stats["inference_stats"]["compute_infer"]["ns"] > 0


def test_the_batch_entry_runs_compatible_requests_together(aws, server):
    # Given 10 one-row requests for the MLP (default max batch 8), one of them malformed
    publish(aws, "mlp", {"1/model.onnx": builders.onnx_mlp()})
    rng = np.random.default_rng(3)
    good = [request(INPUT__0=rng.random((1, 4), dtype=np.float32)) for _ in range(9)]
    items = [BatchItem("mlp", None, r) for r in good]
    items.insert(4, BatchItem("mlp", None, request(INPUT__0=np.ones((1, 7), np.float32))))
    # When the batch entry point runs them
    results = server.infer_batch(items)
    # Then each good request gets exactly its own rows' answer, the bad one its own error
    assert isinstance(results[4].error, InvalidInput)
    session = ort.InferenceSession(builders.onnx_mlp())
    for item, result in zip(items, results, strict=True):
        if result.error is None:
            expected = session.run(None, {"INPUT__0": item.request.inputs[0].data})[0]
            np.testing.assert_allclose(result.outputs["OUTPUT__0"], expected, rtol=1e-6)
    # And they executed in batches (8 + 1), as the statistics show
    [stats] = server.stats.snapshot("mlp")["model_stats"]
    assert {b["batch_size"] for b in stats["batch_stats"]} == {8, 1}
    assert stats["execution_count"] == 2 and stats["inference_count"] == 9


def test_a_read_begun_before_forget_never_stores_its_view(aws):
    """Given a catalog read of a model in flight (another thread's),
    When the management side changes the model (a label) and forgets the view meanwhile,
    Then the read in flight does not store what it read before the change: the next resolve
    reads the catalog again and sees the label (before: a stale view for the TTL)."""
    import threading

    publish(aws, "mlp", {"1/model.onnx": builders.onnx_mlp()})
    catalog = aws.services.catalog
    reading, release = threading.Event(), threading.Event()
    original = catalog.versions

    def held_versions(name):
        found = original(name)
        if threading.current_thread().name == "reader":
            reading.set()
            release.wait(10)
        return found

    catalog.versions = held_versions
    resolver = VersionResolver(catalog, ttl_s=60.0)
    reader = threading.Thread(target=resolver.resolve, args=("mlp",), name="reader")
    reader.start()
    assert reading.wait(10)
    catalog.update_model("mlp", version_labels={"stable": 1})
    resolver.forget("mlp")
    release.set()
    reader.join(10)
    assert resolver.number("mlp", "stable") == 1


def test_a_label_set_on_the_management_side_is_told_to_the_serving_side_at_once(aws):
    """Given a process whose serving side watches the registrar (dev, serve),
    When a label is set, moved to the default, or removed through the manager,
    Then the serving side hears of each right after the write (it forgets its view)."""
    publish(aws, "mlp", {"1/model.onnx": builders.onnx_mlp()})
    told: list[str] = []
    aws.services.watchers.watch(told.append)
    aws.services.manager.set_label("mlp", "stable", 1)
    assert told == ["mlp"]
    aws.services.manager.set_default("mlp", 1)
    aws.services.manager.remove_label("mlp", "stable")
    assert told == ["mlp", "mlp", "mlp"]
