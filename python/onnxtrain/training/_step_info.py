"""TrainStepInfo: what the ORTTrainer tells learning-rate schedulers and loss scalers about the
current step (its own module: it depends on ``optim.config``, which depends on ``_utils``)."""
from ._utils import check, is_int
from .optim.config import _OptimizerConfig


def _is_optimizer_config(value):
    return isinstance(value, _OptimizerConfig)


def _validated_field(name, valid, what):
    """A property whose assignment raises ConfigError naming ``name`` unless ``valid(value)``."""
    def get(self):
        return getattr(self, "_" + name)

    def set_(self, value):
        check(valid(value), f"'{name}' must be {what}, got {value!r}")
        setattr(self, "_" + name, value)

    return property(get, set_, doc=f"{name} ({what}); validated on assignment.")


class TrainStepInfo:
    """Runtime information of the current train step (onnxruntime-training's TrainStepInfo).

    The trainer updates it after every step and passes it to ``_LRScheduler.get_lr`` and
    ``LossScaler.update``.

    Args:
        optimizer_config (optim._OptimizerConfig): the trainer's optimizer config.
        all_finite (bool, default True): whether every gradient of the last step was finite.
        fetches (list of str, default []): output names train_step / eval_step return ([]: all).
        optimization_step (int, default 0): optimizer updates done; drives LR scheduling.
        step (int, default 0): train steps done; drives gradient accumulation.

    Every field is validated when constructed and when assigned (ValueError naming it).
    """

    def __init__(self, optimizer_config, all_finite=True, fetches=None, optimization_step=0, step=0):
        self.optimizer_config = optimizer_config
        self.all_finite = all_finite
        self.fetches = [] if fetches is None else fetches
        self.optimization_step = optimization_step
        self.step = step

    optimizer_config = _validated_field("optimizer_config", _is_optimizer_config, "an optim._OptimizerConfig")
    all_finite = _validated_field("all_finite", lambda v: isinstance(v, bool), "a bool")
    fetches = _validated_field("fetches", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                               "a list of str")
    optimization_step = _validated_field("optimization_step", lambda v: is_int(v) and v >= 0, "an int >= 0")
    step = _validated_field("step", lambda v: is_int(v) and v >= 0, "an int >= 0")

    def __repr__(self):
        return (f"TrainStepInfo(optimizer_config={self.optimizer_config.name}, all_finite={self.all_finite}, "
                f"fetches={self.fetches!r}, optimization_step={self.optimization_step}, step={self.step})")
