"""Board-free HTP checks on onnxruntime-qnn's x86 HTP simulator and graph
preparer: quantize for the HTP, prepare for one SoC with CPU fallback disabled,
and run the prepared graph against fp32 onnxruntime CPU.

Nothing here imports ``onnxruntime_qnn`` at import time: see ``availability``.
"""
