"""onnxruntime-training's ``onnxruntime.training.optim``: optimizer configurations and learning rate
schedulers of the ORTTrainer API. (onnxruntime's torch-side FusedAdam and FP16_Optimizer are not
provided.)"""
from . import lr_scheduler  # noqa: F401
from .config import AdamConfig, LambConfig, SGDConfig, _OptimizerConfig  # noqa: F401
from .lr_scheduler import (ConstantWarmupLRScheduler, CosineWarmupLRScheduler, LinearWarmupLRScheduler,  # noqa: F401
                           PolyWarmupLRScheduler, _LRScheduler)

__all__ = ["AdamConfig", "LambConfig", "SGDConfig", "ConstantWarmupLRScheduler", "CosineWarmupLRScheduler",
           "LinearWarmupLRScheduler", "PolyWarmupLRScheduler"]
