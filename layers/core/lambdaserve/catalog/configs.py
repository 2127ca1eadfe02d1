"""A model's effective config from its catalog record: the file's config, what
``auto_complete_config`` filled in, and the overrides, merged (``publishing.config_reader``
reads config files into the record)."""

from __future__ import annotations

from dataclasses import dataclass

from lambdaserve.catalog.store import ModelRecord
from lambdaserve.config.model_config import ModelConfig, build, merge
from lambdaserve.errors import InvalidInput


@dataclass(frozen=True)
class EffectiveConfig:
    config: ModelConfig
    error: str = ""


def effective_config(record: ModelRecord | None, name: str) -> EffectiveConfig:
    """The model's config (file, what its auto_complete_config filled in, overrides), or
    defaults and the reason."""
    if record is None:
        return EffectiveConfig(ModelConfig(name=name))
    if record.config_error:
        return EffectiveConfig(ModelConfig(name=name), record.config_error)
    try:
        document = merge(merge(record.file_config, record.auto_completed), record.overrides)
        return EffectiveConfig(build(document, name))
    except InvalidInput as exc:
        return EffectiveConfig(ModelConfig(name=name), exc.message)
