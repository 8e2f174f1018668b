"""Exception types raised by onnxtrain (the native core maps its errors onto these)."""


class OnnxTrainError(RuntimeError):
    """Base class of every onnxtrain failure."""


class InvalidArgument(OnnxTrainError, ValueError):
    """Bad caller input: feed names, dtypes, shapes or options."""


class InvalidModel(OnnxTrainError, ValueError):
    """Malformed model bytes or tensor data."""


class InvalidGraph(InvalidModel):
    """Structurally invalid graph: cycle, undefined or duplicated value."""


class UnsupportedError(OnnxTrainError, NotImplementedError):
    """Valid ONNX that onnxtrain does not support (operator, opset, element type)."""


class ModelFileError(OSError):
    """A model file cannot be read."""
