"""onnxruntime-training's ``onnxruntime.capi.training.training_session``: its ``TrainingSession``
(``TrainingSession(path_or_bytes, parameters, sess_options=None, providers=None,
provider_options=None)``), which is onnxtrain's (docs/python-api.md)."""
from ...training._session import TrainingSession  # noqa: F401

__all__ = ["TrainingSession"]
