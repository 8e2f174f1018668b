"""onnxblock's optimizers: AdamW, SGD, ClipGradNorm."""
from .optim import SGD, AdamW, ClipGradNorm  # noqa: F401

__all__ = ["AdamW", "SGD", "ClipGradNorm"]
