from __future__ import annotations

import pytest

from lambdaserve.catalog.store import ModelRecord, VersionRecord
from lambdaserve.errors import InvalidInput


def test_a_stale_reconcile_never_overwrites_a_newer_one(aws):
    catalog = aws.services.catalog
    # Given a version written from a bucket listing taken at t=200
    assert catalog.put_version(VersionRecord("m", 1, state="READY", observed_at=200))
    # When a slower reconcile that listed the bucket at t=100 tries to write
    written = catalog.put_version(VersionRecord("m", 1, present=False, observed_at=100))
    # Then it loses and the newer facts stay
    assert written is False
    assert catalog.get_version("m", 1).present is True


def test_state_updates_are_conditional_on_the_version_being_unchanged(aws):
    catalog = aws.services.catalog
    catalog.put_version(VersionRecord("m", 1, observed_at=5))
    revision = catalog.revision("m")
    stale = VersionRecord("m", 1, observed_at=4)
    assert catalog.set_version_states("m", revision, [(stale, "READY", "")]) is False
    fresh = catalog.get_version("m", 1)
    assert catalog.set_version_states("m", revision, [(fresh, "READY", "")]) is True
    assert catalog.get_version("m", 1).state == "READY"


def test_states_derived_from_a_stale_read_are_not_written(aws):
    catalog = aws.services.catalog
    # Given states derived after reading revision r
    catalog.put_version(VersionRecord("m", 1, observed_at=5))
    revision = catalog.revision("m")
    read = catalog.get_version("m", 1)
    # When another writer changes a model fact before they are written (an unload)
    catalog.update_model("m", unloaded=True)
    # Then the write is refused as a whole and nothing changes
    assert catalog.revision("m") > revision
    assert catalog.set_version_states("m", revision, [(read, "READY", "")]) is False
    assert catalog.get_version("m", 1).state == "LOADING"


def test_unload_racing_a_stale_policy_apply_ends_unloaded(aws, monkeypatch):
    """The race behind a CI failure: an event's policy apply read the model before an
    unload and wrote READY after it."""
    services = aws.services
    catalog = services.catalog
    catalog.put_model_config(ModelRecord(name="m", file_config={}, config_observed_at=1))
    catalog.put_version(VersionRecord("m", 1, valid=True, observed_at=1))
    services.registrar.apply_policy("m")
    assert catalog.get_version("m", 1).state == "READY"
    # Given an apply that reads the model item just before an unload lands
    real_get_model = catalog.get_model
    raced = []

    def get_model_then_unload(name):
        record = real_get_model(name)
        if not raced:
            raced.append(name)
            catalog.update_model(name, unloaded=True)
            services.registrar.apply_policy(name)  # the unload's own apply
        return record

    monkeypatch.setattr(catalog, "get_model", get_model_then_unload)
    # When the stale apply finishes
    services.registrar.apply_policy("m")
    # Then the unload wins
    assert catalog.get_version("m", 1).state == "UNAVAILABLE"


def test_model_listing_pages_with_an_opaque_token(aws):
    catalog = aws.services.catalog
    names = [f"model-{i:02d}" for i in range(7)]
    for name in reversed(names):
        catalog.put_model_config(ModelRecord(name=name, config_observed_at=1))
    pages, token = [], None
    while True:
        page, token = catalog.list_models(3, token)
        pages.append(page)
        if token is None:
            break
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [n for p in pages for n in p] == names


@pytest.mark.parametrize("token", ["garbage!", "eyJ4IjogMX0="])
def test_a_tampered_page_token_is_a_400_worthy_error(aws, token):
    with pytest.raises(InvalidInput, match="next_page_token"):
        aws.services.catalog.list_models(3, token)


def test_api_owned_fields_survive_config_refreshes(aws):
    catalog = aws.services.catalog
    catalog.update_model("m", overrides={"version_policy": {"all": {}}}, default_version=2)
    catalog.put_model_config(
        ModelRecord(name="m", config_source="config.pbtxt", config_observed_at=9)
    )
    record = catalog.get_model("m")
    assert record.overrides == {"version_policy": {"all": {}}}
    assert record.default_version == 2
    assert record.config_source == "config.pbtxt"
    catalog.update_model("m", default_version=None)
    assert catalog.get_model("m").default_version is None
