"""Paddle Serving's pipelines: the Op DAG from ``config.yml``, user Ops, their batching."""
