"""The descriptor pool of lambdaserve's TensorFlow Serving protos (``tensorflow_*.proto``):
their own, not protobuf's default pool. The names they declare are TensorFlow's
(``tensorflow.TensorProto``, ``tensorflow.serving.PredictRequest``), declared again from other
files: in the default pool, whichever of TensorFlow (or tensorflow-serving-api) and these came
second failed to import with "duplicate symbol 'tensorflow.TensorShapeProto'" — model code
importing TensorFlow in a ``serve`` process that answers TF Serving's gRPC, for one. The wire
format does not depend on the pool. ``scripts/generate_grpc_stubs.sh`` points the generated
modules here."""

from google.protobuf import any_pb2, descriptor_pool, wrappers_pb2

POOL = descriptor_pool.DescriptorPool()
for _dependency in (any_pb2, wrappers_pb2):  # the well-known types the serving proto imports
    POOL.AddSerializedFile(_dependency.DESCRIPTOR.serialized_pb)
