"""Loss scalers of onnxruntime-training's ORTTrainer (``onnxruntime.training.amp``). The dynamic
rule and its state live in C++ (``_C.LossScaleState``); ``DynamicLossScaler`` is a view of one,
and shares the TrainingSession's own when ORTTrainer runs it (one scaler, not two)."""
from ... import _C
from .._utils import check, check_number, is_int


def new_scale_state(loss_scale, up_scale_window, min_loss_scale, max_loss_scale, dynamic=True):
    """A ``_C.LossScaleState`` — onnxruntime's dynamic loss-scale rule, implemented once in C++
    (``include/onnxtrain/step_driver.h``) — holding these settings, at ``loss_scale``."""
    state = _C.LossScaleState()
    state.scale = state.initial_scale = float(loss_scale)
    state.up_scale_window = int(up_scale_window)
    state.min_scale = float(min_loss_scale)
    state.max_scale = float(max_loss_scale)
    state.dynamic = bool(dynamic)
    return state


def share_scale_state(own, shared):
    """Makes ``shared`` (a TrainingSession's ``loss_scaler``) take the settings and current values of
    ``own`` as a dynamic scaler, validates it and returns it: the scaler that held ``own`` keeps
    ``shared`` instead, and the session applies the rule at each update step."""
    for field in ("initial_scale", "up_scale_window", "min_scale", "max_scale", "scale", "stable_steps"):
        setattr(shared, field, getattr(own, field))
    shared.dynamic = True
    shared.validate()
    return shared


def _state_field(field, doc, checked):
    """A property reading and writing ``self._state.<field>`` (values passed through ``checked``)."""
    return property(lambda self: getattr(self._state, field),
                    lambda self, value: setattr(self._state, field, checked(value)), doc=doc)


def _checked_window(value):
    check(is_int(value) and value >= 1, f"'up_scale_window' must be an int >= 1, got {value!r}")
    return int(value)


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
        self._state = _C.LossScaleState()  # the rule's state in C++; settings filled in below
        super().__init__(loss_scale)
        check(isinstance(automatic_update, bool), f"'automatic_update' must be a bool, got {automatic_update!r}")
        up_scale_window = _checked_window(up_scale_window)
        min_loss_scale = check_number("min_loss_scale", min_loss_scale, minimum=0, strict=True)
        max_loss_scale = check_number("max_loss_scale", max_loss_scale, minimum=0, strict=True)
        check(max_loss_scale >= min_loss_scale,
              f"'max_loss_scale' ({max_loss_scale}) must be >= 'min_loss_scale' ({min_loss_scale})")
        self.automatic_update = automatic_update
        self._state.up_scale_window = int(up_scale_window)
        self._state.min_scale = min_loss_scale
        self._state.max_scale = max_loss_scale
        self._state.initial_scale = self._state.scale

    # Every setting and counter is the C++ state's (shared with a TrainingSession once attached).
    loss_scale = _state_field("scale", "The current loss scale (float).",
                              lambda v: check_number("loss_scale", v, minimum=0, strict=True))
    up_scale_window = _state_field("up_scale_window", "Finite steps in a row before the scale doubles.",
                                   _checked_window)
    min_loss_scale = _state_field("min_scale", "Lower bound when halving.",
                                  lambda v: check_number("min_loss_scale", v, minimum=0, strict=True))
    max_loss_scale = _state_field("max_scale", "Upper bound when doubling.",
                                  lambda v: check_number("max_loss_scale", v, minimum=0, strict=True))

    @property
    def _stable_steps_count(self):
        return self._state.stable_steps

    def reset(self):
        """Back to the initial loss scale, with no stable steps counted."""
        self._state.reset()

    def update(self, train_step_info):
        """Applies the rule above to ``train_step_info.all_finite``; returns the new loss scale."""
        self._state.update(bool(train_step_info.all_finite))
        return self.loss_scale

    def _attach(self, state):
        """Makes ``state`` (a TrainingSession's ``loss_scaler``) this scaler's state (share_scale_state):
        from then on this object reads and writes the session's scaler."""
        self._state = share_scale_state(self._state, state)
