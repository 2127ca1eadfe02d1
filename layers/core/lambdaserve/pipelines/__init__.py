"""Code around models: Python models in Triton's Python-backend format and their BLS calls."""
