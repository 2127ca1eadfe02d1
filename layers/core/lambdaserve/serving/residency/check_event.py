"""The event that asks where a version serves to load it before READY (``load_check``).

Only its key lives here: the infer handler tells a check from API Gateway's events at every
invoke, and importing the check itself would pull the whole serving side into the
function's cold import.
"""

from __future__ import annotations

# The top-level key of a load-check event (a direct invoke: API Gateway's events never
# carry it), built by ``publishing.serving_check``.
EVENT_KEY = "lambdaserve_check_load"
