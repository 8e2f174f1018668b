"""InferenceSession with onnxruntime's call shapes."""
import os
import warnings

from . import _C

_AVAILABLE = ["CPUExecutionProvider"]


def get_available_providers():
    """Execution providers this build can run (onnxruntime-compatible)."""
    return list(_AVAILABLE)


def get_all_providers():
    """Every provider name onnxtrain knows."""
    return list(_AVAILABLE)


def _check_providers(providers, provider_options=None):
    if providers is None:
        return list(_AVAILABLE)
    chosen = []
    for p in providers:
        name = p[0] if isinstance(p, (tuple, list)) else p
        if not isinstance(name, str):
            raise ValueError(f"providers: expected a provider name, got {name!r}")
        if name in _AVAILABLE:
            chosen.append(name)
        else:
            warnings.warn(
                f"Specified provider '{name}' is not in available provider names. "
                f"Available providers: '{', '.join(_AVAILABLE)}'")
    return chosen or list(_AVAILABLE)


class InferenceSession:
    """Loads an ONNX model (path or serialized bytes) and runs it on CPU.

    Same call shapes as ``onnxruntime.InferenceSession``: ``run(output_names, input_feed)``
    returns a list of numpy arrays; ``output_names=None`` means every output.
    """

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
        if isinstance(path_or_bytes, os.PathLike):
            path_or_bytes = os.fspath(path_or_bytes)
        if not isinstance(path_or_bytes, (str, bytes)):
            raise TypeError("path_or_bytes must be a file path or the serialized model bytes, got "
                            f"{type(path_or_bytes).__name__}")
        if sess_options is not None and not isinstance(sess_options, _C.SessionOptions):
            raise TypeError("sess_options must be an onnxtrain.SessionOptions")
        self._providers = _check_providers(providers, provider_options)
        self._model_path = path_or_bytes if isinstance(path_or_bytes, str) else None
        self._sess = _C.InferenceSession(path_or_bytes, sess_options)
        self._sess_options = sess_options

    def run(self, output_names, input_feed, run_options=None):
        """Runs the model; returns the requested outputs as numpy arrays."""
        if not isinstance(input_feed, dict):
            raise TypeError("input_feed must be a dict mapping input names to numpy arrays")
        if isinstance(output_names, str):
            output_names = [output_names]
        return self._sess.run(output_names, input_feed)

    def get_inputs(self):
        """Declared inputs (``NodeArg`` with ``name``, ``shape``, ``type``)."""
        return self._sess.get_inputs()

    def get_outputs(self):
        """Declared outputs."""
        return self._sess.get_outputs()

    def get_overridable_initializers(self):
        """Initializers that are also graph inputs and may be fed."""
        return self._sess.get_overridable_initializers()

    def get_providers(self):
        return list(self._providers)

    def get_provider_options(self):
        return {p: {} for p in self._providers}

    def get_session_options(self):
        return self._sess_options

    def last_run_stats(self):
        """Figures of the plan used by the last run (arena size, steps, folded nodes)."""
        return self._sess.last_run_stats()
