"""Triton's ``instance_group.count`` and queue policy on the Lambda path, where one shared
function serves every model and Lambda's reserved concurrency cannot bound a model alone:
a fleet-wide count of each version's executions in flight and of the requests waiting for
one.

A version whose config states an instance count holds a slot (a lease that expires with
the invocation, so an environment that dies mid-request never keeps one) for each
execution (``gate``), taken from a ``SlotStore`` (``records``): the catalog's DynamoDB table
(``dynamodb_store``) or a Redis (``redis_store``), as the settings say (``from_settings``).
A version without one pays nothing: no store is asked.

Imports ``config`` (the counts and the queue policy), ``settings`` and ``errors``; nothing
about HTTP, gRPC or Lambda (the handlers set the invocation's deadline,
``protocol.invocation``, which ``gate`` reads).
"""
