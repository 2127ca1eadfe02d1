"""The catalog and its source: the DynamoDB catalog (``store``, ``items``), the S3 model
repository (``repository``), the version policy that decides which versions serve and
their states (``version_policy``), model configs as the catalog keeps them
(``configs``), each state change the catalog writes, announced (``state_events``), and
what a weighted version label is and which version it names for a request
(``label_weights``), each version's tallies for a rollout's analysis (``tallies``), and
each version's cold starts, wherever it loaded (``cold_starts``).

Imports ``config``, ``protocol`` (what names and versions may be), ``metrics`` (a tally) and
``errors``.
"""
