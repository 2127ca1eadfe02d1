"""The inference side's services alone: what the infer function's direct path needs, kept
apart from the management and queue services so a cold start imports only this."""

from __future__ import annotations

from pathlib import Path

from lambdaserve.catalog.repository import ModelRepository
from lambdaserve.catalog.store import Catalog
from lambdaserve.metrics.stats import StatsRegistry
from lambdaserve.pipelines.bls import install_bls
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.serving.cache import ArtifactCache
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.serving.fleet_slots.from_settings import fleet_slots_from
from lambdaserve.serving.model_server import ModelServer
from lambdaserve.serving.rate_limiter import EXECUTION_COUNT, RateLimiter, parse_resources
from lambdaserve.serving.residency.environments import EnvironmentDirectories
from lambdaserve.serving.residency.residency import Residency
from lambdaserve.serving.response_cache.from_settings import response_cache_from
from lambdaserve.serving.sequences.from_settings import sequence_steps_from
from lambdaserve.serving.version_resolver import VersionResolver
from lambdaserve.settings import Settings
from lambdaserve.wiring.aws import AwsClients, state_announcer
from lambdaserve.workers.options import EnvironmentPaths, WorkerOptions


def build_model_server(
    settings: Settings,
    clients: AwsClients | None = None,
    stats: StatsRegistry | None = None,
    environment_paths: EnvironmentPaths | None = None,
    plane: InferenceDataPlane | None = None,
) -> ModelServer:
    """The inference side: catalog view with a TTL, artifact cache, runtimes; model code in
    worker processes where the settings enable them, each version's environment first on
    its workers' path (``environment_paths``; by default the ones this cache holds). Models
    calling models go through ``plane``, the process's one (``wiring.process``); without
    one (tests, scripts: a server alone), through a plane over this server."""
    clients = clients or AwsClients(settings)
    repository = ModelRepository(clients.s3, settings.bucket, settings.models_prefix)
    cache = ArtifactCache(
        Path(settings.work_dir) / "cache",
        settings.cache_bytes,
        lambda key, path: repository.download(key, str(path)),
    )
    resolver = VersionResolver(
        Catalog(clients.dynamodb, settings.table, state_announcer(settings, clients)),
        settings.catalog_ttl_s,
    )
    stats = stats or StatsRegistry()
    rate_limiter = rate_limiter_from(settings)
    residency = Residency(
        resolver,
        cache,
        LoadOptions(
            device=settings.device,
            intra_op_threads=settings.intra_op_threads,
            python_models=settings.python_models,
        ),
        stats,
        max_loaded=settings.max_loaded_versions,
        max_loaded_bytes=settings.max_loaded_bytes,
        workers=WorkerOptions(
            enabled=settings.code_workers,
            timeout_s=settings.worker_timeout_s,
            per_version=1 if settings.in_lambda else 0,
            shared_by=settings.serve_processes,
            environment_paths=environment_paths or EnvironmentDirectories.beside(cache),
        ),
        rate_limiter=rate_limiter,
    )
    server = ModelServer(
        resolver,
        residency,
        stats,
        default_max_batch_size=settings.default_max_batch_size,
        response_cache=response_cache_from(settings),
        # sequences' records where every instance reads them: any instance serves any step
        sequences=sequence_steps_from(settings, clients.dynamodb, lambda: clients.s3),
        rate_limiter=rate_limiter,
        # instance_group.count on the Lambda path: executions counted across the fleet
        fleet_slots=fleet_slots_from(settings, clients.dynamodb),
    )
    # the process's one model-to-model port, installed here: one model server a process
    install_bls(plane or InferenceDataPlane(lambda: server))
    return server


def rate_limiter_from(settings: Settings) -> RateLimiter | None:
    """Triton's rate limiter where `serve`/`dev` --rate-limit execution_count asks for it
    (never in Lambda: one request at a time per execution environment)."""
    if settings.rate_limit != EXECUTION_COUNT or settings.in_lambda:
        return None
    return RateLimiter(parse_resources(settings.rate_limit_resources))
