"""Lambda entry points (thin): parse the event, call one domain function, shape the reply.

``functions/*/app.py`` re-export these so SAM's ``Handler: app.<name>`` resolves,
and the local stack calls the very same callables. Each takes this process's objects from
``wiring.process``; imports ``apps``, ``wiring`` and below.
"""
