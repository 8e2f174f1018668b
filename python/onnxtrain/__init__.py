"""onnxtrain: train ONNX models on CPU.

Drop-in names from onnxruntime / onnxruntime-training: ``InferenceSession``, ``SessionOptions``,
``TrainingSession``, ``TrainingParameters``. ``Trainer`` runs the training loop (epochs, shuffled
batches, validation, exact checkpoints) over a TrainingSession.
"""
import os as _os

# Sleeping rather than spinning OpenMP waits (see tools/main.cpp): libgomp reads this when it is
# loaded, so it applies when onnxtrain is imported before anything else that loads libgomp.
if "OMP_WAIT_POLICY" not in _os.environ and "GOMP_SPINCOUNT" not in _os.environ:
    _os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

from ._errors import (EngineError, EPFail, Fail, InvalidArgument, InvalidGraph, InvalidModel, InvalidProtobuf,
                      ModelFileError, ModelLoaded, NoModel, NoSuchFile, NotImplemented, OnnxTrainError,
                      RuntimeException, UnsupportedError)
from ._C import (EvalResult, FitResult, NodeArg, Objective, SessionOptions, Trainer, TrainerOptions, TrainRecord,
                 loss_names, lr_schedule_names, optimizer_hyperparameters, optimizer_names)
from .gradient import GradientGraphBuilder
from .session import InferenceSession, get_all_providers, get_available_providers
from .training import TrainingParameters, TrainingSession, add_loss_output, get_train_initializer

__version__ = "0.1.0"


def get_device():
    """Device this build computes on."""
    return "CPU"


__all__ = [
    "InferenceSession", "SessionOptions", "GradientGraphBuilder", "TrainingParameters", "TrainingSession",
    "add_loss_output", "get_train_initializer", "NodeArg", "get_available_providers", "get_all_providers",
    "get_device", "OnnxTrainError", "InvalidArgument", "InvalidModel", "InvalidGraph",
    "UnsupportedError", "ModelFileError", "Trainer", "TrainerOptions", "Objective", "EvalResult", "FitResult",
    "TrainRecord", "optimizer_names", "loss_names", "lr_schedule_names", "optimizer_hyperparameters",
]
