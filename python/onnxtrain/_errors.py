"""Exception types raised by onnxtrain.

The classes carry the names of onnxruntime's ``onnxruntime.capi.onnxruntime_pybind11_state``
exceptions (``Fail``, ``InvalidArgument``, ``NoSuchFile``, ``NoModel``, ``EngineError``,
``RuntimeException``, ``InvalidProtobuf``, ``ModelLoaded``, ``NotImplemented``, ``InvalidGraph``,
``EPFail``), so that code catching those catches ours. Every one derives from ``OnnxTrainError``
(a ``RuntimeError``); the native core maps its error codes onto them. Where a Python built-in
exception fits too, the class also derives from it (``InvalidArgument`` is a ``ValueError``,
``NoSuchFile`` a ``FileNotFoundError``, ``NotImplemented`` a ``NotImplementedError``).
"""


class OnnxTrainError(RuntimeError):
    """Base class of every onnxtrain failure."""


class Fail(OnnxTrainError):
    """A generic failure (onnxruntime's FAIL): for example a kernel rejecting its inputs at run time,
    or a run stopped by ``RunOptions.terminate``."""


class InvalidArgument(OnnxTrainError, ValueError):
    """Bad caller input: feed names, dtypes, shapes or options (onnxruntime's INVALID_ARGUMENT)."""


class ModelFileError(OnnxTrainError, OSError):
    """A model or checkpoint file cannot be read or written."""


class NoSuchFile(ModelFileError, FileNotFoundError):
    """A file cannot be opened (onnxruntime's NO_SUCHFILE)."""


class NoModel(OnnxTrainError):
    """An operation needs a loaded model (onnxruntime's NO_MODEL)."""


class EngineError(OnnxTrainError):
    """An internal engine failure (onnxruntime's ENGINE_ERROR)."""


class RuntimeException(OnnxTrainError):
    """A failure raised while running (onnxruntime's RUNTIME_EXCEPTION)."""


class InvalidModel(OnnxTrainError, ValueError):
    """Malformed model bytes or tensor data."""


class InvalidProtobuf(InvalidModel):
    """The model bytes are not a valid ONNX protobuf (onnxruntime's INVALID_PROTOBUF)."""


class ModelLoaded(OnnxTrainError):
    """A model is already loaded (onnxruntime's MODEL_LOADED)."""


class NotImplemented(OnnxTrainError, NotImplementedError):  # noqa: A001 (onnxruntime's name)
    """Valid ONNX that onnxtrain does not support: operator, opset, element type, option
    (onnxruntime's NOT_IMPLEMENTED)."""


class InvalidGraph(InvalidModel):
    """Structurally invalid graph: cycle, undefined or duplicated value (onnxruntime's INVALID_GRAPH)."""


class EPFail(OnnxTrainError):
    """An execution provider failed (onnxruntime's EP_FAIL)."""


# onnxtrain's earlier name for NotImplemented.
UnsupportedError = NotImplemented

ORT_EXCEPTIONS = ("Fail", "InvalidArgument", "NoSuchFile", "NoModel", "EngineError", "RuntimeException",
                  "InvalidProtobuf", "ModelLoaded", "NotImplemented", "InvalidGraph", "EPFail")
