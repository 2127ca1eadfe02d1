"""The catalog and its source: the DynamoDB catalog (``store``, ``items``), the S3 model
repository (``repository``), the version policy that decides which versions serve and
their states (``version_policy``), and model configs as the catalog keeps them
(``configs``).

Imports ``config``, ``protocol`` (what names and versions may be) and ``errors``.
"""
