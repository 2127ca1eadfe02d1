"""Requests that wait in SQS: envelopes and the result and payload stores (``results``),
async submission (``submit``), the batcher's domain (``inference``), how queued batches reach
the infer function (``invokers``), and the delivery helpers (``delivery``: top-up,
visibility lease), one delivery consumed (``consumer``), and shadow copies sent from a
Lambda function (``shadows``).

Imports ``serving``, ``batching``, ``protocol`` and below.
"""
