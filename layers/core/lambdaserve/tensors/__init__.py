"""Tensors as lambdaserve holds them: v2 datatypes and their numpy dtypes, the JSON and
binary encodings (``encoding``), a model's signature (``signature``), and Triton's system
shared memory, where tensors may live instead of the request (``shared_memory``).

The ground floor: imports only ``lambdaserve.errors``. Every other room may import it.
"""
