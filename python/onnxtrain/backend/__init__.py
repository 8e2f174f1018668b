"""onnxruntime's ``onnxruntime.backend``: ONNX's backend API (``onnx.backend.base.Backend``) over
onnxtrain's ``InferenceSession`` — ``prepare(model, device=None, **session_options)`` gives a
``OnnxRuntimeBackendRep`` whose ``run(inputs, **run_options)`` returns the outputs as a list;
``run(model, inputs)`` does both; ``supports_device`` / ``is_compatible`` answer for ``'CPU'``."""
from .backend import is_compatible, prepare, run, supports_device  # noqa: F401

__all__ = ["is_compatible", "prepare", "run", "supports_device"]
