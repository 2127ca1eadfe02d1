"""The long-running processes of ECS tasks: ``lambdaserve serve`` (``serve``) and
``lambdaserve worker`` (``worker``); the SQS event pump with Lambda's event source mapping
semantics (``event_pump``), background uvicorn servers (``background``), text logs.

Imports ``handlers`` (the same singletons as Lambda) and below.
"""
