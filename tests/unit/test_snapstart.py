"""SnapStart: the hooks registered with the runtime's snapshot_restore_py, run in-process as
the runtime runs them; the restored instance answers without downloading anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import snapshot_restore_py

from lambdaserve.handlers import infer, snapstart
from lambdaserve.metrics.cold_starts import summary
from lambdaserve.processes.event_pump import LocalContext
from lambdaserve.settings import get_settings
from lambdaserve.wiring.process import current, install
from tests import builders
from tests.support import wait_until

EVENTS = Path(__file__).parent.parent / "events"


@pytest.fixture
def lambda_instance(aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The infer module's singletons built from the environment, as in a Lambda sandbox."""
    monkeypatch.setenv("LAMBDASERVE_WORK_DIR", str(tmp_path / "sandbox"))
    monkeypatch.setenv("LAMBDASERVE_COLD_START", "snapstart")
    get_settings.cache_clear()
    install(None)
    yield
    get_settings.cache_clear()


@pytest.fixture
def registered():
    assert snapstart.register(snapstart.before_snapshot, snapstart.after_restore)
    before = [
        e for e in snapshot_restore_py.get_before_snapshot() if e[0] is snapstart.before_snapshot
    ]
    after = [e for e in snapshot_restore_py.get_after_restore() if e[0] is snapstart.after_restore]
    yield before[-1][0], after[-1][0]
    for registry, entry in (
        (snapshot_restore_py.get_before_snapshot(), before[-1]),
        (snapshot_restore_py.get_after_restore(), after[-1]),
    ):
        registry.remove(entry)


def publish(aws, model: str, body: bytes) -> None:
    aws.put(f"models/{model}/1/model.onnx", body)
    aws.services.registrar.reconcile_model(model)


def test_a_restored_instance_answers_from_the_snapshot_without_a_download(
    aws, lambda_instance, registered
):
    before_snapshot, after_restore = registered
    # Given two models, one marked to preload
    publish(aws, "mlp", builders.onnx_mlp(4, 3))
    publish(aws, "other", builders.onnx_mlp(6, 2))
    aws.services.manager.set_preload("mlp", True)
    # When the runtime runs the hooks before the snapshot
    before_snapshot()
    snapshotted = current().server()
    # Then the marked model is loaded (downloaded, session created, warmed) and only it
    assert snapshotted.residency.loaded_versions() == [("mlp", 1)]
    # When the instance is restored, its model files gone from S3 (a download would fail)
    for key in ("models/mlp/1/model.onnx", "models/other/1/model.onnx"):
        aws.clients.s3.delete_object(Bucket=aws.settings.bucket, Key=key)
    after_restore()
    restored = current().server()
    # Then it has new clients and the snapshot's models, and answers at once
    assert restored is not snapshotted
    assert restored.resolver.catalog is not snapshotted.resolver.catalog
    event = json.loads((EVENTS / "apigw_v2_infer_json.json").read_text())
    response = infer.api_handler(event, LocalContext("infer"))
    assert response["statusCode"] == 200, response["body"]
    assert json.loads(response["body"])["model_version"] == "1"
    assert restored.residency.downloads == 0

    # And the restore is the model's cold start here: the restore, then its first inference
    def recorded() -> dict | None:  # written by a thread of its own outside Lambda
        found = summary(aws.services.catalog.cold_starts("mlp", 1))
        return found if "firstInferenceMs" in found else None

    cold = wait_until(recorded, 10)
    assert cold["starts"] == ["restore"] and cold["count"] == 2  # and the snapshot's load
    assert cold["initMs"]["p50"] >= 0


def test_without_marks_every_default_version_is_preloaded_within_the_budget(
    aws, lambda_instance, monkeypatch: pytest.MonkeyPatch
):
    # Given two models and a budget that holds only the smaller
    small, large = builders.onnx_mlp(4, 3), builders.onnx_mlp(20_000, 3)
    publish(aws, "small", small)
    publish(aws, "large", large)
    monkeypatch.setenv("LAMBDASERVE_PRELOAD_BYTES", str(len(small) + 1000))
    get_settings.cache_clear()
    # When the snapshot is prepared
    snapstart.before_snapshot()
    # Then the small one is loaded and the large one waits for its first request
    assert current().server().residency.loaded_versions() == [("small", 1)]


def test_the_hooks_register_only_where_snapstart_is_asked_for():
    assert get_settings().cold_start == "none"
    assert not [
        e for e in snapshot_restore_py.get_before_snapshot() if e[0] is snapstart.before_snapshot
    ]
