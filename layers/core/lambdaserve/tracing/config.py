"""Triton's trace command line read into one ``TraceConfig``: ``--trace-config`` as
``tritonserver`` takes it (``triton,file=…``, ``triton,log-frequency=…``, ``level=``, ``rate=``,
``count=``, ``mode=triton|opentelemetry``, ``opentelemetry,url=…``,
``opentelemetry,resource=key=value``) and the older ``--trace-file``, ``--trace-level``,
``--trace-rate``. A ``--trace-config`` setting wins over its older flag, as in Triton. The
config reaches ``serve``'s replicas in the environment (``TRACE_CONFIG_ENV``)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from lambdaserve.errors import InvalidInput

TRACE_CONFIG_ENV = "LAMBDASERVE_TRACE_CONFIG"
TIMESTAMPS, TENSORS = "TIMESTAMPS", "TENSORS"
TRITON, OPENTELEMETRY = "triton", "opentelemetry"
OTLP_DEFAULT_URL = "http://localhost:4318/v1/traces"  # Triton's default exporter endpoint
_FORMAT = "--trace-config takes <mode>,<setting>=<value> or <setting>=<value>"


@dataclass(frozen=True)
class TraceConfig:
    """The global trace settings a server starts with (Triton's defaults: OFF, every 1000th
    request, no count limit, written at shutdown, Triton's own format)."""

    levels: tuple[str, ...] = ()  # () is OFF; else TIMESTAMPS and/or TENSORS, in that order
    rate: int = 1000
    count: int = -1
    log_frequency: int = 0
    file: str = ""
    mode: str = TRITON
    otel_url: str = OTLP_DEFAULT_URL
    otel_resources: tuple[tuple[str, str], ...] = ()

    def to_env(self) -> dict[str, str]:
        return {TRACE_CONFIG_ENV: json.dumps(asdict(self))}


def trace_config(
    specs: Sequence[str],
    trace_file: str | None = None,
    trace_levels: Sequence[str] = (),
    trace_rate: int | None = None,
) -> TraceConfig:
    """The flags as one config; InvalidInput naming the flag and the fix for a bad one.
    Without ``opentelemetry,url=``, OpenTelemetry's own variables name the endpoint
    (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else ``OTEL_EXPORTER_OTLP_ENDPOINT`` +
    ``/v1/traces``), else Triton's default."""
    config = TraceConfig(otel_url=_otlp_url_from_env())
    if trace_file is not None:
        config = replace(config, file=trace_file)
    if trace_rate is not None:
        config = replace(config, rate=_number("--trace-rate", str(trace_rate), 0))
    levels = [_level(f"--trace-level {level}", level) for level in trace_levels]
    resources: list[tuple[str, str]] = []
    for spec in specs:
        mode, setting, value = _split(spec)
        where = f"--trace-config {spec!r}"
        if mode == "" and setting == "level":
            levels.append(_level(where, value))
        elif mode == OPENTELEMETRY and setting == "resource":
            key, sep, text = value.partition("=")
            if not sep or not key:
                raise InvalidInput(f"{where}: write opentelemetry,resource=<key>=<value>")
            resources.append((key, text))
        else:
            config = _set(config, mode, setting, value, where)
    if "OFF" in levels:
        levels = []  # an explicit OFF disables tracing, as Triton's parser decides
    ordered = tuple(level for level in (TIMESTAMPS, TENSORS) if level in levels)
    return replace(config, levels=ordered, otel_resources=tuple(resources))


def _otlp_url_from_env() -> str:
    traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if traces:
        return traces
    return base.rstrip("/") + "/v1/traces" if base else OTLP_DEFAULT_URL


def _set(config: TraceConfig, mode: str, setting: str, value: str, where: str) -> TraceConfig:
    readers: dict[tuple[str, str], Callable[[], dict[str, Any]]] = {
        ("", "rate"): lambda: {"rate": _number(where, value, 0)},
        ("", "count"): lambda: {"count": _number(where, value, -1)},
        ("", "mode"): lambda: {"mode": _mode(where, value)},
        (TRITON, "file"): lambda: {"file": value},
        (TRITON, "log-frequency"): lambda: {"log_frequency": _number(where, value, 0)},
        (OPENTELEMETRY, "url"): lambda: {"otel_url": value},
    }
    read = readers.get((mode, setting))
    if read is not None:
        return replace(config, **read())
    if mode == "":
        raise InvalidInput(f"{where}: global settings are level, rate, count and mode")
    if mode == TRITON:
        raise InvalidInput(f"{where}: triton's settings are file and log-frequency")
    return config  # other opentelemetry settings (bsp_*) tune Triton's exporter: not applied


def config_from_env(env: Mapping[str, str] | None = None) -> TraceConfig:
    """The config ``serve`` put in the environment; Triton's defaults without one."""
    text = (os.environ if env is None else env).get(TRACE_CONFIG_ENV)
    if not text:
        return TraceConfig()
    fields = json.loads(text)
    fields["levels"] = tuple(fields["levels"])
    fields["otel_resources"] = tuple(tuple(pair) for pair in fields["otel_resources"])
    return TraceConfig(**fields)


def _split(spec: str) -> tuple[str, str, str]:
    head, comma, rest = spec.partition(",")
    mode = ""
    if comma:
        if not head:
            raise InvalidInput(f"{_FORMAT}: no trace mode before the comma in {spec!r}")
        mode = _mode(f"--trace-config {spec!r}", head)
    else:
        rest = spec
    setting, equals, value = rest.partition("=")
    if not equals or not setting or not value:
        raise InvalidInput(f"{_FORMAT}; got {spec!r}")
    return mode, setting.strip(), value.strip()


def _mode(where: str, text: str) -> str:
    mode = text.strip().lower()
    if mode not in (TRITON, OPENTELEMETRY):
        raise InvalidInput(f'{where}: trace modes are "triton" and "opentelemetry"')
    return mode


def _level(where: str, text: str) -> str:
    word = text.strip().lower()
    if word in ("false", "off"):
        return "OFF"
    if word in ("true", "on", "min", "max", "timestamps"):
        return TIMESTAMPS
    if word == "tensors":
        return TENSORS
    raise InvalidInput(f"{where}: trace levels are OFF, TIMESTAMPS and TENSORS")


def _number(where: str, text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidInput(f"{where}: {text!r} is not a whole number") from None
    if not low <= value <= 2**31 - 1:
        raise InvalidInput(f"{where}: takes {low} to {2**31 - 1}, got {value}")
    return value
