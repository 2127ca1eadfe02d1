"""The deployed shape: functions and tasks started from template.yaml, under their roles.

moto's IAM switch is process-wide, so this suite runs in a pytest process of its own
(``make test-deployed``); ``make test`` leaves it out."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/deployed/" in str(item.path):
            item.add_marker(pytest.mark.deployed)
