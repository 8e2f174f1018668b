"""onnxruntime's ``onnxruntime.capi`` layer: ``onnxruntime_pybind11_state`` (the native objects and
the exception classes), ``_pybind_state`` (which re-exports it) and
``onnxruntime_inference_collection`` (the Python classes over them)."""
