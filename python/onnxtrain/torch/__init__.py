"""PyTorch bridge: ``ORTModule(module)`` runs a ``torch.nn.Module`` forward and backward in onnxtrain.

The module is exported to ONNX on its first call, with a dynamic batch axis (again for each new
input signature other than the batch size, or mode; at most 8 graphs are kept), its
gradient graph is built by ``OrtModuleGraphBuilder`` and both run through ``TrainingAgent`` inside
a ``torch.autograd.Function``, so any torch optimizer trains the module's own parameters. See
docs/torch.md.
"""
from ._export import ORTModuleExportError
from ._ortmodule import DebugOptions, LogLevel, ORTModule

__all__ = ["ORTModule", "DebugOptions", "LogLevel", "ORTModuleExportError"]
