"""InferenceSession with onnxruntime's call shapes (kept for imports of ``onnxtrain.session``; the
classes live in ``onnxtrain.capi.onnxruntime_inference_collection``)."""
from .capi.onnxruntime_inference_collection import (IOBinding, InferenceSession, OrtDevice, OrtValue,  # noqa: F401
                                                    Session, check_and_normalize_provider_args)
from .capi.onnxruntime_pybind11_state import get_all_providers, get_available_providers  # noqa: F401
