"""onnxtrain.training.api — onnxruntime's on-device training API (``onnxruntime.training.api`` under
the alias), over onnxtrain's one training state: ``CheckpointState`` (onnxruntime's checkpoint
format), ``Module`` (training and eval steps over artifacts in onnxruntime's shape), ``Optimizer``
(AdamW or SGD optimizer models) and ``LinearLRScheduler``. See docs/on-device.md."""
from .checkpoint_state import CheckpointState, Parameter, Parameters, Properties  # noqa: F401
from .lr_scheduler import LinearLRScheduler  # noqa: F401
from .module import Module  # noqa: F401
from .optimizer import Optimizer  # noqa: F401

__all__ = ["CheckpointState", "Parameter", "Parameters", "Properties", "Module", "Optimizer", "LinearLRScheduler"]
