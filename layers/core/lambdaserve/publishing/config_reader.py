"""A model's config as the catalog keeps it: read from the bucket, checked, last good kept.

As Triton keeps serving the last good load when a new config fails, a config file that does
not parse, or that the serving versions would fail with, is rejected: the catalog keeps the
last good one in ``file_config`` and shows the rejection beside READY (``rejected_config``).
Only a model that never had a good config is left with ``config_error``.
"""

from __future__ import annotations

import base64
import logging
import math
from collections.abc import Callable

from lambdaserve.catalog import version_policy
from lambdaserve.catalog.repository import ModelRepository
from lambdaserve.catalog.store import Catalog, ModelRecord
from lambdaserve.config.checks import check_config_against_model
from lambdaserve.config.model_config import ModelConfig, build, merge, parse_document
from lambdaserve.config.support import check_supported, warnings_for
from lambdaserve.errors import InvalidInput, ModelRejected
from lambdaserve.serving.capture.data_capture import capture_setting
from lambdaserve.tensors.encoding import numpy_dtype
from lambdaserve.tensors.signature import Signature

logger = logging.getLogger(__name__)
# Labels live in the catalog's model item (DynamoDB items are at most 400 KB).
LABELS_LIMIT = 256 * 1024
# So do a sequence model's initial states (each state's file at most this).
INITIAL_STATE_LIMIT = 64 * 1024


def check_capture_key(key: str, allowed: tuple[str, ...]) -> None:
    """InvalidInput unless ``key`` (an id or an ARN) is one the functions may encrypt with:
    on AWS a write under any other key is denied (no role holds kms:GenerateDataKey on it),
    so it is refused here, where dev would otherwise write it without a word."""
    if any(key in (arn, arn.rsplit("/", 1)[-1]) for arn in allowed):
        return
    if not allowed:
        raise InvalidInput(
            f'"data_capture".kms_key_id names {key!r}, and this stack encrypts with no KMS '
            "key its functions may use: leave kms_key_id out (the bucket's own encryption "
            "applies), or deploy with ModelBucketKmsKeyArn and name that key"
        )
    raise InvalidInput(
        f'"data_capture".kms_key_id names {key!r}; the functions may encrypt only with the '
        f"model bucket's key ({allowed[0]}, ModelBucketKmsKeyArn): name that key, or leave "
        "kms_key_id out"
    )


