"""onnxtrain.sklearn: onnxcustom's training classes as scikit-learn-style estimators, native in
onnxtrain — OrtGradientOptimizer (a TrainingSession, epochs run by the C++ Trainer),
OrtGradientForwardBackwardOptimizer (TrainingAgent forward/backward plus ONNX losses, penalties
and weight updates), the building blocks (learning losses, penalties, learning rates),
OrtDataLoader, ConvergenceError, and ``to_onnx``, a converter for the scikit-learn models they
train. See docs/sklearn.md."""
from .convert import to_onnx
from .data_loader import OrtDataLoader
from .excs import ConvergenceError, EvaluationError
from .optimizers import OrtGradientOptimizer
from .sgd_learning_loss import (AbsoluteLearningLoss, BaseLearningLoss, ElasticLearningLoss, NegLogLearningLoss,
                                SquareLearningLoss)
from .sgd_learning_penalty import BaseLearningPenalty, ElasticLearningPenalty, NoLearningPenalty
from .sgd_learning_rate import BaseLearningRate, LearningRateSGD, LearningRateSGDNesterov

__all__ = ["OrtGradientOptimizer", "OrtGradientForwardBackwardOptimizer", "OrtDataLoader", "ConvergenceError",
           "EvaluationError", "BaseLearningLoss", "SquareLearningLoss", "AbsoluteLearningLoss", "ElasticLearningLoss",
           "NegLogLearningLoss", "BaseLearningPenalty", "NoLearningPenalty", "ElasticLearningPenalty",
           "BaseLearningRate", "LearningRateSGD", "LearningRateSGDNesterov", "to_onnx"]


def __getattr__(name):
    # The forward/backward optimizer needs the TrainingAgent core: imported on first use.
    if name == "OrtGradientForwardBackwardOptimizer":
        from .optimizers_partial import OrtGradientForwardBackwardOptimizer
        return OrtGradientForwardBackwardOptimizer
    raise AttributeError(f"module 'onnxtrain.sklearn' has no attribute {name!r}")
