"""The catalog and its source: the DynamoDB catalog (``store``, ``items``), the S3 model
repository (``repository``), the version policy that decides which versions serve and
their states (``version_policy``), model configs as the catalog keeps them
(``configs``), and each state change the catalog writes, announced (``state_events``).

Imports ``config``, ``protocol`` (what names and versions may be) and ``errors``.
"""
