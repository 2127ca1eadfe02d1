"""A TF Serving user's SavedModel through the stack as deployed with the infer image's
`tensorflow` variant (`make build VARIANT=tensorflow`): the manage function (no TensorFlow)
reads its signatures and chooses TensorFlow, the load check reaches the infer function
started from the infer-tensorflow environment, and TF Serving's REST API answers through
the HTTP API's routes, every call under the functions' own roles."""

from __future__ import annotations

import json
from pathlib import Path

from lambdaserve.catalog.store import Catalog
from lambdaserve.local.http_api_event import http_api_event
from tests.deployed.stack import deployed

HALF_PLUS_TWO = Path(__file__).parents[1] / "fixtures" / "half_plus_two" / "tf2" / "00000123"
# the TF1 shape: classify and regress signatures beside serving_default (what only TensorFlow
# serves: OpenVINO takes serving_default alone)
MULTI_SIGNATURE = HALF_PLUS_TWO.parents[1] / "tf1" / "00000123"


def files_of(saved_model: Path) -> dict[str, bytes]:
    return {
        f"1/{p.relative_to(saved_model).as_posix()}": p.read_bytes()
        for p in sorted(saved_model.rglob("*"))
        if p.is_file()
    }


def test_tf_servings_half_plus_two_answers_through_the_tensorflow_variant(tmp_path: Path):
    # Given the stack with the infer function built as VARIANT=tensorflow
    with deployed(tmp_path, InferFunction="infer-tensorflow") as stack:
        # When half_plus_two is uploaded as its users have it
        stack.publish("half_plus_two", files_of(HALF_PLUS_TWO))
        body = json.dumps({"instances": [2.0]}).encode()  # testPredictSavedModel's
        answer = stack.http(http_api_event("POST", "/v1/models/half_plus_two:predict", body))
        [record] = Catalog(stack.clients.dynamodb, stack.settings.table).versions("half_plus_two")
        # And a SavedModel with classify and regress signatures beside serving_default
        stack.publish("multi", files_of(MULTI_SIGNATURE))
        named = {
            ":classify": {"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}]},
            ":regress": {"signature_name": "regress_x_to_y", "examples": [{"x": 2.0}]},
            ":predict": {"signature_name": "regress_x2_to_y3", "instances": [[1.0]]},
        }
        answers = {
            verb: stack.http(
                http_api_event("POST", f"/v1/models/multi{verb}", json.dumps(request).encode())
            )
            for verb, request in named.items()
        }
    # Then TensorFlow serves it, READY through the load check, with TF Serving's answer
    assert record.runtime == "tensorflow" and record.state == "READY"
    assert answer["statusCode"] == 200, answer
    assert json.loads(answer["body"]) == {"predictions": [3.0]}
    # And each named signature answers TF Serving's values (testClassifyREST, testRegressREST)
    assert {verb: json.loads(a["body"]) for verb, a in answers.items()} == {
        ":classify": {"results": [[["", 3.0]]]},
        ":regress": {"results": [3.0]},
        ":predict": {"predictions": [[3.5]]},
    }, answers
