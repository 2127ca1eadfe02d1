"""Triton's response cache on the model server: real catalog (in-process moto), real ONNX
Runtime sessions, the cache's own tiers and codec."""

from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest

from lambdaserve.errors import InvalidInput
from lambdaserve.metrics.prometheus import metrics_registry
from lambdaserve.protocol.v2 import InferInput, InferRequest, RequestedOutput
from lambdaserve.serving.response_cache.codec import (
    MalformedEntry,
    decode_outputs,
    decode_sequence,
    encode_outputs,
    encode_sequence,
)
from lambdaserve.serving.response_cache.from_settings import cache_config_env, response_cache_from
from lambdaserve.serving.response_cache.lookups import ResponseCache, request_key
from lambdaserve.serving.response_cache.tiers import LocalTier
from lambdaserve.tensors.encoding import v2_datatype
from lambdaserve.wiring.inference import build_model_server
from tests import builders

CACHED = b"response_cache { enable: true }"
MLP = builders.onnx_mlp(4, 3)
ROWS = np.random.default_rng(3).random((2, 4), dtype=np.float32)


def publish(aws, model: str, files: dict[str, bytes]) -> None:
    for path, body in files.items():
        aws.put(f"models/{model}/{path}", body)
    aws.services.registrar.reconcile_model(model)


def request(rows: np.ndarray = ROWS, **extra) -> InferRequest:
    return InferRequest((InferInput("INPUT__0", v2_datatype(rows), rows.shape, rows),), **extra)


def run(server, model: str, req: InferRequest) -> dict[str, np.ndarray]:
    return server.infer(model, None, req, lambda _served, outputs: dict(outputs))


def cache_stats(server, model: str) -> tuple[int, int]:
    [entry] = server.stats.snapshot(model)["model_stats"]
    stats = entry["inference_stats"]
    return stats["cache_hit"]["count"], stats["cache_miss"]["count"]


def shared_servers(aws, tier: LocalTier, count: int = 2):
    """Instances of the infer function sharing one tier (as every instance shares Redis)."""
    return [
        build_model_server(replace(aws.settings, response_cache_bytes=0), aws.clients)
        for _ in range(count)
    ], ResponseCache([tier], 1024**2)


def test_a_second_instance_answers_from_the_shared_tier_without_loading_the_model(aws):
    """Given a model with response_cache and two instances sharing a tier
    When the first computes an answer and the second gets the same request
    Then the second answers it from the cache, byte for byte, its model never loaded."""
    publish(aws, "mlp", {"config.pbtxt": CACHED, "1/model.onnx": MLP})
    (first, second), cache = shared_servers(aws, LocalTier(1024**2))
    first.response_cache = second.response_cache = cache
    computed = run(first, "mlp", request())
    answered = run(second, "mlp", request())
    assert second.residency.loaded_versions() == []
    assert answered.keys() == computed.keys()
    assert answered["OUTPUT__0"].tobytes() == computed["OUTPUT__0"].tobytes()
    expected = ort.InferenceSession(MLP).run(None, {"INPUT__0": ROWS})[0]
    np.testing.assert_array_equal(answered["OUTPUT__0"], expected)
    assert cache_stats(first, "mlp") == (0, 1)
    assert cache_stats(second, "mlp") == (1, 0)
    [entry] = second.stats.snapshot("mlp")["model_stats"]
    # Triton: a hit is a success, never an inference or an execution
    assert entry["inference_stats"]["success"]["count"] == 1
    assert entry["inference_count"] == 0 and entry["execution_count"] == 0


def test_models_without_response_cache_always_run(aws):
    """Given a model that does not opt in, When asked twice, Then the cache is never asked."""
    publish(aws, "plain", {"1/model.onnx": MLP})
    server = build_model_server(aws.settings, aws.clients)
    run(server, "plain", request())
    run(server, "plain", request())
    [entry] = server.stats.snapshot("plain")["model_stats"]
    assert entry["execution_count"] == 2
    assert cache_stats(server, "plain") == (0, 0)


def test_only_successes_are_stored(aws):
    """Given a request the model refuses, When sent twice, Then both are misses and fail."""
    publish(aws, "mlp", {"config.pbtxt": CACHED, "1/model.onnx": MLP})
    server = build_model_server(aws.settings, aws.clients)
    wrong = np.zeros((1, 5), np.float32)
    for _ in range(2):
        with pytest.raises(InvalidInput):
            run(server, "mlp", request(wrong))
    assert cache_stats(server, "mlp") == (0, 2)


