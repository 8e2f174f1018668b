"""``OnnxRuntimeBackend``: ONNX's backend API (``onnx.backend.base.Backend``) as onnxruntime
implements it, over onnxtrain's ``InferenceSession``."""
import os
import unittest

from onnx import ModelProto, helper
from onnx.backend.base import Backend
from onnx.checker import check_model

from ..capi.onnxruntime_inference_collection import InferenceSession
from ..capi.onnxruntime_pybind11_state import SessionOptions, get_device
from .backend_rep import OnnxRuntimeBackendRep, _set_known


class OnnxRuntimeBackend(Backend):
    """ONNX's backend API over ``InferenceSession``. ``ALLOW_RELEASED_ONNX_OPSET_ONLY=0`` in the
    environment lets ``prepare`` take opsets the installed ``onnx`` package has not released."""

    allowReleasedOpsetsOnly = os.getenv("ALLOW_RELEASED_ONNX_OPSET_ONLY", "1") == "1"

    @classmethod
    def is_compatible(cls, model, device=None, **kwargs):
        """Whether ``device`` (default: this build's device) is supported; ``model`` is not looked at."""
        return cls.supports_device(get_device() if device is None else device)

    @classmethod
    def is_opset_supported(cls, model):
        """``(True, "")``, or ``(False, reason)`` when the model imports an opset (domain, version)
        that the installed ``onnx`` package does not list as released (only checked while
        ``allowReleasedOpsetsOnly``)."""
        if cls.allowReleasedOpsetsOnly:
            for opset in model.opset_import:
                domain = opset.domain or "ai.onnx"
                if (domain, opset.version) not in helper.OP_SET_ID_VERSION_MAP:
                    return False, (f"Only released onnx opsets are supported (set ALLOW_RELEASED_ONNX_OPSET_ONLY=0 "
                                   f"to allow others); got domain '{domain}' version {opset.version}.")
        return True, ""

    @classmethod
    def supports_device(cls, device):
        """Whether this build computes on ``device`` (``'CPU'``; ``'CUDA'`` is read as ``'GPU'``)."""
        if device == "CUDA":
            device = "GPU"
        return device in get_device()

    @classmethod
    def prepare(cls, model, device=None, **kwargs):
        """A ``OnnxRuntimeBackendRep`` for ``model``: a ModelProto (checked with ``onnx.checker``;
        an opset ``is_opset_supported`` refuses raises ``unittest.SkipTest`` as onnxruntime's does),
        a file name, serialized bytes, an ``InferenceSession`` or a rep (returned as it is).
        ``kwargs`` that name ``SessionOptions`` attributes are set on the session's options; the
        session's run fallback is disabled. Raises RuntimeError for a device this build lacks."""
        if isinstance(model, OnnxRuntimeBackendRep):
            return model
        if isinstance(model, InferenceSession):
            return OnnxRuntimeBackendRep(model)
        if isinstance(model, (str, bytes, os.PathLike)):
            if device is not None and not cls.supports_device(device):
                raise RuntimeError(f"Incompatible device: expected '{device}', this build computes on '{get_device()}'")
            session = InferenceSession(model, _set_known(SessionOptions(), kwargs))
            session.disable_fallback()
            return OnnxRuntimeBackendRep(session)
        if isinstance(model, ModelProto):
            check_model(model)
            supported, reason = cls.is_opset_supported(model)
            if not supported:
                raise unittest.SkipTest(reason)
            return cls.prepare(model.SerializeToString(), device, **kwargs)
        raise TypeError(f"prepare: model must be a ModelProto, a file name, bytes or an InferenceSession, "
                        f"got {type(model).__name__}")

    @classmethod
    def run_model(cls, model, inputs, device=None, **kwargs):
        """``prepare(model, device, **kwargs).run(inputs, **kwargs)``."""
        return cls.prepare(model, device, **kwargs).run(inputs, **kwargs)

    @classmethod
    def run_node(cls, node, inputs, device=None, outputs_info=None, **kwargs):
        """Not implemented, as in onnxruntime: run a model holding the node instead."""
        raise NotImplementedError("OnnxRuntimeBackend.run_node is not implemented (as in onnxruntime): "
                                  "it is much more efficient to run a whole model than every node independently.")


is_compatible = OnnxRuntimeBackend.is_compatible
prepare = OnnxRuntimeBackend.prepare
run = OnnxRuntimeBackend.run_model
supports_device = OnnxRuntimeBackend.supports_device
