"""Wiring: each function's domain objects built from settings and AWS clients
(``aws``): the inference side alone (``inference``, what a cold start imports), the manage
side (``manage``), the queue side (``queues``).

Imports the domain rooms; only handlers, servers, the local stack and the CLI import it.
"""