def test_new_files_under_the_same_version_never_answer_from_an_old_entry(aws):
    """Given an answer cached for version 1
    When version 1's model file is replaced by different weights
    Then the next request is a miss, answered by the new weights."""
    publish(aws, "mlp", {"config.pbtxt": CACHED, "1/model.onnx": MLP})
    server = build_model_server(replace(aws.settings, catalog_ttl_s=0), aws.clients)
    run(server, "mlp", request())
    other = builders.onnx_mlp(4, 3, seed=7)
    publish(aws, "mlp", {"1/model.onnx": other})
    answered = run(server, "mlp", request())
    expected = ort.InferenceSession(other).run(None, {"INPUT__0": ROWS})[0]
    np.testing.assert_array_equal(answered["OUTPUT__0"], expected)
    assert cache_stats(server, "mlp") == (0, 2)


def test_a_new_config_never_answers_from_an_old_entry(aws):
    """Given an answer cached under one config, When the config changes (the same files),
    Then the same request is a miss; asked again under the new config, a hit."""
    publish(aws, "mlp", {"config.pbtxt": CACHED, "1/model.onnx": MLP})
    server = build_model_server(replace(aws.settings, catalog_ttl_s=0), aws.clients)
    run(server, "mlp", request())
    publish(
        aws,
        "mlp",
        {"config.pbtxt": CACHED + b' parameters { key: "k" value: { string_value: "v" } }'},
    )
    run(server, "mlp", request())
    run(server, "mlp", request())
    assert cache_stats(server, "mlp") == (1, 2)


def test_answers_over_the_entry_bound_are_computed_and_counted_not_kept(aws):
    """Given an entry bound below the answer's size, When asked twice, Then both compute,
    and Prometheus counts the answers not kept."""
    publish(aws, "mlp", {"config.pbtxt": CACHED, "1/model.onnx": MLP})
    server = build_model_server(
        replace(aws.settings, response_cache_max_entry_bytes=16), aws.clients
    )
    run(server, "mlp", request())
    run(server, "mlp", request())
    assert cache_stats(server, "mlp") == (0, 2)
    text = _scrape(server)
    assert 'lambdaserve_cache_entries_too_large{model="mlp",version="1"} 2.0' in text
    assert 'nv_cache_num_misses_per_model{model="mlp",version="1"} 2.0' in text


def test_prometheus_counts_hits_with_tritons_names(aws):
    publish(aws, "mlp", {"config.pbtxt": CACHED, "1/model.onnx": MLP})
    server = build_model_server(aws.settings, aws.clients)
    for _ in range(3):
        run(server, "mlp", request())
    text = _scrape(server)
    assert 'nv_cache_num_hits_per_model{model="mlp",version="1"} 2.0' in text
    assert 'nv_cache_num_misses_per_model{model="mlp",version="1"} 1.0' in text
    assert 'nv_cache_hit_duration_per_model{model="mlp",version="1"}' in text


def _scrape(server) -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics_registry(lambda: server.stats)).decode()


def test_the_key_covers_what_changes_the_answer_and_nothing_else(aws):
    """Triton's key: inputs' names, datatypes, shapes and bytes, the outputs asked for and
    their class counts, the request's parameters; not how the answer is encoded."""
    version = b"v1"
    base = request_key(version, request())
    assert request_key(version, request()) == base
    assert request_key(b"v2", request()) != base
    assert request_key(version, request(ROWS + 1)) != base
    assert request_key(version, request(ROWS.reshape(4, 2))) != base
    assert request_key(version, request(ROWS.astype(np.float64))) != base
    asked = (RequestedOutput("OUTPUT__0"),)
    assert request_key(version, request(outputs=asked)) != base
    classified = (RequestedOutput("OUTPUT__0", classification=2),)
    assert request_key(version, request(outputs=classified)) != request_key(
        version, request(outputs=asked)
    )
    binary = (RequestedOutput("OUTPUT__0", binary=True),)
    assert request_key(version, request(outputs=binary)) == request_key(
        version, request(outputs=asked)
    )
    assert request_key(version, request(binary_output=True)) == base
    assert request_key(version, request(id="other")) == base
    assert request_key(version, request(parameters={"temperature": 0.5})) != base
    assert request_key(version, request(parameters={"binary_data_output": True})) == base


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.arange(4, dtype=np.int64),
        np.array([True, False]),
        np.arange(3, dtype=np.float16),
        np.arange(3, dtype=np.float32).astype(ml_dtypes.bfloat16),
        np.array([b"a", b"", "\u00e9".encode()], dtype=object),
        np.zeros((0, 3), np.float32),
    ],
)
def test_entries_round_trip_every_datatype(array):
    outputs = {"b": array, "a": np.ones(2, np.int8)}
    decoded = decode_outputs(encode_outputs(outputs))
    assert list(decoded) == ["b", "a"]
    assert decoded["b"].dtype == array.dtype and decoded["b"].shape == array.shape
    assert decoded["b"].tolist() == array.tolist()


