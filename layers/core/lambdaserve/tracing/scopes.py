"""The trace settings in force: the global one and each model's, as Triton's
``TraceManager`` keeps them. A model's setting takes the global values it does not set
itself, and follows the global one when that changes; clearing a field (a ``null`` value)
takes it back from the level above (the command line's, for the global setting); a model
whose fields are all cleared uses the global setting again. The trace file comes from the
command line alone."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from lambdaserve.errors import InvalidInput
from lambdaserve.tracing.config import TraceConfig
from lambdaserve.tracing.live_setting import FIELDS, LiveSetting, SettingValues
from lambdaserve.tracing.trace_file import TraceFile


@dataclass(frozen=True)
class SettingUpdate:
    """What one settings call changes: new values by field (``level``: a tuple of levels,
    () for OFF; the others whole numbers) and the fields it clears."""

    values: Mapping[str, object] = field(default_factory=dict)
    cleared: frozenset[str] = frozenset()


class TraceScopes:
    def __init__(self, config: TraceConfig) -> None:
        self._lock = threading.Lock()
        self._files: dict[str, TraceFile] = {}
        self._default = SettingValues(
            config.levels, config.rate, config.count, config.log_frequency, config.file,
            config.mode,
        )  # fmt: skip
        self._global = self._live(self._default)
        self._models: dict[str, LiveSetting] = {}
        self._following: set[str] = set()  # models that take some values from the global
        self.may_trace = self._global.traces  # whether any setting traces at all

    def setting(self, model: str | None) -> LiveSetting:
        """The setting a request for ``model`` is sampled under (None: the global one)."""
        return self._models.get(model, self._global) if model else self._global

    def update(self, model: str | None, update: SettingUpdate) -> LiveSetting:
        """Apply ``update`` to the global setting (``model`` None) or the model's; the
        setting now in force. InvalidInput for a setting that would trace nothing while
        not OFF, as Triton refuses it."""
        with self._lock:
            try:
                self._update(model, update)
                if model is None:
                    for name in sorted(self._following):  # they take the new global values
                        self._update(name, SettingUpdate())
            finally:
                self.may_trace = any(s.traces for s in (self._global, *self._models.values()))
            return self.setting(model) if model else self._global

    def flush(self) -> None:
        """What the settings handed to their files is written."""
        for file in list(self._files.values()):
            file.flush()

    def close(self) -> None:
        """Shutdown: every setting writes what it holds, and the files close."""
        with self._lock:
            for live in {id(s): s for s in (self._global, *self._models.values())}.values():
                live.retire()
            for file in self._files.values():
                file.close()

    def _update(self, model: str | None, update: SettingUpdate) -> None:
        current = (self._models.get(model) if model else self._global) or None
        # the level above, its count as it stands (Triton copies the live count)
        fallback = (
            replace(self._global.values, count=self._global.count) if model else self._default
        )
        specified = set()
        chosen = fallback
        for name in FIELDS:
            was = current is not None and name in current.values.specified
            if name in update.cleared or not (was or name in update.values):
                continue
            specified.add(name)
            if name in update.values:
                value = update.values[name]
            else:
                assert current is not None
                value = _value(current, name)
            chosen = _with(chosen, name, value)
        values = replace(chosen, specified=frozenset(specified))
        if model and not specified:  # nothing of its own left: the global setting again
            self._following.discard(model)
            retired = self._models.pop(model, None)
            if retired is not None:
                retired.retire()
            return
        reason = values.invalid_reason()
        if reason is not None and values.levels:
            raise InvalidInput(f"Attempting to set invalid trace setting :{reason}")
        if model:
            (self._following.discard if specified == set(FIELDS) else self._following.add)(model)
        live = self._live(values)
        old = self._models.get(model) if model else self._global
        if model:
            self._models[model] = live
        else:
            self._global = live
        if old is not None:
            old.retire()

    def _live(self, values: SettingValues) -> LiveSetting:
        file = None
        if values.file:
            file = self._files.setdefault(values.file, TraceFile(values.file))
        return LiveSetting(values, file)


def _value(live: LiveSetting, name: str) -> object:
    if name == "count":
        return live.count
    return live.values.levels if name == "level" else getattr(live.values, name)


def _with(values: SettingValues, name: str, value: object) -> SettingValues:
    fields: dict[str, Any] = {"levels" if name == "level" else name: value}
    return replace(values, **fields)
