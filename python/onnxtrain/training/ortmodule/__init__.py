"""onnxruntime-training's ``onnxruntime.training.ortmodule``: the PyTorch bridge of
``onnxtrain.torch`` under onnxruntime's module name (``from onnxruntime.training.ortmodule import
ORTModule, DebugOptions, LogLevel`` under the alias). See docs/torch.md."""
from onnxtrain.torch import DebugOptions, LogLevel, ORTModule, ORTModuleExportError

__all__ = ["ORTModule", "DebugOptions", "LogLevel", "ORTModuleExportError"]
