"""Triton's sequence batcher with the state kept outside the instance: any Lambda instance
or ``serve`` task may run any step of any sequence.

A sequence's record (its step count, when it was last seen, its implicit state) lives in a
``SequenceStore`` (``records``): the catalog's DynamoDB table (``dynamodb_store``; a state
too large for an item in S3, ``state_objects``), a Redis
(``redis_store``), as the settings say (``from_settings``), or one process's memory
(``memory_store``). Every write is conditional on the record the step read, so two
instances racing on one sequence cannot both apply a step.
A step (``steps``) reads the record, fills the model's control and state inputs
(``controls``), runs the model, and writes the record back (or deletes it at END); the
model server runs it as one execution in the version's statistics (``served_step``), and
under ``oldest`` runs different sequences' steps as one execution (``oldest``).

Imports ``config``, ``protocol`` (the request), ``runtimes`` and ``metrics`` (a step's run
and statistics), ``batching`` (assembly, for ``oldest``), ``serving.response_cache`` (its
tensor codec), ``settings`` and ``errors``; nothing about HTTP, gRPC or Lambda.
"""
