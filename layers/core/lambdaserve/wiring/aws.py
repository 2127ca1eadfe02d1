"""boto3 clients that honour AWS_ENDPOINT_URL, with bounded retries and timeouts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config

from lambdaserve.catalog.state_events import EventBridgeAnnouncer, Silent, StateAnnouncer
from lambdaserve.settings import Settings

_CLIENT_CONFIG = Config(
    retries={"max_attempts": 5, "mode": "standard"},
    connect_timeout=5,
    read_timeout=60,
    max_pool_connections=32,
)


@dataclass
class AwsClients:
    """Lazily created, shared boto3 clients for one settings object.

    boto3 clients are thread-safe; sessions are not, so each holder owns one session.
    """

    settings: Settings
    _session: boto3.session.Session = field(init=False)
    _clients: dict[str, Any] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._session = boto3.session.Session(region_name=self.settings.region)

    def client(self, service: str) -> Any:
        """A boto3 client for ``service`` pointed at the configured endpoint."""
        if service not in self._clients:
            self._clients[service] = self._session.client(
                service,  # type: ignore[call-overload]
                endpoint_url=self.settings.endpoint_url,
                config=_CLIENT_CONFIG,
            )
        return self._clients[service]

    @property
    def s3(self) -> Any:
        return self.client("s3")

    @property
    def dynamodb(self) -> Any:
        return self.client("dynamodb")

    @property
    def sqs(self) -> Any:
        return self.client("sqs")

    @property
    def events(self) -> Any:
        return self.client("events")


def state_announcer(settings: Settings, clients: AwsClients) -> StateAnnouncer:
    """Who hears of the catalog's state changes: the settings' EventBridge bus, or no one."""
    bus = settings.event_bus
    return EventBridgeAnnouncer(clients.events, bus) if bus else Silent()
