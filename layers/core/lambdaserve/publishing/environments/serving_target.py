"""The target a model environment is built for, read where it serves: the Python version,
platform tags and installed distributions (the pins) of the environment that runs the
sandbox, not of the manage function that asks for the build.

Deployed, the sandbox is the code-validator function, built from the infer image
(``functions/infer/Dockerfile``): its pins are the serving image's, so a requirement is
checked against, and constrained by, the numpy, torch and runtimes that will import it.
The manage image installs fewer packages (no pillow, no snapshot-restore-py) and may
resolve other versions of the shared ones: its own pins would let an environment replace
a package the serving image has, or refuse one it allows. Locally the sandbox is a child of
the same interpreter, whose environment is also the one that serves (``make dev``).

Run as ``python -m lambdaserve.publishing.environments.serving_target``: the target as JSON
on stdout.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from lambdaserve.publishing.environments.requirements import Target, image_target


class TargetDocument(BaseModel):
    """The sandbox's answer (a trust boundary: another function's output)."""

    python_version: str = Field(pattern=r"^3\.\d+$")
    platforms: list[str] = Field(min_length=1)
    pins: list[tuple[str, str]]


def target_document(target: Target) -> dict[str, Any]:
    return {
        "python_version": target.python_version,
        "platforms": list(target.platforms),
        "pins": [list(pin) for pin in target.pins],
    }


def target_from(answer: dict[str, Any]) -> Target:
    """The Target of the sandbox's answer; RuntimeError when it is not one (an operator's
    problem: the manage function's log says what came back)."""
    try:
        document = TargetDocument.model_validate(answer.get("target"))
    except ValidationError as exc:
        raise RuntimeError(f"the environment builder sent no target: {answer!r:.300}") from exc
    return Target(document.python_version, tuple(document.platforms), tuple(sorted(document.pins)))


def main() -> None:
    sys.stdout.write(json.dumps({"target": target_document(image_target())}))


if __name__ == "__main__":
    main()
