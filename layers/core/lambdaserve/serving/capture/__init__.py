"""Payload capture: a sample of each version's requests and answers written to the bucket
(``data_capture``), and every door's exchanges offered to it in one way (``capture_offers``).

Imports ``errors`` and ``serving``'s version resolver (the version captured); nothing about
HTTP, gRPC or Lambda."""
