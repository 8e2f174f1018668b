"""onnxruntime's native module ``onnxruntime.capi.onnxruntime_pybind11_state``: the C objects
(``OrtValue``, ``OrtValueVector``, ``OrtDevice``, ``SessionIOBinding``, ``InferenceSession``,
``SessionOptions``, ``RunOptions``, ...), the enums and the exception classes, as onnxtrain's native
core provides them."""
from .. import _C
from .._errors import (EngineError, EPFail, Fail, InvalidArgument, InvalidGraph, InvalidProtobuf,  # noqa: F401
                       ModelLoaded, NoModel, NoSuchFile, NotImplemented, RuntimeException)
from .._errors import ORT_EXCEPTIONS as _ORT_EXCEPTIONS

# Native objects under onnxruntime's names (those the native core defines).
_NATIVE = ("OrtValue", "OrtValueVector", "OrtDevice", "OrtMemoryInfo", "OrtAllocatorType", "OrtMemType",
           "is_dlpack_uint8_tensor")
for _name in _NATIVE:
    if hasattr(_C, _name):
        globals()[_name] = getattr(_C, _name)

__all__ = [n for n in _NATIVE if n in globals()] + list(_ORT_EXCEPTIONS)
