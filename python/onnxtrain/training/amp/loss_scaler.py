"""Loss scalers of onnxruntime-training's ORTTrainer (``onnxruntime.training.amp``)."""
from .._utils import check, check_number, is_int



def dynamic_scale_update(scale, stable_steps, all_finite, up_scale_window, min_scale, max_scale):
    """onnxruntime's dynamic loss-scale rule: ``(scale, stable_steps)`` after one step. A non-finite
    step halves the scale (not below ``min_scale``) and restarts the count; ``up_scale_window``
    finite steps in a row double it (not above ``max_scale``)."""
    if not all_finite:
        return max(min_scale, scale / 2), 0
    stable_steps += 1
    if stable_steps >= up_scale_window:
        return min(max_scale, scale * 2), 0
    return scale, stable_steps

class LossScaler:
    """Base class of loss scaling strategies (onnxruntime-training's ``amp.LossScaler``).

    Subclasses implement ``reset()`` and ``update(train_step_info)``; the trainer feeds
    ``loss_scale`` to the session and, when the subclass automates it, calls ``update`` after
    each optimizer step.

    Args:
        loss_scale (float): the initial loss scale (> 0, finite).
    """

    def __init__(self, loss_scale):
        self._input_name = None
        self.loss_scale = loss_scale

    @property
    def input_name(self):
        """Name of the session input the loss scale is fed to (set by the trainer)."""
        return self._input_name

    @input_name.setter
    def input_name(self, input_name):
        check(isinstance(input_name, str), "'input_name' must be a string")
        check(input_name != "", "'input_name' cannot be empty")
        self._input_name = input_name

    @property
    def loss_scale(self):
        """The current loss scale (float)."""
        return self._loss_scale

    @loss_scale.setter
    def loss_scale(self, loss_scale):
        self._loss_scale = check_number("loss_scale", loss_scale, minimum=0, strict=True)

    def reset(self):
        """Resets the scaler's internal state."""
        raise NotImplementedError

    def update(self, train_step_info):
        """Updates the loss scale after a step described by ``train_step_info``; returns it."""
        raise NotImplementedError


class DynamicLossScaler(LossScaler):
    """Dynamic loss scaling (onnxruntime-training's ``amp.DynamicLossScaler``, the default of mixed precision).

    ``update``: a step with a non-finite gradient halves the scale (not below
    ``min_loss_scale``) and restarts the count of stable steps; ``up_scale_window`` consecutive
    finite steps double it (not above ``max_loss_scale``) and restart the count.

    Args:
        automatic_update (bool, default True): the trainer calls ``update`` after each step;
            False: only explicit calls update it (static scaling if none).
        loss_scale (float, default 2**16): initial loss scale (> 0).
        up_scale_window (int, default 2000): stable steps before doubling (>= 1).
        min_loss_scale (float, default 1.0): lower bound when halving (> 0).
        max_loss_scale (float, default 2**24): upper bound when doubling (>= min_loss_scale).
    """

    def __init__(self, automatic_update=True, loss_scale=float(1 << 16), up_scale_window=2000, min_loss_scale=1.0,
                 max_loss_scale=float(1 << 24)):
        super().__init__(loss_scale)
        check(isinstance(automatic_update, bool), f"'automatic_update' must be a bool, got {automatic_update!r}")
        check(is_int(up_scale_window) and up_scale_window >= 1,
              f"'up_scale_window' must be an int >= 1, got {up_scale_window!r}")
        min_loss_scale = check_number("min_loss_scale", min_loss_scale, minimum=0, strict=True)
        max_loss_scale = check_number("max_loss_scale", max_loss_scale, minimum=0, strict=True)
        check(max_loss_scale >= min_loss_scale,
              f"'max_loss_scale' ({max_loss_scale}) must be >= 'min_loss_scale' ({min_loss_scale})")
        self.automatic_update = automatic_update
        self.up_scale_window = int(up_scale_window)
        self.min_loss_scale = min_loss_scale
        self.max_loss_scale = max_loss_scale
        self._initial_loss_scale = self.loss_scale
        self._stable_steps_count = 0

    def reset(self):
        """Back to the initial loss scale, with no stable steps counted."""
        self.loss_scale = self._initial_loss_scale
        self._stable_steps_count = 0

    def update(self, train_step_info):
        """Applies the rule above to ``train_step_info.all_finite``; returns the new loss scale."""
        self.loss_scale, self._stable_steps_count = dynamic_scale_update(
            self.loss_scale, self._stable_steps_count, train_step_info.all_finite, self.up_scale_window,
            self.min_loss_scale, self.max_loss_scale)
        return self.loss_scale
