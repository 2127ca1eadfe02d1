"""A model version's Python environment, built once at publish and stored in the bucket.

The manage function never installs anything itself: it checks the requirements against the
serving image's pins (as the sandbox, which runs in that image, reports them:
``serving_target``), looks for an environment already built from the same inputs
(``environments/<digest>.json`` beside ``environments/<digest>.tar.gz``), and otherwise asks
the sandbox to build one, handing it a presigned PUT URL for the tarball so the sandbox holds
no permissions. What the catalog records of the version is the JSON document written beside
the tarball: digest, key, sha256, sizes and the packages in it.

Deployed, the builder is the code-validator function, whose role allows nothing; locally
and inside that function, a child process without credentials (``builders``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from lambdaserve.catalog.repository import file_sha256
from lambdaserve.config.model_config import ModelConfig
from lambdaserve.errors import ModelRejected
from lambdaserve.publishing.environments.build import (
    CONTENT_TYPE,
    BuildRequest,
    installed_packages,
    pack,
)
from lambdaserve.publishing.environments.builders import Builder
from lambdaserve.publishing.environments.conda import (
    PARAMETER,
    execution_env_key,
    site_packages_of,
)
from lambdaserve.publishing.environments.requirements import (
    FORMAT,
    Requirements,
    Target,
    beyond_image,
    check_pins,
    environment_digest,
    requirements_of,
)
from lambdaserve.publishing.environments.serving_target import target_from

logger = logging.getLogger(__name__)

ENVIRONMENTS_PREFIX = "environments/"
DEFAULT_INDEX_URL = "https://pypi.org/simple"
DEFAULT_MAX_BYTES = 512 * 1024**2
_PUT_URL_TTL_S = 3600


def version_environment(
    environments: Environments,
    root: Path,
    model_file: str,
    config: ModelConfig,
    *,
    models_prefix: str,
    report: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """A validated version's environment: model code's requirements (or a Python model's
    ``EXECUTION_ENV_PATH`` tarball), built once; ``{}`` without; ModelRejected saying why."""
    requirements = requirements_of(root, model_file)
    python_model = model_file == "model.py"
    packed = execution_env_key(config, models_prefix) if python_model else ""
    if packed and requirements is not None:
        raise ModelRejected(
            f"both {requirements.source} and {PARAMETER} give the model an environment; keep one"
        )
    if packed:
        if report:
            report(f"preparing the environment of {PARAMETER}")
        return environments.prepare_packed(packed)
    if requirements is None:
        return {}
    if report:
        report(f"preparing the environment of {requirements.source}")
    return environments.prepare(requirements)


@dataclass(frozen=True)
class EnvironmentOptions:
    index_url: str = DEFAULT_INDEX_URL
    max_bytes: int = DEFAULT_MAX_BYTES
    prefix: str = ENVIRONMENTS_PREFIX


class Environments:
    """Environments by digest: built once by the sandbox, stored in the bucket."""

    def __init__(
        self,
        s3: Any,
        bucket: str,
        builder: Builder,
        options: EnvironmentOptions = EnvironmentOptions(),
        target: Target | None = None,
    ) -> None:
        self._s3 = s3
        self._bucket = bucket
        self._builder = builder
        self._options = options
        self._target = target
        self.builds = 0  # how many builds this object asked for (the rest were reused)

    @property
    def target(self) -> Target:
        """The serving environment's target, as the sandbox reports it (it runs there),
        asked once per manage process."""
        if self._target is None:
            self._target = target_from(self._builder.target())
        return self._target

    def prepare(self, requirements: Requirements) -> dict[str, Any]:
        """The catalog's record of the environment (``{}`` when nothing is required), or
        ModelRejected naming the requirement and why."""
        target = self.target
        check_pins(requirements, target)
        requirements = beyond_image(requirements, target)
        if not requirements.lines:
            return {}  # the image has everything they name
        digest = environment_digest(requirements, target, self._options.index_url)
        stored = self._stored(digest)
        if stored is not None:
            logger.info("environment %s reused (%s)", digest[:12], requirements.source)
            return stored
        key = f"{self._options.prefix}{digest}.tar.gz"
        put_url = self._s3.generate_presigned_url(
            "put_object",
            Params={"Bucket": self._bucket, "Key": key, "ContentType": CONTENT_TYPE},
            ExpiresIn=_PUT_URL_TTL_S,
        )
        self.builds += 1
        logger.info("building environment %s (%s)", digest[:12], requirements.source)
        answer = self._builder.build(
            BuildRequest(
                requirements=requirements.text(),
                source=requirements.source,
                python_version=target.python_version,
                platforms=list(target.platforms),
                constraints=target.constraints(),
                pinned=[name for name, _ in target.pins],
                index_url=self._options.index_url,
                max_bytes=self._options.max_bytes,
                put_url=put_url,
            )
        )
        if "error" in answer:
            raise ModelRejected(str(answer["error"]))
        record = self._record(digest, key, answer)
        self._store(digest, record)
        logger.info("environment %s built: %s", digest[:12], ", ".join(record["packages"]))
        return record

    def prepare_packed(self, packed_key: str) -> dict[str, Any]:
        """Triton's ``EXECUTION_ENV_PATH`` tarball at ``packed_key``: its site-packages,
        checked and repacked once per uploaded object (read as data here: nothing in it
        runs, so no sandbox is needed)."""
        name = packed_key.rsplit("/", 1)[-1]
        try:
            head = self._s3.head_object(Bucket=self._bucket, Key=packed_key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                raise ModelRejected(
                    f"EXECUTION_ENV_PATH names {name}, which is not uploaded: upload the "
                    f"conda-pack tarball to {packed_key}"
                ) from None
            raise
        target = self.target
        digest = hashlib.sha256(
            json.dumps(
                [
                    FORMAT,
                    packed_key,
                    head["ETag"],
                    head["ContentLength"],
                    target.python_version,
                    list(target.pins),
                ]
            ).encode()
        ).hexdigest()
        stored = self._stored(digest)
        if stored is not None:
            return stored
        self.builds += 1
        with tempfile.TemporaryDirectory(prefix="execution-env-") as scratch:
            local, site = Path(scratch) / "env.tar.gz", Path(scratch) / "site"
            self._s3.download_file(self._bucket, packed_key, str(local))
            unpacked = site_packages_of(local, name, target, site, self._options.max_bytes)
            tarball = Path(scratch) / "environment.tar.gz"
            pack(site, tarball)
            key = f"{self._options.prefix}{digest}.tar.gz"
            self._s3.upload_file(
                str(tarball), self._bucket, key, ExtraArgs={"ContentType": CONTENT_TYPE}
            )
            answer = {
                "packages": installed_packages(site),
                "bytes": tarball.stat().st_size,
                "unpacked_bytes": unpacked,
                "sha256": file_sha256(tarball),
            }
        record = self._record(digest, key, answer) | {"source": "EXECUTION_ENV_PATH"}
        self._store(digest, record)
        return record

    def _store(self, digest: str, record: dict[str, Any]) -> None:
        self._s3.put_object(
            Bucket=self._bucket,
            Key=f"{self._options.prefix}{digest}.json",
            Body=json.dumps(record).encode(),
            ContentType="application/json",
        )

    def _record(self, digest: str, key: str, answer: dict[str, Any]) -> dict[str, Any]:
        packages = [str(p) for p in answer.get("packages", [])]
        record: dict[str, Any] = {"digest": digest, "packages": packages}
        if not packages:
            return record  # the image has everything: nothing to store or fetch
        size = int(self._s3.head_object(Bucket=self._bucket, Key=key)["ContentLength"])
        if size != int(answer["bytes"]):
            raise RuntimeError(f"the stored environment is {size} bytes, not {answer['bytes']}")
        record.update(
            key=key,
            sha256=str(answer["sha256"]),
            size=size,
            unpacked_bytes=int(answer["unpacked_bytes"]),
            python=self.target.python_version,
        )
        return record

    def _stored(self, digest: str) -> dict[str, Any] | None:
        try:
            body = self._s3.get_object(
                Bucket=self._bucket, Key=f"{self._options.prefix}{digest}.json"
            )["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        record: dict[str, Any] = json.loads(body)
        return record
