"""``LinearLRScheduler``: onnxruntime 1.19's linear warm-up then linear decay of an ``Optimizer``'s
learning rate, computed from the optimizer's step count (C++: on_device.h)."""
from __future__ import annotations

from ... import _C
from .optimizer import Optimizer


class LinearLRScheduler:
    """lr = initial_lr * step / warmup_step_count during the warm-up, then decays linearly to 0 at
    total_step_count; step is the optimizer's step count. Construction sets the rate for the current
    step (0 before the first update when there is a warm-up).

    The counts mean what their names say. onnxruntime 1.19's Python binding passes them to C++ in
    swapped order (its ``LinearLRScheduler(opt, 10, 100, lr)`` warms up over 100 steps and never
    decays); a script that must reproduce that trajectory passes the two counts swapped
    (docs/on-device.md)."""

    def __init__(self, optimizer: Optimizer, warmup_step_count: int, total_step_count: int,
                 initial_lr: float) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer must be an onnxtrain.training.api.Optimizer, got {type(optimizer)}")
        self._optimizer = optimizer
        self._scheduler = _C.LinearLRScheduler(optimizer._optimizer, int(warmup_step_count), int(total_step_count),
                                               float(initial_lr))

    def step(self) -> None:
        """Sets the optimizer's learning rate for its current step count."""
        self._scheduler.step()
