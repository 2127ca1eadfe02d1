"""manage function.

SAM handlers: ``app.events_handler``, ``app.reconcile_handler``, ``app.api_handler``,
``app.rollouts_handler``.
"""

from __future__ import annotations

from lambdaserve.handlers.manage import api_handler, events_handler, reconcile_handler
from lambdaserve.handlers.rollouts import rollouts_handler

__all__ = ["api_handler", "events_handler", "reconcile_handler", "rollouts_handler"]
