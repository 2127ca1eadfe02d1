"""Who hears that a model changed in the catalog: the serving side of this process (``dev``,
``serve``), told right after each write that changes what serves (states derived again, a
label, a default), so it never waits for its next catalog read.

Built once by the composition root and handed to whoever writes such changes (the
registrar, the management API, the version labels): none of them reaches another for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)


class ModelWatchers:
    """The listeners of model changes in this process; none when nothing serves here."""

    def __init__(self) -> None:
        self._watchers: list[Callable[[str], None]] = []

    def watch(self, watcher: Callable[[str], None]) -> None:
        """``watcher(model)`` hears each time the model's states were derived again (a load,
        an unload, an upload, a reconcile): a serving process in this process (``dev``,
        ``serve``) sees the change at once, not at its next catalog read."""
        self._watchers.append(watcher)

    def tell(self, model: str) -> None:
        """Tell the watchers now that ``model`` changed (a label, a default): right after the
        write, so no client that read it back finds the serving side behind it."""
        for watcher in self._watchers:
            try:
                watcher(model)
            except Exception:  # the catalog is right; the serving side re-reads it soon
                logger.exception("telling the serving side that %s changed failed", model)
