"""The embedded local stack of ``lambdaserve dev`` (``dev``, its options ``dev_options`` and
banner ``dev_banner``): the AWS emulator (``emulator``), resources from the template
(``template``, ``resources``), the repository mirror (``mirror``) and the catalog's facts
kept across restarts (``catalog_state``), API Gateway events from local HTTP
(``http_api_event``), the deployed synchronous path of ``--server-mode`` (``deployed_api``)
and the demo model (``demo``).

The top room under the CLI: it may import every other.
"""
