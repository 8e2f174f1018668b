"""GradientGraphBuilder with onnxruntime-training's call shapes."""
import os

from . import _C


def _as_bytes(model):
    """(serialized model, folder of its external data: "" unless read from a path)."""
    if isinstance(model, bytes):
        return model, ""
    if isinstance(model, (str, os.PathLike)):
        with open(model, "rb") as f:
            return f.read(), os.path.dirname(os.path.abspath(model))
    if hasattr(model, "SerializeToString"):  # onnx.ModelProto
        return model.SerializeToString(), ""
    raise TypeError("model must be serialized bytes, a path or an onnx.ModelProto")


def _names(arg, what):
    if isinstance(arg, str):
        return {arg}
    try:
        names = set(arg)
    except TypeError:
        raise TypeError(f"{what} must be a set of value names") from None
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"{what} must contain strings")
    return names


class GradientGraphBuilder:
    """Builds the gradient graph of a model, as an ONNX model.

    ``GradientGraphBuilder(model_bytes, y_node_arg_names, x_node_arg_names, loss_node_arg_name)``:
    the built model computes the outputs ``y_node_arg_names`` plus ``<x>_grad`` for every name of
    ``x_node_arg_names`` (initializers or graph inputs), the gradient of the scalar
    ``loss_node_arg_name``. ``portable=True`` emits only standard ONNX operators wherever possible.
    A model given by path may keep its weights in external data beside it.
    """

    def __init__(self, model_bytes, y_node_arg_names, x_node_arg_names, loss_node_arg_name, portable=False):
        if not isinstance(loss_node_arg_name, str):
            raise TypeError("loss_node_arg_name must be a string")
        data, base_dir = _as_bytes(model_bytes)
        self._builder = _C.GradientGraphBuilder(
            data, _names(y_node_arg_names, "y_node_arg_names"),
            _names(x_node_arg_names, "x_node_arg_names"), loss_node_arg_name, bool(portable), base_dir)
        self._built = False

    def build(self):
        """Builds the gradient graph."""
        self._builder.build()
        self._built = True

    def get_model(self):
        """Serialized ONNX model of the gradient graph (bytes)."""
        return self._builder.get_model()

    def save(self, path, external_data="auto", size_threshold=1024, location=None):
        """Writes the gradient model to ``path`` atomically. ``external_data``: "auto" keeps
        the weights inline unless the model would exceed protobuf's 2 GiB limit, "always" writes
        initializers of at least ``size_threshold`` bytes to ``location`` (a file name beside the
        model, default ``<file name>.data``), "never" keeps everything inline."""
        self._builder.save(os.fspath(path), str(external_data), int(size_threshold), location or "")
