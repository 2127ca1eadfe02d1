"""`lambdaserve dev --model-repository` keeps what the management API set across restarts:
labels, the default version, config overrides, preload and unload."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from lambdaserve.catalog.store import Catalog
from lambdaserve.local.catalog_state import STATE_FILE, CatalogState
from lambdaserve.local.resources import ensure_resources


def test_the_catalogs_own_facts_survive_a_restart(aws, tmp_path: Path):
    # Given a dev session whose management API set a label, a default and an override
    before = aws.services.catalog
    before.update_model("m", version_labels={"stable": 2}, default_version=2)
    before.update_model("m", overrides={"version_policy": {"all": {}}}, preload=True)
    before.update_model("plain")  # nothing set: nothing to keep
    stop = threading.Event()
    saver = CatalogState(before, tmp_path).keep(stop, every_s=0.05)
    # When the session stops (the saver writes once more)
    stop.set()
    saver.join(timeout=5)
    assert (tmp_path / STATE_FILE).is_file()
    # And a new session starts with an empty catalog
    settings = replace(
        aws.settings,
        table="after-restart",
        bucket="after-restart",
        repository_events_queue="after-restart-events",
        requests_queue="after-restart-requests",
    )
    ensure_resources(aws.clients, settings)
    after = Catalog(aws.clients.dynamodb, settings.table)
    assert CatalogState(after, tmp_path).restore() == 1
    # Then the facts are back as they were
    restored = after.get_model("m")
    assert restored.version_labels == {"stable": 2} and restored.default_version == 2
    assert restored.overrides == {"version_policy": {"all": {}}} and restored.preload
    assert after.get_model("plain") is None


def test_a_state_file_in_another_shape_is_left_alone_with_a_warning(aws, tmp_path: Path, caplog):
    # Given a state file edited by hand into shapes the saver never writes
    path = tmp_path / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    catalog = aws.services.catalog
    for text in ('{"labels": {}}', "[1, 2]", '{"models": {"m": 3, "n": {"default_version": 1}}}'):
        path.write_text(text)
        # When dev starts, Then it starts: what fits is restored, the rest is named
        restored = CatalogState(catalog, tmp_path).restore()
        assert restored == (1 if "default_version" in text else 0)
    assert "holds no" in caplog.text
    assert catalog.get_model("n").default_version == 1


def _session(aws, name: str):
    """A fresh dev session's AWS side (the emulator keeps nothing across restarts), with
    model code enabled and checked where it serves, as `lambdaserve dev` runs."""
    from lambdaserve.handlers import load_check
    from lambdaserve.publishing.serving_check import InProcessCheck
    from lambdaserve.wiring.inference import build_model_server
    from lambdaserve.wiring.manage import build_manage_services

    settings = replace(
        aws.settings,
        table=name,
        bucket=name,
        repository_events_queue=f"{name}-events",
        requests_queue=f"{name}-requests",
        python_models=True,
        max_model_bytes=50_000_000,
    )
    ensure_resources(aws.clients, settings)
    services = build_manage_services(settings, aws.clients)
    server = build_model_server(settings, aws.clients)
    services.registrar.check_where_it_serves(
        InProcessCheck(lambda event: load_check.handle(event, server))
    )
    return settings, services, server


def _run(aws, name: str, folder: Path):
    """One `dev --model-repository folder` session: restore, mirror, publish, save."""
    from lambdaserve.local.mirror import RepositoryMirror
    from lambdaserve.publishing.events import EventBatch

    settings, services, server = _session(aws, name)
    state = CatalogState(services.catalog, folder)
    state.restore()
    mirror = RepositoryMirror(folder, aws.clients.s3, settings.bucket, settle_s=0)
    for path in mirror.sync().uploaded:
        EventBatch(services.registrar, services.uploads).on_object_event(f"models/{path}")
    state.save()
    return services, server


def test_an_archive_keeps_its_version_and_label_across_restarts(aws, tmp_path: Path):
    """Given `dev --model-repository DIR` serving DIR/tiny.mar (modelVersion 1.0) as
    /predictions/tiny/1.0
    When tiny.mar is replaced by its 2.0 build and dev restarts (TorchServe's model-store
    habit)
    Then the 2.0 build is a new version labelled 2.0, and 1.0 never answers with it: its
    archive is gone, so the label finds no version (404)
    When the 1.0 build is put back and dev restarts again
    Then it takes its old number back and 1.0 answers with it again."""
    pytest.importorskip("ts")
    from lambdaserve.errors import ModelNotFound
    from lambdaserve.serving.raw_predictions import RawRequest, predict_raw
    from tests.torchserve_archives import archive

    folder = tmp_path / "repository"
    folder.mkdir()
    builds = {}
    for build in ("1.0", "2.0"):
        (tmp_path / build).mkdir()
        builds[build] = archive(tmp_path / build, "tiny", build).read_bytes()

    def answer(server, label: str) -> bytes:
        number = server.resolver.number("tiny", label)
        request = RawRequest((("body", {"values": [0.5, -1.0, 2.0, 0.25]}),), {})
        return predict_raw(server, "tiny", number, request).body

    (folder / "tiny.mar").write_bytes(builds["1.0"])
    services, server = _run(aws, "first-run", folder)
    assert services.catalog.get_model("tiny").version_labels == {"1.0": 1}
    first_answer = answer(server, "1.0")

    (folder / "tiny.mar").write_bytes(builds["2.0"])
    services, server = _run(aws, "second-run", folder)
    assert services.catalog.get_model("tiny").version_labels == {"1.0": 1, "2.0": 2}
    assert services.catalog.get_version("tiny", 2).state == "READY"
    assert services.catalog.get_version("tiny", 1).present is False
    with pytest.raises(ModelNotFound):
        answer(server, "1.0")
    answer(server, "2.0")

    (folder / "tiny.mar").write_bytes(builds["1.0"])
    services, server = _run(aws, "third-run", folder)
    assert services.catalog.get_model("tiny").version_labels == {"1.0": 1, "2.0": 2}
    assert services.catalog.get_version("tiny", 1).state == "READY"
    assert answer(server, "1.0") == first_answer
    with pytest.raises(ModelNotFound):
        answer(server, "2.0")
