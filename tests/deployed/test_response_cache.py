"""The response cache's shared tier as deployed: two instances of the infer function, one
redis-server (ResponseCacheRedisHost), a response computed by one served to the other.
A stack of its own: two stacks cannot share the process's IAM switch."""

from __future__ import annotations

import json

import pytest

from lambdaserve.local.http_api_event import http_api_event
from tests import builders
from tests.deployed.stack import deployed
from tests.redis_server import redis_server

MLP = builders.onnx_mlp(4, 3)
ROWS = [[0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4]]
CACHED = b"max_batch_size: 8\nresponse_cache { enable: true }"
BODY = json.dumps(
    {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [2, 4], "data": ROWS}]}
).encode()


def test_a_response_cached_by_one_instance_is_a_hit_for_another_through_redis(
    tmp_path_factory: pytest.TempPathFactory,
):
    # Given the stack with its shared cache tier on a real redis-server, a cached model
    with (
        redis_server() as redis,
        deployed(
            tmp_path_factory.mktemp("cache"),
            {
                "ResponseCacheRedisHost": "127.0.0.1",
                "ResponseCacheRedisPort": str(redis.port),
                "ResponseCacheRedisTls": "false",  # the local redis-server speaks plain TCP
            },
        ) as running,
    ):
        running.publish("cached", {"config.pbtxt": CACHED, "1/model.onnx": MLP})
        event = http_api_event("POST", "/v2/models/cached/infer", BODY)
        # When one instance of the infer function answers a request
        assert running.invoke("InferFunction", event)["statusCode"] == 200
        # and a second, cold instance gets the same request
        with running.another_instance("InferFunction") as second:
            answer = second(event)
            stats = second(http_api_event("GET", "/v2/models/cached/stats", b""))
        # Then the second answered from the shared tier: a hit, not a computation
        assert answer["statusCode"] == 200, answer
        [model] = json.loads(stats["body"])["model_stats"]
        assert model["inference_stats"]["cache_hit"]["count"] == 1, model
