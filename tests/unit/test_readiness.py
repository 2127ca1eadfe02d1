"""A long-running server's readiness: starting -> ready -> draining, and its warm-up."""

from __future__ import annotations

from lambdaserve.serving.readiness import Readiness, warm_up_in_background
from lambdaserve.serving.residency.preload import Preloaded
from lambdaserve.wiring.inference import build_model_server
from tests import builders


def test_readiness_moves_forward_only_and_tells_its_listeners():
    """Given a readiness with a listener
    When it warms up, drains, and a late warm-up report arrives
    Then it was not ready, then ready, then not ready for good; the listener heard each change
    once."""
    readiness = Readiness()
    heard: list[bool] = []
    readiness.listen(heard.append)
    assert not readiness.ready and "loading" in readiness.view.reason
    readiness.warmed(Preloaded((("mlp", 1),), (("bad", "cannot load"),), 10))
    assert readiness.ready and readiness.view.skipped == (("bad", "cannot load"),)
    readiness.drain()
    readiness.warmed(Preloaded((), (), 0))  # a warm-up finishing after SIGTERM changes nothing
    assert not readiness.ready and readiness.draining
    assert "shutting down" in readiness.view.reason
    assert heard == [True, False]


def test_draining_before_the_warm_up_ends_never_reports_ready():
    """Given a server told to stop while it still warms up
    Then it never reports ready."""
    readiness = Readiness()
    readiness.drain()
    readiness.warmed(Preloaded((), (), 0))
    assert not readiness.ready


def test_the_warm_up_loads_the_default_versions_then_reports_ready(aws):
    """Given two published models, one of which cannot load here (its file is gone)
    When the warm-up runs
    Then the loadable one is in memory before any request, the other is skipped with its
    reason, and the server is ready."""
    for model in ("mlp", "gone"):
        aws.put(f"models/{model}/1/model.onnx", builders.onnx_mlp(4, 3))
        aws.services.registrar.reconcile_model(model)
    server = build_model_server(aws.settings, aws.clients)
    # the catalog says READY, but the file left the bucket after validation
    aws.clients.s3.delete_object(Bucket=aws.settings.bucket, Key="models/gone/1/model.onnx")
    readiness = Readiness()
    warm_up_in_background(lambda: server, readiness, 10**9).join(timeout=120)
    assert readiness.ready
    assert server.residency.loaded_versions() == [("mlp", 1)]
    assert [name for name, _ in readiness.view.skipped] == ["gone"]
