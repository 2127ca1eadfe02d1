"""The rollouts service, wired: the catalog's rollout items and tallies, the management
API's label moves, and the EventBridge bus the settings name (none: unannounced)."""

from __future__ import annotations

from lambdaserve.catalog.store import Catalog
from lambdaserve.catalog.tallies import TallyStore
from lambdaserve.rollouts.events import EventBridgeRollouts, RolloutAnnouncer, Unannounced
from lambdaserve.rollouts.service import LabelMover, Rollouts
from lambdaserve.rollouts.store import RolloutStore
from lambdaserve.settings import Settings
from lambdaserve.wiring.aws import AwsClients


def build_rollouts(settings: Settings, clients: AwsClients, labels: LabelMover) -> Rollouts:
    db, table = clients.dynamodb, settings.table
    announcer: RolloutAnnouncer = (
        EventBridgeRollouts(clients.events, settings.event_bus)
        if settings.event_bus
        else Unannounced()
    )
    tallies = TallyStore(db, table)
    store = RolloutStore(db, table)
    return Rollouts(Catalog(db, table), store, tallies, labels=labels, announcer=announcer)
