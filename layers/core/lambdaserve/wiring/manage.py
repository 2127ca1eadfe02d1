"""The manage function's services: repository, catalog, registrar and manager, wired from
settings and AWS clients. The registrar's collaborators (the config reader, the version
labels, the watchers) are built here and handed to each that needs them, as is the uploads'
publisher: no service reaches another's through the registrar."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lambdaserve.catalog.repository import ModelRepository
from lambdaserve.catalog.store import Catalog
from lambdaserve.pipelines.ensemble_registry import Dependents, EnsembleRegistry
from lambdaserve.publishing.auto_complete import IsolatedProcess, ValidatorFunction
from lambdaserve.publishing.config_reader import ConfigReader
from lambdaserve.publishing.environments.builders import FunctionBuilder, IsolatedBuilder
from lambdaserve.publishing.environments.store import EnvironmentOptions, Environments
from lambdaserve.publishing.management import ModelManager
from lambdaserve.publishing.registrar import Registrar
from lambdaserve.publishing.serving_check import InferFunctionCheck
from lambdaserve.publishing.uploads import UploadPublisher
from lambdaserve.publishing.validation import VersionValidator
from lambdaserve.publishing.version_labels import VersionLabels
from lambdaserve.publishing.watchers import ModelWatchers
from lambdaserve.settings import Settings
from lambdaserve.wiring.aws import AwsClients, state_announcer


@dataclass(frozen=True)
class ManageServices:
    """What the manage function (events, schedule and API) works with."""

    repository: ModelRepository
    catalog: Catalog
    registrar: Registrar
    manager: ModelManager
    uploads: UploadPublisher
    configs: ConfigReader
    labels: VersionLabels
    watchers: ModelWatchers  # the serving side of this process listens here (dev, serve)


def build_manage_services(
    settings: Settings,
    clients: AwsClients | None = None,
    on_config_rejected: Callable[[str, str], None] | None = None,
) -> ManageServices:
    clients = clients or AwsClients(settings)
    repository = ModelRepository(clients.s3, settings.bucket, settings.models_prefix)
    catalog = Catalog(clients.dynamodb, settings.table, state_announcer(settings, clients))
    validator = VersionValidator(
        repository,
        settings.max_model_bytes,
        settings.work_dir,
        python_models=settings.python_models,
        completer=(
            ValidatorFunction(validator_client(settings), settings.code_validator_function)
            if settings.code_validator_function
            else IsolatedProcess()
        ),
        environments=environments(settings, clients),
    )
    configs = ConfigReader(
        repository,
        catalog,
        time.time_ns,
        on_config_rejected,
        capture_keys=(settings.kms_key_arn,) if settings.kms_key_arn else (),
    )
    watchers = ModelWatchers()
    labels = VersionLabels(repository, catalog, watchers)
    registrar = Registrar(
        repository,
        catalog,
        validator,
        configs=configs,
        labels=labels,
        watchers=watchers,
        ensembles=EnsembleRegistry(catalog, Dependents(clients.dynamodb, settings.table)),
    )
    if settings.serving_check_function:
        registrar.check_where_it_serves(
            InferFunctionCheck(validator_client(settings), settings.serving_check_function)
        )
    manager = ModelManager(
        repository,
        catalog,
        registrar,
        configs=configs,
        labels=labels,
        watchers=watchers,
        control_mode=settings.model_control_mode,
    )
    uploads = UploadPublisher(repository, catalog, registrar, configs, labels)
    return ManageServices(
        repository, catalog, registrar, manager, uploads, configs, labels, watchers
    )


def environments(settings: Settings, clients: AwsClients) -> Environments:
    """Requirements files built into environments by the sandbox: the code-validator
    function where it is deployed, a child process without credentials otherwise."""
    return Environments(
        clients.s3,
        settings.bucket,
        (
            FunctionBuilder(
                validator_client(settings, read_timeout=330), settings.code_validator_function
            )
            if settings.code_validator_function
            else IsolatedBuilder()
        ),
        EnvironmentOptions(settings.package_index_url, settings.env_max_bytes),
    )


def validator_client(settings: Settings, read_timeout: int = 120) -> Any:
    """The Lambda client that invokes the code validator or the infer function's load check:
    one try (user code must not run twice), and a read timeout past the validator's own 90 s
    (a load check that runs longer ends as a failed check: the next load checks again). An
    environment build may take the validator's whole 300 s: its client waits past that."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "lambda",
        region_name=settings.region,
        endpoint_url=settings.endpoint_url,
        config=Config(read_timeout=read_timeout, connect_timeout=5, retries={"max_attempts": 1}),
    )
