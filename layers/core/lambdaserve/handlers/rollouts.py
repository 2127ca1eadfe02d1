"""The rollouts function: on its schedule, one tick of the judge over every active rollout
(``rollouts.service.Rollouts.advance_all``): measure, step on, pause, promote or roll back."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdaserve.wiring.process import current

logger = Logger(service="lambdaserve-rollouts")


@logger.inject_lambda_context(clear_state=True)
def rollouts_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    moved = current().rollouts.advance_all()
    return {
        "moved": [
            {
                "model": m["spec"]["model"],
                "label": m["spec"]["label"],
                "phase": m["phase"],
                "weight": m["weight"],
            }
            for m in moved
        ]
    }
