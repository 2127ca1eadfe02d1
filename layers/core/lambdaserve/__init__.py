"""lambdaserve: serve ML models on AWS serverless building blocks."""

from __future__ import annotations

__version__ = "0.1.0"
