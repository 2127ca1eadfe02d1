"""Models calling models: BLS and ensemble steps bound to a ``ModelServer`` (``bls``),
and which ensembles depend on which models, kept in the catalog (``ensemble_registry``).

Imports ``serving``, ``catalog`` and below.
"""
