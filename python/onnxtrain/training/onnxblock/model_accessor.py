"""The model blocks build into: ``base(model)`` (a copy of ``model``) and ``empty_base()`` (a new,
empty model), each a context manager yielding a ``ModelAccessor`` whose ``model`` is the model
being built."""
import contextlib
import copy

import onnx

_GLOBAL_ACCESSOR = None


class ModelAccessor:
    """Holds the model that blocks called inside the context append to."""

    def __init__(self, model):
        self._model = model

    @property
    def model(self):
        """The onnx.ModelProto being built."""
        return self._model


def current():
    """The accessor of the innermost ``base`` / ``empty_base`` context; RuntimeError outside one."""
    if _GLOBAL_ACCESSOR is None:
        raise RuntimeError("onnxblock: blocks build into a model: call them inside `with onnxblock.base(model):` "
                           "or `with onnxblock.empty_base():`")
    return _GLOBAL_ACCESSOR


@contextlib.contextmanager
def _accessing(model):
    global _GLOBAL_ACCESSOR
    previous = _GLOBAL_ACCESSOR
    _GLOBAL_ACCESSOR = ModelAccessor(model)
    try:
        yield _GLOBAL_ACCESSOR
    finally:
        _GLOBAL_ACCESSOR = previous


def base(model):
    """Blocks called inside build on a copy of ``model`` (an onnx.ModelProto); yields its accessor."""
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"onnxblock.base: model must be an onnx.ModelProto, got {type(model).__name__}")
    return _accessing(copy.deepcopy(model))


def empty_base(opset_version=None):
    """Blocks called inside build a new model importing ai.onnx ``opset_version`` (default: the
    onnx package's latest) and com.microsoft 1; yields its accessor."""
    model = onnx.ModelProto()
    model.ir_version = onnx.IR_VERSION
    model.producer_name = "onnxtrain onnxblock"
    model.graph.name = "graph"
    model.opset_import.extend((onnx.helper.make_opsetid("com.microsoft", 1),
                               onnx.helper.make_opsetid("", opset_version or onnx.defs.onnx_opset_version())))
    return _accessing(model)


@contextlib.contextmanager
def custom_op_library(custom_op_library_path):
    """onnxruntime registers a custom operator library's schemas here; onnxtrain loads no custom
    operator libraries: NotImplementedError."""
    raise NotImplementedError(f"onnxblock.custom_op_library({custom_op_library_path!r}): onnxtrain loads no custom "
                              "operator libraries")
    yield  # pragma: no cover
