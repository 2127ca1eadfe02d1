"""How requests become batches: assembly and splitting (``assembly``), Triton's ragged batches
with their batch inputs and outputs (``ragged``), the plan of when a batch runs (``plan``),
a lane's queue in Triton's priority order (``priorities``), and the in-process dynamic
batcher with its per-version lanes (``dynamic_batcher``), generic over the function that
runs a batch.

Imports ``protocol`` (the request type), ``config`` (the queue policy) and ``errors``.
"""
