"""Interop with TensorFlow's ecosystem: GraphDef protobufs, TensorBoard, ONNX.

- ``tf_proto``: TensorFlow's protobuf messages (from tensorboardX, or tensorboard's
  full schema) and conversions between them and graphflow dtypes, shapes, arrays, attrs.
- ``tf_import``: ``gf.import_tf_graph`` — a TensorFlow GraphDef as a gf.Graph;
  ``tf_import_plan``: its nodes to build (library functions inlined, missing ops listed).
- ``tf_export``: ``gf.export_tf_graph`` — a gf.Graph as a TensorFlow GraphDef.
- ``tf_lowering``: how each graphflow op is written as TensorFlow nodes (the lowerings;
  what is written as TF's op of one node is each OpDef's ``tf``, a ``registry.TFForm``).
- ``onnx_export``: ``gf.export_onnx`` — an inference graph as an ONNX model;
  ``onnx_lowering``: each op's ONNX lowering, TensorFlow's semantics kept.

Every protobuf dependency is optional and imported lazily, on first use, with an
error that names the extra to install.
"""
