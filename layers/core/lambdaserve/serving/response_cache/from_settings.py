"""The response cache a process runs with: from settings, and from Triton's command line
(``--cache-config local,size=N``, ``--cache-config redis,host=H,port=P``; one flag per
setting or several settings in one, as Triton's ``tritonserver`` accepts them)."""

from __future__ import annotations

from collections.abc import Sequence

from lambdaserve.errors import InvalidInput
from lambdaserve.serving.response_cache.lookups import ResponseCache
from lambdaserve.serving.response_cache.tiers import CacheTier, LocalTier, RedisOptions, RedisTier
from lambdaserve.settings import Settings

# Triton's setting names (its local and redis cache implementations') -> our environment
_LOCAL = {"size": "LAMBDASERVE_RESPONSE_CACHE_BYTES"}
_REDIS = {
    "host": "LAMBDASERVE_REDIS_HOST",
    "port": "LAMBDASERVE_REDIS_PORT",
    "user": "LAMBDASERVE_REDIS_USERNAME",
    "password": "LAMBDASERVE_REDIS_PASSWORD",
    "tls_enabled": "LAMBDASERVE_REDIS_TLS",
    "wait_timeout_ms": "LAMBDASERVE_REDIS_TIMEOUT_MS",
    "connection_timeout_ms": "LAMBDASERVE_REDIS_TIMEOUT_MS",
    "ttl": "LAMBDASERVE_REDIS_TTL_S",  # ours: Triton's redis entries live until evicted
}
_NUMBERS = {"size", "port", "wait_timeout_ms", "connection_timeout_ms", "ttl"}


def response_cache_from(settings: Settings) -> ResponseCache | None:
    """The tiers the settings name, local first; None when there are none."""
    tiers: list[CacheTier] = []
    if settings.response_cache_bytes > 0:
        tiers.append(LocalTier(settings.response_cache_bytes))
    if settings.redis_host:
        tiers.append(
            RedisTier(
                RedisOptions(
                    host=settings.redis_host,
                    port=settings.redis_port,
                    username=settings.redis_username,
                    password=settings.redis_password,
                    tls=settings.redis_tls,
                    ttl_s=settings.redis_ttl_s,
                    timeout_s=settings.redis_timeout_ms / 1000,
                )
            )
        )
    if not tiers:
        return None
    return ResponseCache(tiers, settings.response_cache_max_entry_bytes)


def cache_config_env(specs: Sequence[str]) -> dict[str, str]:
    """``--cache-config`` flags as the environment settings they stand for; InvalidInput
    naming the flag for anything Triton's syntax or our caches do not take. The local tier
    stays in front of a redis one (``local,size=0`` turns it off)."""
    env: dict[str, str] = {}
    kinds = set()
    for spec in specs:
        kind, _, rest = spec.partition(",")
        names = {"local": _LOCAL, "redis": _REDIS}.get(kind.strip())
        if names is None or not rest:
            raise InvalidInput(
                f"--cache-config {spec!r}: write <cache>,<setting>=<value> with cache local "
                "(size=<bytes>) or redis (host=, port=, user=, password=, tls_enabled=, "
                "wait_timeout_ms=, ttl=)"
            )
        kinds.add(kind.strip())
        for item in rest.split(","):
            key, sep, value = item.partition("=")
            key, value = key.strip(), value.strip()
            if not sep or key not in names:
                raise InvalidInput(
                    f"--cache-config {spec!r}: {key!r} is not a {kind} cache setting; "
                    f"the {kind} cache takes {', '.join(sorted(names))}"
                )
            if key in _NUMBERS and not value.isdigit():
                raise InvalidInput(f"--cache-config {spec!r}: {key} takes a whole number")
            env[names[key]] = value
    if "redis" in kinds and "LAMBDASERVE_REDIS_HOST" not in env:
        raise InvalidInput("--cache-config redis needs host=<address> (and port=, 6379 if not)")
    return env
