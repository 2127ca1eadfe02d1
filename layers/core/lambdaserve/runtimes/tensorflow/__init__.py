"""TensorFlow: TensorFlow's own runtime (the optional ``tensorflow`` extra) for SavedModels,
every signature (``runtime``); the signatures read from ``saved_model.pb`` without
TensorFlow (``metagraph``); TF Serving's warm-up file read (``warmup``); OpenVINO or
TensorFlow for a SavedModel, chosen at publish (``choice``).
"""
