"""Helpers shared by onnxtrain.training's onnxruntime-training submodules (optim, amp, the trainer):
``TrainStepInfo`` and the validation error type."""
import math
import numbers


class ConfigError(ValueError, AssertionError):
    """An invalid argument of an optim / amp / TrainStepInfo object, naming it.

    A ValueError; also an AssertionError, because onnxruntime-training validated these arguments
    with ``assert`` and code written for it may catch that.
    """


def check(condition, message):
    """Raises ConfigError(message) unless ``condition``."""
    if not condition:
        raise ConfigError(message)


def is_number(value):
    """A real number that is not a bool (bool is an int in Python)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_number(name, value, minimum=None, strict=False, finite=True):
    """Validates a real-number argument ``name`` (``>= minimum``, or ``> minimum`` when
    ``strict``; not NaN; finite unless ``finite`` is False); returns it as a float."""
    check(is_number(value), f"'{name}' must be a number, got {value!r}")
    value = float(value)
    check(not math.isnan(value), f"'{name}' must not be NaN")
    if finite:
        check(math.isfinite(value), f"'{name}' must be finite, got {value!r}")
    if minimum is not None:
        ok = value > minimum if strict else value >= minimum
        check(ok, f"'{name}' must be {'>' if strict else '>='} {minimum}, got {value!r}")
    return value
