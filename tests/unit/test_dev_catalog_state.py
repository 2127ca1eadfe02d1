"""`lambdaserve dev --model-repository` keeps what the management API set across restarts:
labels, the default version, config overrides, preload and unload."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

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