@pytest.mark.parametrize(
    "entry", [b"", b"pickle", encode_outputs({"a": np.ones(3, np.float32)})[:-1], b"LSRC1\x02"]
)
def test_malformed_entries_are_refused(entry):
    with pytest.raises(MalformedEntry):
        decode_outputs(entry)


def test_the_local_tier_is_bounded_in_bytes_least_recently_used_out():
    tier = LocalTier(100)
    tier.put(b"a", b"x" * 40)
    tier.put(b"b", b"x" * 40)
    assert tier.get(b"a") is not None  # b is now the least recently used
    tier.put(b"c", b"x" * 40)
    assert tier.get(b"b") is None and tier.get(b"a") is not None and tier.get(b"c") is not None
    assert tier.used_bytes <= 100 and tier.evictions == 1
    tier.put(b"huge", b"x" * 200)
    assert tier.get(b"huge") is None and len(tier) == 2


def test_cache_config_is_spelled_as_tritons_command_line():
    assert cache_config_env(["local,size=1048576"]) == {
        "LAMBDASERVE_RESPONSE_CACHE_BYTES": "1048576"
    }
    assert cache_config_env(["redis,host=cache.internal", "redis,port=6380"]) == {
        "LAMBDASERVE_REDIS_HOST": "cache.internal",
        "LAMBDASERVE_REDIS_PORT": "6380",
    }
    both = cache_config_env(["redis,host=h,port=1,tls_enabled=true,ttl=60", "local,size=0"])
    assert both["LAMBDASERVE_REDIS_TLS"] == "true" and both["LAMBDASERVE_REDIS_TTL_S"] == "60"
    for wrong, said in [
        ("memcached,size=1", "local"),
        ("local,bytes=1", "size"),
        ("local,size=big", "whole number"),
        ("redis,port=1", "host="),
        ("local", "<cache>,<setting>=<value>"),
    ]:
        with pytest.raises(InvalidInput, match=said):
            cache_config_env([wrong])


def test_settings_choose_the_tiers(aws):
    assert response_cache_from(replace(aws.settings, response_cache_bytes=0)) is None
    local = response_cache_from(aws.settings)
    assert local is not None and not local.blocking
    shared = response_cache_from(replace(aws.settings, redis_host="127.0.0.1", redis_port=1))
    assert shared is not None and shared.blocking and len(shared.tiers) == 2


def test_the_infer_functions_emf_lines_count_hits_and_misses(aws):
    """Given the infer function's invocation metrics listening to the statistics
    When one request misses and one hits in an invocation
    Then its EMF line for the version declares and carries CacheHits and CacheMisses."""
    import io
    import json

    from lambdaserve.metrics.emf import InvocationMetrics
    from lambdaserve.metrics.stats import StatsRegistry

    publish(aws, "mlp", {"config.pbtxt": CACHED, "1/model.onnx": MLP})
    out = io.StringIO()
    metrics = InvocationMetrics("lambdaserve-infer", out)
    stats = StatsRegistry(metrics.record, metrics.record_cache)
    server = build_model_server(aws.settings, aws.clients, stats)
    run(server, "mlp", request())
    run(server, "mlp", request())
    metrics.flush()
    [line] = [json.loads(text) for text in out.getvalue().splitlines()]
    declared = [m["Name"] for m in line["_aws"]["CloudWatchMetrics"][0]["Metrics"]]
    assert {"CacheHits", "CacheMisses"} <= set(declared)
    assert (line["Inferences"], line["CacheHits"], line["CacheMisses"]) == (2, 1, 1)


def test_a_response_sequence_round_trips_in_order_and_refuses_a_truncated_entry():
    responses = [
        {"OUT": np.array([v], np.int32), "IDX": np.array([i], np.uint32)}
        for i, v in enumerate([4, 2, 7])
    ]
    entry = encode_sequence(responses)
    decoded = decode_sequence(entry)
    assert [(int(r["OUT"][0]), int(r["IDX"][0])) for r in decoded] == [(4, 0), (2, 1), (7, 2)]
    assert decode_sequence(encode_sequence([])) == []
    for broken in (entry[:-1], entry + b"x", encode_outputs(responses[0])):
        with pytest.raises(MalformedEntry):
            decode_sequence(broken)
