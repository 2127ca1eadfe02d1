"""Tensors as lambdaserve holds them: v2 datatypes and their numpy dtypes, the JSON and
binary encodings (``encoding``), and a model's signature (``signature``).

The ground floor: imports only ``lambdaserve.errors``. Every other room may import it.
"""
