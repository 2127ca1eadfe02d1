"""Logs people read on a terminal: text lines (JSON stays for Lambda), one level, no noise.

The handlers' Powertools loggers write JSON for CloudWatch; locally every ``lambdaserve``
logger is routed to one text handler instead (rich's, with colour, when a terminal is
attached; plain lines otherwise), and so are other libraries' warnings (Python's warnings
module, captured). The emulator's and PyTorch's warnings are not ours to show.
"""

from __future__ import annotations

import logging
import sys
import warnings

LEVELS = ("debug", "info", "warning", "error")
_FORMAT = "%(asctime)s %(levelname)-7s %(name)s  %(message)s"


def use_text_logs(level: str = "info") -> None:
    """Route every lambdaserve logger to one text handler at ``level``."""
    handler: logging.Handler
    rich_handler = _rich_handler() if sys.stderr.isatty() else None
    if rich_handler is not None:
        handler = rich_handler
        handler.setFormatter(logging.Formatter("%(name)s  %(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_FORMAT, "%H:%M:%S"))
    for name in ["lambdaserve", *logging.root.manager.loggerDict]:
        if not name.startswith("lambdaserve"):
            continue
        logger = logging.getLogger(name)
        for existing in list(logger.handlers):
            logger.removeHandler(existing)
        if name.startswith("lambdaserve."):  # the package's modules: through their parent
            logger.propagate = True
            logger.setLevel(logging.NOTSET)
        else:  # the package itself, and the handlers' Powertools loggers (lambdaserve-infer)
            logger.addHandler(handler)
            logger.propagate = False
            logger.setLevel(level.upper())
    # A library's warning (not silenced below) is a line of the same log, not a raw print
    logging.captureWarnings(True)
    captured = logging.getLogger("py.warnings")
    for existing in list(captured.handlers):
        captured.removeHandler(existing)
    captured.addHandler(handler)
    captured.propagate = False
    quiet_third_parties()


def quiet_third_parties() -> None:
    """moto's 'not supported by CloudFormation' notes, werkzeug's request lines, torch's
    deprecations: none of them is the user's to act on."""
    for name in ("moto", "werkzeug", "botocore", "urllib3", "uvicorn.error", "watchfiles"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"moto(\..*)?")
    warnings.filterwarnings("ignore", module=r"torch(\..*)?")
    warnings.filterwarnings("ignore", category=DeprecationWarning)


def _rich_handler() -> logging.Handler | None:
    """rich's coloured handler where rich is installed (lambdaserve[local]: dev); the server
    images install lambdaserve[server], without it, and log plain text on a terminal too."""
    try:
        from rich.logging import RichHandler
    except ImportError:
        return None
    return RichHandler(show_path=False, rich_tracebacks=False, log_time_format="%H:%M:%S")
