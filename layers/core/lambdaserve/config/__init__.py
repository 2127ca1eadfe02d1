"""A model's configuration in Triton's form: parsing ``config.pbtxt``/``config.json`` through
Triton's own messages (``model_config``, ``documents``, ``triton_proto``), what is supported
(``support``, ``unapplied_fields``: every field a config sets, applied or warned about),
dynamic batching and queue policy (``dynamic_batching``), instance counts and rate limiter
needs (``instance_groups``), sequence batching's controls and implicit state
(``sequence_batching``), ragged batches (``ragged_batching``: allow_ragged_batch,
batch_input, batch_output), reshape (``reshape``), warm-up samples (``warmup_samples``), the
model files a version may hold (``model_files``), the runtimes' names (``runtime_names``),
and the checks of a config against a model (``checks``).

Pure: no I/O, no runtime. Imports ``tensors`` and ``errors`` only.
"""
