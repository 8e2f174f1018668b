"""Learning rate schedulers of onnxruntime-training's ORTTrainer (``onnxruntime.training.optim.lr_scheduler``).

Each scheduler computes the learning rate of a train step from ``TrainStepInfo``:
``lr = optimizer_config.lr * factor(optimization_step)``, with onnxruntime's (Hugging Face
Transformers') warm-up formulas. ``num_warmup_steps = warmup * total_steps`` (a float); during
warm-up (``step < num_warmup_steps``) the factor is ``step / max(1, num_warmup_steps)``.
"""
import math

from .._utils import check, check_number, is_int


class _LRScheduler:
    """Base class of learning rate schedulers (onnxruntime-training's ``optim.lr_scheduler._LRScheduler``).

    Subclasses implement ``get_lr(train_step_info)``; the trainer calls ``_step`` every step and
    feeds its result. Only the default learning rate is scheduled (one-element lists).
    """

    def __init__(self):
        self._last_lr = []

    def _step(self, train_step_info):
        """Computes the learning rate of this step, remembers it and returns it (a list)."""
        new_lr = self.get_lr(train_step_info)
        self._last_lr = new_lr
        return new_lr

    def get_lr(self, train_step_info):
        """``[learning rate]`` of the step described by ``train_step_info`` (a TrainStepInfo)."""
        raise NotImplementedError

    def get_last_lr(self):
        """The list the last ``_step`` returned ([] before the first step)."""
        return self._last_lr


def _check_common(total_steps, warmup):
    check(is_int(total_steps) and total_steps > 0, f"'total_steps' must be a strict positive int, got {total_steps!r}")
    check(check_number("warmup", warmup, minimum=0) < 1, f"'warmup' must be a float in [0, 1), got {warmup!r}")
    return int(total_steps), float(warmup)


class _WarmupLRScheduler(_LRScheduler):
    """Shared warm-up part: ``step / max(1, num_warmup_steps)`` while ``step < num_warmup_steps``."""

    def __init__(self, total_steps, warmup=0.002):
        super().__init__()
        self.total_steps, self.warmup = _check_common(total_steps, warmup)
        self._num_warmup_steps = self.warmup * self.total_steps

    def _factor(self, step, lr):
        raise NotImplementedError

    def get_lr(self, train_step_info):
        lr = train_step_info.optimizer_config.lr
        step = train_step_info.optimization_step
        if step < self._num_warmup_steps:
            return [lr * (float(step) / float(max(1, self._num_warmup_steps)))]
        return [lr * self._factor(step, lr)]


class ConstantWarmupLRScheduler(_WarmupLRScheduler):
    """Linear warm-up from 0 to the optimizer's lr, then constant.

    Args: ``total_steps`` (int > 0), ``warmup`` (float in [0, 1), default 0.002: fraction of
    ``total_steps`` for warm-up).
    """

    def _factor(self, step, lr):
        return 1.0


class CosineWarmupLRScheduler(_WarmupLRScheduler):
    """Linear warm-up, then ``0.5 * (1 + cos(pi * cycles * 2 * progress))`` (at least 0), where
    ``progress = (step - num_warmup_steps) / max(1, total_steps - num_warmup_steps)``.

    Args:
        total_steps (int): total training steps (> 0).
        cycles (float, default 0.5): cosine waves (0.5: a half cosine from lr to 0); > 0.
        warmup (float, default 0.002): fraction of ``total_steps`` for warm-up, in [0, 1).
    """

    def __init__(self, total_steps, cycles=0.5, warmup=0.002):
        super().__init__(total_steps, warmup)
        self.cycles = check_number("cycles", cycles, minimum=0, strict=True)

    def _factor(self, step, lr):
        progress = float(step - self._num_warmup_steps) / float(max(1, self.total_steps - self._num_warmup_steps))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * self.cycles * 2.0 * progress)))


class LinearWarmupLRScheduler(_WarmupLRScheduler):
    """Linear warm-up, then linear decay to 0 at ``total_steps``:
    ``max(0, total_steps - step) / max(1, total_steps - num_warmup_steps)``.

    Args: as ConstantWarmupLRScheduler (``total_steps``, ``warmup``).
    """

    def _factor(self, step, lr):
        return max(0.0, float(self.total_steps - step) / float(max(1, self.total_steps - self._num_warmup_steps)))


class PolyWarmupLRScheduler(_WarmupLRScheduler):
    """Linear warm-up, then polynomial decay from the optimizer's lr to ``lr_end``:
    ``(lr - lr_end) * (1 - (step - num_warmup_steps) / (total_steps - num_warmup_steps)) ** power + lr_end``,
    and ``lr_end`` after ``total_steps``. The optimizer's lr must exceed ``lr_end``.

    Args:
        total_steps (int): total training steps (> 0).
        lr_end (float, default 1e-7): final learning rate (>= 0).
        power (float, default 1.0): polynomial power (>= 0).
        warmup (float, default 0.002): fraction of ``total_steps`` for warm-up, in [0, 1).
    """

    def __init__(self, total_steps, lr_end=1e-7, power=1.0, warmup=0.002):
        super().__init__(total_steps, warmup)
        self.lr_end = check_number("lr_end", lr_end, minimum=0)
        self.power = check_number("power", power, minimum=0)

    def get_lr(self, train_step_info):
        lr = train_step_info.optimizer_config.lr
        check(lr > self.lr_end, f"'lr_end' ({self.lr_end}) must be smaller than the initial lr ({lr})")
        return super().get_lr(train_step_info)

    def _factor(self, step, lr):
        if step > self.total_steps:
            return self.lr_end / lr
        decay_steps = self.total_steps - self._num_warmup_steps
        pct_remaining = 1 - (step - self._num_warmup_steps) / decay_steps
        return ((lr - self.lr_end) * pct_remaining ** self.power + self.lr_end) / lr
