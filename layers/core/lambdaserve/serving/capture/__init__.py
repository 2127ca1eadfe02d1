"""Payload capture: a sample of each version's requests and answers written to the bucket
(``data_capture``), every door's exchanges offered to it in one way (``capture_offers``),
and shadow traffic, recorded as it records an exchange (``shadow``).

Imports ``errors``, ``protocol`` and ``tensors`` (a shadow's request and answer as v2 JSON),
and ``serving``'s version resolver and model server (the version captured, the shadow's
run); nothing about HTTP, gRPC or Lambda."""
