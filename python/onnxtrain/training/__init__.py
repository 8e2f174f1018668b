"""onnxtrain.training — onnxruntime-training's ``onnxruntime.training`` (reachable under that name
through the alias): ``TrainingParameters`` / ``TrainingSession`` (onnxruntime-training's contract),
onnxcustom's loss builder ``add_loss_output`` and ``get_train_initializer``."""
from ._session import TrainingParameters, TrainingSession, add_loss_output, get_train_initializer  # noqa: F401

__all__ = ["TrainingParameters", "TrainingSession", "add_loss_output", "get_train_initializer"]
