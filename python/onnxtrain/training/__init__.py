"""onnxtrain.training — onnxruntime-training's ``onnxruntime.training`` (reachable under that name
through the alias): ``ORTTrainer`` with ``ORTTrainerOptions``, ``optim`` (optimizer configs, LR
schedulers), ``amp`` (loss scalers), ``TrainStepInfo``, ``checkpoint`` (state dicts and checkpoint
files), ``experimental.export_gradient_graph``; ``TrainingParameters`` /
``TrainingSession`` (onnxruntime-training's contract); onnxcustom's loss builder
``add_loss_output`` and ``get_train_initializer``."""
from . import amp, checkpoint, experimental, optim  # noqa: F401
from ._session import TrainingParameters, TrainingSession, add_loss_output, get_train_initializer  # noqa: F401
from ._step_info import TrainStepInfo  # noqa: F401
from .orttrainer import ORTTrainer  # noqa: F401
from .orttrainer_options import ORTTrainerOptions, PropagateCastOpsStrategy  # noqa: F401

__all__ = ["ORTTrainer", "ORTTrainerOptions", "PropagateCastOpsStrategy", "TrainStepInfo", "optim", "amp", "checkpoint", "experimental",
           "TrainingParameters", "TrainingSession", "add_loss_output", "get_train_initializer"]
