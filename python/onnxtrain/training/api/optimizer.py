"""``Optimizer``: onnxruntime 1.19's on-device optimizer (an AdamW or SGD optimizer model) over a
``Module``'s state; the update runs in onnxtrain's C++ Optimizer and changes the state's
parameters and moments in place."""
from __future__ import annotations

import os

from ... import _C
from .module import Module, _model_arg


class Optimizer:
    """Runs ``optimizer_uri`` (inputs learning_rate, step, params, gradients, first_order_moments,
    second_order_moments for AdamW; learning_rate, params, gradients for SGD) over the trained
    parameters of ``module``. The learning rate starts at 0.001, onnxruntime's default, also after
    loading a checkpoint (checkpoints do not store it)."""

    def __init__(self, optimizer_uri: str | os.PathLike | bytes, module: Module) -> None:
        if not isinstance(module, Module):
            raise TypeError(f"module must be an onnxtrain.training.api.Module, got {type(module)}")
        self._module = module
        self._optimizer = _C.Optimizer(_model_arg(optimizer_uri), module._model)

    def step(self) -> None:
        """Applies one update from the accumulated gradients (the step count grows by one)."""
        self._optimizer.step()

    def set_learning_rate(self, learning_rate: float) -> None:
        """Sets the learning rate of the next updates."""
        self._optimizer.set_learning_rate(float(learning_rate))

    def get_learning_rate(self) -> float:
        """The current learning rate."""
        return self._optimizer.get_learning_rate()
