"""onnxtrain.training.api — onnxruntime's on-device training API (``onnxruntime.training.api`` under
the alias), over onnxtrain's one training state.

Provided so far: ``CheckpointState`` (load, save, parameters, properties) in onnxruntime's checkpoint
format. ``Module``, ``Optimizer`` and ``LinearLRScheduler`` are not provided yet: importing them fails
by name."""
from .checkpoint_state import CheckpointState, Parameter, Parameters, Properties  # noqa: F401

__all__ = ["CheckpointState", "Parameter", "Parameters", "Properties"]
