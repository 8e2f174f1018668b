"""onnxblock's losses: MSELoss, CrossEntropyLoss, BCEWithLogitsLoss, L1Loss."""
from .loss import BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss  # noqa: F401

__all__ = ["MSELoss", "CrossEntropyLoss", "BCEWithLogitsLoss", "L1Loss"]
