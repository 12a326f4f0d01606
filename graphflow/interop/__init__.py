"""Interop with the ecosystem: TensorFlow GraphDefs, ONNX models, TensorBoard logs."""
