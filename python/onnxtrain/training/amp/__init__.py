"""onnxruntime-training's ``onnxruntime.training.amp``: loss scalers for mixed precision training."""
from . import loss_scaler  # noqa: F401
from .loss_scaler import DynamicLossScaler, LossScaler  # noqa: F401

__all__ = ["LossScaler", "DynamicLossScaler"]
