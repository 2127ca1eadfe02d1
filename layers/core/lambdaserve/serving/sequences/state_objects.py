"""A sequence's implicit state too large for its DynamoDB item (over ``MAX_INLINE_BYTES``):
kept as an S3 object under ``sequence-state/`` in the models bucket, the item holding its key.

Each write puts a new object, named by the write's own token, before the item's conditional
write: a step that loses its race has written only an object no item points to (removed at
once, and by the bucket's lifecycle rule on the prefix if that fails), never the winner's
state. The object the item pointed to before is removed once the new item is written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from lambdaserve.errors import StorageUnavailable
from lambdaserve.serving.sequences.records import SequenceKey

logger = logging.getLogger(__name__)
PREFIX = "sequence-state/"


class StateObjects:
    """``s3``: the client, made on first use (most models never need it)."""

    def __init__(self, s3: Callable[[], Any], bucket: str) -> None:
        self._s3 = s3
        self._bucket = bucket

    def put(self, key: SequenceKey, token: str, state: bytes) -> str:
        """The object's key, once ``state`` is stored under it."""
        name = f"{PREFIX}{key.model}/{key.version}/{key.text.replace('/', '%2F')}/{token}"
        try:
            self._s3().put_object(Bucket=self._bucket, Key=name, Body=state)
        except ClientError as exc:
            raise StorageUnavailable(f"could not store the sequence's state: {exc}") from exc
        return name

    def get(self, name: str) -> bytes:
        try:
            return bytes(self._s3().get_object(Bucket=self._bucket, Key=name)["Body"].read())
        except ClientError as exc:
            raise StorageUnavailable(f"could not read the sequence's state: {exc}") from exc

    def discard(self, name: str) -> None:
        """Best effort: the bucket's lifecycle rule on the prefix takes what is left."""
        try:
            self._s3().delete_object(Bucket=self._bucket, Key=name)
        except ClientError as exc:
            logger.warning("sequence state object %s left to the lifecycle rule: %s", name, exc)
