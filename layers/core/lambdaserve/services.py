"""Wiring: build the domain objects of a function from settings and AWS clients."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lambdaserve.aws import AwsClients
from lambdaserve.cache import ArtifactCache
from lambdaserve.catalog import Catalog
from lambdaserve.management import ModelManager
from lambdaserve.registrar import Registrar
from lambdaserve.repository import ModelRepository
from lambdaserve.runtimes import LoadOptions
from lambdaserve.serving import ModelServer, VersionResolver
from lambdaserve.settings import Settings
from lambdaserve.stats import StatsRegistry
from lambdaserve.validation import VersionValidator


@dataclass(frozen=True)
class ManageServices:
    """What the manage function (events, schedule and API) works with."""

    repository: ModelRepository
    catalog: Catalog
    registrar: Registrar
    manager: ModelManager


def build_model_server(
    settings: Settings, clients: AwsClients | None = None, stats: StatsRegistry | None = None
) -> ModelServer:
    """The inference side: catalog view with a TTL, artifact cache, runtimes."""
    clients = clients or AwsClients(settings)
    repository = ModelRepository(clients.s3, settings.bucket, settings.models_prefix)
    cache = ArtifactCache(
        Path(settings.work_dir) / "cache",
        settings.cache_bytes,
        lambda key, path: repository.download(key, str(path)),
    )
    return ModelServer(
        VersionResolver(Catalog(clients.dynamodb, settings.table), settings.catalog_ttl_s),
        cache,
        LoadOptions(device=settings.device, intra_op_threads=settings.intra_op_threads),
        settings.max_loaded_versions,
        stats or StatsRegistry(),
        default_max_batch_size=settings.default_max_batch_size,
    )


def build_manage_services(settings: Settings, clients: AwsClients | None = None) -> ManageServices:
    clients = clients or AwsClients(settings)
    repository = ModelRepository(clients.s3, settings.bucket, settings.models_prefix)
    catalog = Catalog(clients.dynamodb, settings.table)
    validator = VersionValidator(repository, settings.max_model_bytes, settings.work_dir)
    registrar = Registrar(repository, catalog, validator)
    return ManageServices(
        repository, catalog, registrar, ModelManager(repository, catalog, registrar)
    )
