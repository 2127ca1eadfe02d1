"""The environment a model's requirements are built for is the one the sandbox runs in (the
serving image): the code validator answers its own Python, platform and pins, and the manage
side takes nothing else for a target."""

from __future__ import annotations

import pytest

from lambdaserve.handlers.code_validator import handler
from lambdaserve.publishing.environments.requirements import image_target
from lambdaserve.publishing.environments.serving_target import target_from


def test_the_code_validator_answers_the_target_of_the_image_it_runs_in():
    """Given the code-validator handler (deployed, it runs the infer image)
    When it is asked for its target
    Then it answers its own Python, manylinux platforms and installed distributions, which
    the manage side reads back as the same Target."""
    answer = handler({"target": {}})
    target = target_from(answer)
    own = image_target()
    assert target.python_version == own.python_version
    assert target.platforms == own.platforms and target.platforms
    assert target.pinned()["numpy"] == own.pinned()["numpy"]
    assert target.pinned() == own.pinned()


@pytest.mark.parametrize(
    "answer",
    [
        {},
        {"error": "boom"},
        {"target": {"python_version": "three", "platforms": ["x"], "pins": []}},
    ],
)
def test_an_answer_that_is_no_target_is_an_operators_error(answer):
    """Given an answer from the sandbox without a well-formed target
    When the manage side reads it
    Then it raises saying what came back (no environment is built for a guessed target)."""
    with pytest.raises(RuntimeError, match="sent no target"):
        target_from(answer)
