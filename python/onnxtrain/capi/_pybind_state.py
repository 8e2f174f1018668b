"""onnxruntime's ``onnxruntime.capi._pybind_state``: re-exports ``onnxruntime_pybind11_state``."""
from .onnxruntime_pybind11_state import *  # noqa: F401,F403
from .onnxruntime_pybind11_state import __all__  # noqa: F401
from .onnxruntime_pybind11_state import __getattr__  # noqa: F401,E402  (TrainingParameters, on first use)
