"""The S3 model repository: key <-> (model, version, file), listings and reads.

Layout (Triton's, under a prefix)::

    models/<model>/config.pbtxt | config.json
    models/<model>/<version>/model.onnx | model.pt   (+ extra files)
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

from boto3.s3.transfer import TransferConfig

from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.names import VERSION_RE, is_valid_model_name

logger = logging.getLogger(__name__)

CONFIG_FILES = ("config.pbtxt", "config.json")
_TRANSFER = TransferConfig(multipart_threshold=16 * 1024**2, max_concurrency=8)


@dataclass(frozen=True)
class ConfigKey:
    """A model-level file: the config, or a file it names (an output's labels, a state's
    ``initial_state/<data_file>``)."""

    model: str
    filename: str


@dataclass(frozen=True)
class VersionFileKey:
    """A file inside a version directory; ``path`` is relative to that directory."""

    model: str
    version: int
    path: str


@dataclass(frozen=True)
class ArchiveKey:
    """A TorchServe archive uploaded beside the models (``models/mnist.mar``, a workflow's
    ``models/pipeline.war``)."""

    filename: str


RepositoryKey = ConfigKey | VersionFileKey | ArchiveKey
ARCHIVE_SUFFIXES = (".mar", ".tar.gz", ".tgz", ".war")


@dataclass(frozen=True)
class ObjectInfo:
    """One object as the bucket lists it."""

    key: str
    size: int
    etag: str
    last_modified: datetime


def file_sha256(path: Path) -> str:
    """The digest the catalog records for a version's file, and the cache verifies."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def decode_event_key(raw_key: str) -> str:
    """S3 event notifications URL-encode keys (spaces as '+')."""
    return unquote_plus(raw_key)


def _safe_relative_path(parts: list[str]) -> bool:
    return bool(parts) and all(p not in ("", ".", "..") for p in parts)


def parse_key(key: str, prefix: str = "models/") -> RepositoryKey | None:
    """Map a (decoded) S3 key to its place in the layout, or None when outside it."""
    if not key.startswith(prefix):
        return None
    parts = key[len(prefix) :].split("/")
    if len(parts) == 1 and parts[0].endswith(ARCHIVE_SUFFIXES) and _safe_relative_path(parts):
        return ArchiveKey(parts[0])
    if len(parts) < 2 or not is_valid_model_name(parts[0]):
        return None
    model, rest = parts[0], parts[1:]
    # the config and the files it names: labels, a state's initial_state/<data_file>
    if (len(rest) == 1 or (len(rest) == 2 and rest[0] == "initial_state")) and (
        _safe_relative_path(rest)
    ):
        return ConfigKey(model, "/".join(rest))
    if len(rest) >= 2 and VERSION_RE.match(rest[0]) and _safe_relative_path(rest[1:]):
        return VersionFileKey(model, int(rest[0]), "/".join(rest[1:]))
    return None


def model_prefix(model: str, prefix: str = "models/") -> str:
    return f"{prefix}{model}/"


def version_prefix(model: str, version: int, prefix: str = "models/") -> str:
    return f"{prefix}{model}/{version}/"