class ConfigReader:
    """Reads config files into the catalog; rejects what would break serving versions."""

    def __init__(
        self,
        repository: ModelRepository,
        catalog: Catalog,
        clock: Callable[[], int],
        on_rejected: Callable[[str, str], None] | None = None,
        capture_keys: tuple[str, ...] = (),
    ) -> None:
        self._repository = repository
        self._catalog = catalog
        self._clock = clock
        self._on_rejected = on_rejected
        # the KMS keys the functions may encrypt captures with (the model bucket's)
        self._capture_keys = capture_keys

    def refresh(self, model: str) -> ModelRecord:
        observed_at = self._clock()
        found = self._repository.read_config(model)
        existing = self._catalog.get_model(model)
        record = ModelRecord(name=model, config_observed_at=observed_at)
        if found is not None:
            source = found[0]
            try:
                document = parse_document(*found)
                check_supported(document)
                config = build(merge(document, existing.overrides if existing else {}), model)
                self.check_against_serving(model, config)
                record = ModelRecord(
                    name=model,
                    file_config=document,
                    config_source=source,
                    config_observed_at=observed_at,
                    class_labels=self._class_labels(model, config),
                    initial_states=self._initial_states(model, config),
                    config_warnings=tuple(warnings_for(document)),
                )
            except (InvalidInput, ModelRejected) as exc:
                record = self._rejected(model, source, exc.message, existing, observed_at)
        self._catalog.put_model_config(record)
        if record.config_warnings and (
            existing is None or existing.config_warnings != record.config_warnings
        ):
            for warning in record.config_warnings:  # said once at publish, in the log too
                logger.warning("%s config: %s", model, warning)
        return self._catalog.get_model(model) or record

    def _class_labels(self, model: str, config: ModelConfig) -> dict[str, list[str]]:
        """The label files the config names, read whole (Triton reads them at load)."""
        labels: dict[str, list[str]] = {}
        budget = LABELS_LIMIT
        for output, filename in config.label_files:
            body = self._repository.read_model_file(model, filename, budget)
            if body is None:
                raise InvalidInput(
                    f"output {output!r} names label_filename {filename!r}, which is missing: "
                    f"upload it beside config.pbtxt ({self._repository.url(model)}{filename})"
                )
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidInput(f"{filename} is not UTF-8 text (one label per line)") from None
            labels[output] = text.splitlines()
            budget -= len(body)
        return labels

    def _initial_states(self, model: str, config: ModelConfig) -> dict[str, str]:
        """The data files a sequence model's states start from, read whole and checked
        against the state's datatype and dims (Triton reads them at load), base64."""
        found: dict[str, str] = {}
        for state in config.sequence_batching.states if config.sequence_batching else ():
            if not state.data_file:
                continue
            name = f"initial_state/{state.data_file}"
            if state.datatype == "BYTES":
                raise InvalidInput(
                    f"sequence_batching state {state.input_name!r}: a TYPE_STRING state's "
                    "initial_state data_file is not supported; use zero_data"
                )
            size = math.prod(state.dims) * numpy_dtype(state.datatype).itemsize
            body = self._repository.read_model_file(model, name, INITIAL_STATE_LIMIT)
            if body is None:
                raise InvalidInput(
                    f"sequence_batching state {state.input_name!r} names initial_state data_file "
                    f"{state.data_file!r}, which is missing: upload it as "
                    f"{self._repository.url(model)}{name}"
                )
            if len(body) != size:
                raise InvalidInput(
                    f"{name} has {len(body)} bytes; state {state.input_name!r} "
                    f"({state.datatype} {list(state.dims)}) needs {size}, row-major"
                )
            found[state.input_name] = base64.b64encode(body).decode()
        return found

    def check_against_serving(self, model: str, config: ModelConfig) -> None:
        """ModelRejected when a version that serves now would fail with ``config`` (or its
        ``data_capture`` setting does not parse: InvalidInput naming the fix)."""
        setting = capture_setting(dict(config.parameters))
        if setting is not None and setting.kms_key_id:
            check_capture_key(setting.kms_key_id, self._capture_keys)
        for version in self._catalog.versions(model):
            if version.state != version_policy.READY or not version.signature:
                continue
            try:
                check_config_against_model(
                    config, Signature.from_json(version.signature), version.model_file
                )
            except ModelRejected as exc:
                raise ModelRejected(
                    f"version {version.version} would fail: {exc.message}"
                ) from None

    def _rejected(
        self,
        model: str,
        source: str,
        error: str,
        existing: ModelRecord | None,
        observed_at: int,
    ) -> ModelRecord:
        if existing is None or existing.config_error or not existing.config_observed_at:
            # Nothing good to fall back on: the model's versions cannot serve. (Never
            # observed: an item another writer is creating, seen half-made by this read.)
            return ModelRecord(
                name=model, config_source=source, config_error=error, config_observed_at=observed_at
            )
        message = error if error.startswith(source) else f"{source}: {error}"
        logger.warning(  # the words carry the context too: local text logs drop `extra`
            "%s: %s rejected, serving the last good config: %s",
            model,
            source,
            error,
            extra={"model": model, "config": source, "reason": error},
        )
        if self._on_rejected is not None:
            self._on_rejected(model, message)
        return ModelRecord(
            name=model,
            file_config=existing.file_config,
            config_source=existing.config_source,
            rejected_config=message,
            config_observed_at=observed_at,
            class_labels=existing.class_labels,
            initial_states=existing.initial_states,
            config_warnings=existing.config_warnings,
        )
