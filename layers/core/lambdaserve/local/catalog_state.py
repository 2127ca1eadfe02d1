"""``lambdaserve dev --model-repository DIR`` keeps the catalog's own facts across restarts,
as the deployed table does: version labels, the default version, config overrides, preload
and unload, in ``DIR/.lambdaserve/catalog.json`` (a hidden folder the mirror leaves alone).
The files are the folder's; what the management API set is this file's.

Versions lambdaserve numbered itself (TorchServe archives at ``DIR/<name>.mar``) keep their
numbers too, keyed by what they are (the digest of the archive's manifest, which names its
``modelVersion`` and build): restored as placeholders, so the same archive mirrored again
takes its old number back, another build takes a new one, and a label given to a version
whose archive is gone finds no version (404) instead of other bytes."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from lambdaserve.catalog import version_policy
from lambdaserve.catalog.store import Catalog, VersionRecord
from lambdaserve.config.model_files import MANIFEST_FILE, WORKFLOW_MANIFEST_FILE

logger = logging.getLogger(__name__)

STATE_FILE = Path(".lambdaserve") / "catalog.json"
_FIELDS = (
    "version_labels",
    "label_weights",
    "default_version",
    "overrides",
    "preload",
    "unloaded",
)


class CatalogState:
    def __init__(self, catalog: Catalog, repository: Path) -> None:
        self._catalog = catalog
        self.path = repository / STATE_FILE
        self._written = ""

    def restore(self) -> int:
        """Put the saved facts back into the (new, empty) catalog; returns how many models."""
        if not self.path.is_file():
            return 0
        try:
            saved = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            logger.warning("not restoring %s: %s", self.path, exc)
            return 0
        models = saved.get("models") if isinstance(saved, dict) else None
        if not isinstance(models, dict):
            logger.warning('not restoring %s: it holds no {"models": {...}} object', self.path)
            return 0
        restored = 0
        for model, fields in models.items():
            known = (
                {k: v for k, v in fields.items() if k in _FIELDS}
                if isinstance(fields, dict)
                else {}
            )
            archives = fields.get("archives") if isinstance(fields, dict) else None
            if known or archives:
                self._catalog.update_model(model, **known)
                restored += 1
            if isinstance(archives, dict):
                self._reserve(model, archives, known.get("version_labels") or {})
        self._written = self.path.read_text()
        logger.info("restored labels, defaults and overrides of %d model(s)", restored)
        return restored

    def save(self) -> None:
        """Write the facts the management API owns, when they changed."""
        models: dict[str, dict[str, Any]] = {}
        for name in self._catalog.all_model_names():
            record = self._catalog.get_model(name)
            if record is None:
                continue
            fields = {
                "version_labels": record.version_labels or None,
                "label_weights": record.label_weights or None,
                "default_version": record.default_version,
                "overrides": record.overrides or None,
                "preload": record.preload or None,
                "unloaded": record.unloaded or None,
            }
            fields["archives"] = self._archives(name) or None
            kept = {k: v for k, v in fields.items() if v is not None}
            if kept:
                models[name] = kept
        text = json.dumps({"models": models}, indent=2, sort_keys=True)
        if text == self._written:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".json.part")
        partial.write_text(text)
        os.replace(partial, self.path)
        self._written = text

    def _archives(self, model: str) -> dict[str, str]:
        """Version number -> manifest digest, for the versions unpacked from archives."""
        return {
            str(v.version): v.sha256
            for v in self._catalog.versions(model)
            if v.sha256 and v.model_file in (MANIFEST_FILE, WORKFLOW_MANIFEST_FILE)
        }

    def _reserve(self, model: str, archives: dict[str, Any], labels: dict[str, Any]) -> None:
        """A placeholder per archive version: its number stays taken, and the archive with
        that digest takes it back when the mirror publishes it again."""
        for number, digest in archives.items():
            if not (number.isdigit() and isinstance(digest, str) and digest):
                continue
            named = sorted(label for label, v in labels.items() if str(v) == number)
            reason = (
                "its archive is not in the model repository"
                + (f" (label {', '.join(named)})" if named else "")
                + ": put the archive it was published from back in the folder to serve it"
            )
            self._catalog.put_version(
                VersionRecord(
                    model=model,
                    version=int(number),
                    present=False,
                    state=version_policy.UNAVAILABLE,
                    reason=reason,
                    validation_error=reason,
                    model_file=MANIFEST_FILE,
                    sha256=digest,
                )
            )

    def keep(self, stop: threading.Event, every_s: float = 1.0) -> threading.Thread:
        """Save every ``every_s`` seconds until ``stop`` is set, and once more then."""

        def loop() -> None:
            while not stop.wait(every_s):
                self._save_quietly()
            self._save_quietly()

        thread = threading.Thread(target=loop, name="catalog-state", daemon=True)
        thread.start()
        return thread

    def _save_quietly(self) -> None:
        try:
            self.save()
        except Exception:
            logger.exception("saving %s failed; trying again", self.path)
