"""Wiring: build the domain objects of a function from settings and AWS clients."""

from __future__ import annotations

from dataclasses import dataclass

from lambdaserve.aws import AwsClients
from lambdaserve.catalog import Catalog
from lambdaserve.management import ModelManager
from lambdaserve.registrar import Registrar
from lambdaserve.repository import ModelRepository
from lambdaserve.settings import Settings
from lambdaserve.validation import VersionValidator


@dataclass(frozen=True)
class ManageServices:
    """What the manage function (events, schedule and API) works with."""

    repository: ModelRepository
    catalog: Catalog
    registrar: Registrar
    manager: ModelManager


def build_manage_services(settings: Settings, clients: AwsClients | None = None) -> ManageServices:
    clients = clients or AwsClients(settings)
    repository = ModelRepository(clients.s3, settings.bucket, settings.models_prefix)
    catalog = Catalog(clients.dynamodb, settings.table)
    validator = VersionValidator(repository, settings.max_model_bytes, settings.work_dir)
    registrar = Registrar(repository, catalog, validator)
    return ManageServices(
        repository, catalog, registrar, ModelManager(repository, catalog, registrar)
    )
