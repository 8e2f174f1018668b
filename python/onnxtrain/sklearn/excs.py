"""Exceptions of onnxtrain.sklearn (onnxcustom's ``onnxcustom.training.excs``)."""


class ConvergenceError(RuntimeError):
    """The training failed: the loss became NaN or infinite. The message names the iteration
    (epoch) and the batch where it happened."""


class EvaluationError(RuntimeError):
    """An evaluation (validation loss, ``losses``, ``score``) produced a NaN or infinite loss."""
