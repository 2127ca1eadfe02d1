"""TorchServe's built-in vision handlers, unchanged: archives naming ``image_classifier``,
``object_detector`` and ``image_segmenter`` (torch-model-archiver, eager model.py + state
dict, index_to_name.json), and a handler.py subclassing ImageClassifier, answer an image as
TorchServe's own code answers it in this process."""

from __future__ import annotations

import importlib.util
import json

import pytest

from lambdaserve.catalog import version_policy
from lambdaserve.publishing.events import EventBatch
from lambdaserve.serving.raw_predictions import RawRequest, predict_raw
from lambdaserve.wiring.inference import build_model_server
from tests.torchserve_archives import HANDLERS, builtin_archive, jpeg, torchserve_answers

pytest.importorskip("torch")
pytest.importorskip("ts")
if importlib.util.find_spec("torchvision") is None:  # importorskip would import it
    pytest.skip("torchvision is not installed", allow_module_level=True)
pytest.importorskip("captum")  # VisionHandler imports it at module level
pytestmark = pytest.mark.torch


@pytest.fixture
def enabled(model_code_enabled):
    return model_code_enabled


@pytest.mark.parametrize(
    "fixture,handler",
    [("classifier", "image_classifier"), ("detector", "object_detector"),
     ("segmenter", "image_segmenter"), ("digits", str(HANDLERS / "digits" / "handler.py"))],
)  # fmt: skip
def test_a_builtin_vision_handler_answers_as_torchserve_does(enabled, tmp_path, fixture, handler):
    # Given an archive naming a built-in handler (or a handler.py subclassing one), uploaded
    # as `aws s3 cp x.mar .../models/`
    mar = builtin_archive(tmp_path, fixture, handler)
    enabled.put(f"models/{mar.name}", mar.read_bytes())
    EventBatch(enabled.services.registrar, enabled.services.uploads).on_object_event(
        f"models/{mar.name}"
    )
    assert enabled.services.catalog.get_version(fixture, 1).state == version_policy.READY
    # When a JPEG arrives as curl -T sends it (the raw body)
    image = jpeg(seed=7, size=(28, 28)) if fixture == "digits" else jpeg(seed=7)
    server = build_model_server(enabled.settings, enabled.clients)
    answer = predict_raw(server, fixture, None, RawRequest((("body", image),), {}))
    # Then the answer is the one TorchServe's own loader and handler give in this process
    [want] = torchserve_answers(mar, [image], tmp_path)
    assert json.loads(answer.body) == json.loads(json.dumps(want))
    if fixture == "classifier":  # top 5, named from index_to_name.json
        assert len(want) == 5 and set(want) <= {
            "tench", "goldfish", "shark", "ray", "cock", "hen", "ostrich", "finch", "robin", "jay",
        }  # fmt: skip
    if fixture == "digits":  # the subclass's own postprocess: the digit
        assert want in range(10)
    if fixture == "detector":  # the handler's 0.5 threshold kept some boxes, named
        assert len(want) == 2 and all(
            set(box) <= {"person", "bicycle", "car", "score"} for box in want
        )
