"""``OnnxRuntimeBackendRep``: a prepared model of ONNX's backend API (``onnx.backend.base.BackendRep``)."""
from onnx.backend.base import BackendRep

from ..capi.onnxruntime_pybind11_state import RunOptions


def _set_known(options, kwargs):
    """Sets on ``options`` the keyword arguments it has an attribute for (the backend API passes one
    set of keyword arguments to both SessionOptions and RunOptions; each takes its own)."""
    for key, value in kwargs.items():
        if hasattr(options, key):
            setattr(options, key, value)
    return options


class OnnxRuntimeBackendRep(BackendRep):
    """Runs an ``InferenceSession``: ``run(inputs, **kwargs)``."""

    def __init__(self, session):
        self._session = session

    def run(self, inputs, **kwargs):
        """The model's outputs, as a list in the model's output order. ``inputs`` is a list or tuple
        (one value per model input, in order), a dict (input name to value) or one array for a model
        with one input. ``kwargs`` that name ``RunOptions`` attributes are set on the run's options."""
        options = _set_known(RunOptions(), kwargs)
        names = [i.name for i in self._session.get_inputs()]
        if isinstance(inputs, dict):
            feed = dict(inputs)
        elif isinstance(inputs, (list, tuple)):
            if len(inputs) != len(names):
                raise ValueError(f"The model takes {len(names)} inputs ({names}), got {len(inputs)}")
            feed = dict(zip(names, inputs))
        else:
            if len(names) != 1:
                raise ValueError(f"The model takes {len(names)} inputs ({names}): pass a list or a dict")
            feed = {names[0]: inputs}
        return list(self._session.run(None, feed, options))
