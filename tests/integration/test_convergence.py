"""Property: any order and duplication of repository events converges to the bucket's truth."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambdaserve.publishing.events import EventBatch
from tests import builders

GOOD = builders.onnx_mlp()
BAD = b"definitely not a model" * 3

operation = st.tuples(
    st.sampled_from(["a", "b"]),  # model
    st.integers(min_value=1, max_value=3),  # version
    st.sampled_from(["put-good", "put-bad", "delete", "config-all", "config-delete"]),
)


def apply(stack, model: str, version: int, action: str) -> str:
    """Change the bucket; return the key an S3 event would name."""
    key = f"models/{model}/{version}/model.onnx"
    if action == "put-good":
        stack.put(key, GOOD)
    elif action == "put-bad":
        stack.put(key, BAD)
    elif action == "delete":
        stack.delete(key)
    else:
        key = f"models/{model}/config.pbtxt"
        if action == "config-all":
            stack.put(key, b"version_policy: { all { } }")
        else:
            stack.delete(key)
    return key


def expected_states(stack, model: str) -> dict[int, str]:
    """What the bucket implies: READY/UNAVAILABLE per version, from first principles."""
    bucket = stack.services.repository
    present = {v: bucket.version_objects(model, v) for v in bucket.versions(model)}
    good = sorted(v for v, objs in present.items() if objs and objs[0].size == len(GOOD))
    config = bucket.read_config(model)
    served = set(good) if config else set(good[-1:])
    return {v: ("READY" if v in served else "UNAVAILABLE") for v in present}


def catalog_states(stack, model: str) -> dict[int, str]:
    return {v.version: v.state for v in stack.services.catalog.versions(model) if v.present}


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(operations=st.lists(operation, min_size=1, max_size=10), seed=st.integers(0, 2**32 - 1))
def test_shuffled_and_duplicated_events_converge_to_the_bucket(stack, operations, seed):
    # Stop the pump: this test delivers the events itself, in a hostile order.
    stack.pump.stop()
    registrar = stack.services.registrar
    models = {"a", "b"}
    for model in models:  # start each example from an empty bucket
        for version in (1, 2, 3):
            stack.delete(f"models/{model}/{version}/model.onnx")
        stack.delete(f"models/{model}/config.pbtxt")
    for model in models:
        registrar.reconcile_model(model)
    # Given the bucket changed by random operations
    keys = [apply(stack, *op) for op in operations]
    # When their events arrive shuffled and duplicated
    rng = random.Random(seed)
    events = keys + rng.choices(keys, k=len(keys))
    rng.shuffle(events)
    for key in events:
        EventBatch(registrar, stack.services.uploads).on_object_event(key)
    # Then the catalog equals what the bucket holds
    for model in models:
        assert catalog_states(stack, model) == expected_states(stack, model), model
