"""ONNX models: reading and checking them, their I/O signature, sessions and
writing, already-quantized detection."""
