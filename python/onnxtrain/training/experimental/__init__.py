"""onnxruntime-training's ``onnxruntime.training.experimental``: ``export_gradient_graph``."""
from ._gradient_graph_tools import export_gradient_graph  # noqa: F401

__all__ = ["export_gradient_graph"]