class ModelRepository:
    """Reads and deletes objects of the model repository bucket."""

    def __init__(self, s3: Any, bucket: str, prefix: str = "models/") -> None:
        self._s3 = s3
        self.bucket = bucket
        self.prefix = prefix

    def _list(self, prefix: str, delimiter: str | None = None) -> Iterator[dict[str, Any]]:
        paginator = self._s3.get_paginator("list_objects_v2")
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        yield from paginator.paginate(**kwargs)

    def version_objects(self, model: str, version: int) -> list[ObjectInfo]:
        """The objects under one version directory that fit the layout."""
        objects = []
        for page in self._list(version_prefix(model, version, self.prefix)):
            for item in page.get("Contents", []):
                if isinstance(parse_key(item["Key"], self.prefix), VersionFileKey):
                    objects.append(
                        ObjectInfo(
                            key=item["Key"],
                            size=int(item["Size"]),
                            etag=item["ETag"].strip('"'),
                            last_modified=item["LastModified"],
                        )
                    )
        return objects

    def model_names(self) -> list[str]:
        """Model directories present in the bucket."""
        names = []
        for page in self._list(self.prefix, delimiter="/"):
            for common in page.get("CommonPrefixes", []):
                name = common["Prefix"][len(self.prefix) :].rstrip("/")
                if is_valid_model_name(name):
                    names.append(name)
                else:
                    logger.warning("ignoring %s: not a valid model name", common["Prefix"])
        return names

    def versions(self, model: str) -> list[int]:
        """Version directories present for ``model``."""
        found = []
        for page in self._list(model_prefix(model, self.prefix), delimiter="/"):
            for common in page.get("CommonPrefixes", []):
                segment = common["Prefix"].rstrip("/").rsplit("/", 1)[-1]
                if VERSION_RE.match(segment):
                    found.append(int(segment))
        return sorted(found)

    def read_config(self, model: str) -> tuple[str, bytes] | None:
        """The model-level config file (config.pbtxt preferred, as Triton reads it)."""
        for filename in CONFIG_FILES:
            try:
                body = self._s3.get_object(
                    Bucket=self.bucket, Key=f"{model_prefix(model, self.prefix)}{filename}"
                )["Body"].read()
            except self._s3.exceptions.NoSuchKey:
                continue
            return filename, body
        return None

    def read_model_file(self, model: str, filename: str, limit: int) -> bytes | None:
        """A model-level file (``models/<model>/<filename>``) up to ``limit`` bytes; None if
        absent. InvalidInput when larger: such files are read whole into the catalog."""
        key = f"{model_prefix(model, self.prefix)}{filename}"
        head = self._head_object(key)
        if head is None:
            return None
        if head["ContentLength"] > limit:
            raise InvalidInput(
                f"{filename} is {head['ContentLength']} bytes; a model-level file named by the "
                f"config may be at most {limit} bytes"
            )
        body: bytes = self._s3.get_object(Bucket=self.bucket, Key=key)["Body"].read(limit + 1)
        return body

    def download(self, key: str, path: str, progress: Callable[[int], None] | None = None) -> None:
        """Download one object to a local path (ranged, concurrent parts for big files);
        ``progress`` is told each chunk's byte count."""
        self._s3.download_file(self.bucket, key, path, Config=_TRANSFER, Callback=progress)

    def _head_object(self, key: str) -> dict[str, Any] | None:
        try:
            head: dict[str, Any] = self._s3.head_object(Bucket=self.bucket, Key=key)
        except self._s3.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return head

    def head(self, key: str) -> ObjectInfo | None:
        """The object's size and etag, or None when it is not there."""
        head = self._head_object(key)
        if head is None:
            return None
        return ObjectInfo(
            key, int(head["ContentLength"]), head["ETag"].strip('"'), head["LastModified"]
        )

    def metadata(self, key: str) -> dict[str, str]:
        """The object's user metadata ({} when absent)."""
        head = self._head_object(key)
        return dict(head.get("Metadata") or {}) if head is not None else {}

    def put(self, key: str, body: Any, metadata: dict[str, str] | None = None) -> None:
        """Write one object from a readable stream (multipart when large)."""
        extra = {"Metadata": metadata} if metadata else None
        self._s3.upload_fileobj(body, self.bucket, key, ExtraArgs=extra, Config=_TRANSFER)

    def delete_version(self, model: str, version: int) -> int:
        """Delete every object of a version; returns how many were deleted."""
        keys = [o.key for o in self.version_objects(model, version)]
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            self._s3.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True},
            )
        return len(keys)

    def url(self, model: str, version: int | None = None) -> str:
        path = model_prefix(model, self.prefix)
        if version is not None:
            path = version_prefix(model, version, self.prefix)
        return f"s3://{self.bucket}/{path}"
