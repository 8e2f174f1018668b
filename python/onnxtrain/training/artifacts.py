"""onnxruntime-training's ``onnxruntime.training.artifacts`` (reachable under that name through the
alias): ``generate_artifacts`` writes the on-device training artifacts of an ONNX model — the
training, eval and optimizer models and the checkpoint, in the layout onnxruntime 1.15-1.19 writes
(``docs/on-device.md``) — that ``onnxtrain.training.api`` and onnxruntime's runtime both run.

The gradients come from onnxtrain's own rules (``include/onnxtrain/artifacts.h``), so models
onnxruntime could not differentiate get artifacts too; where a gradient needs an operator
onnxruntime does not have, the artifacts use onnxtrain's (``com.onnxtrain``) and a warning names
them: onnxtrain runs such artifacts, onnxruntime does not. BatchNormalization statistics that are
``frozen_params`` are updated by training-mode steps (``update_batchnorm_statistics=False``: never,
as in onnxruntime).
"""
import logging
import os
import pathlib
import warnings
from enum import Enum

from .. import _C

USE_PATH_THRESHOLD = 2147483648  # a ModelProto larger than this must be given by path, as in onnxruntime


class LossType(Enum):
    """Loss added on the model's output (reduction mean): MSE, L1 and BCEWithLogits add the input
    ``target`` shaped like the scores, CrossEntropy adds ``labels`` (int64 class indices)."""

    MSELoss = 1
    CrossEntropyLoss = 2
    BCEWithLogitsLoss = 3
    L1Loss = 4


class OptimType(Enum):
    """Optimizer model: AdamW (onnxruntime's defaults: betas (0.9, 0.999), eps 1e-6, no weight decay,
    bias correction) or SGD."""

    AdamW = 1
    SGD = 2


def _is_block(obj):
    return any(c.__name__ == "Block" for c in type(obj).__mro__)


def _model_bytes(model):
    """(serialized model, folder of its external data)."""
    if isinstance(model, bytes):  # a serialized ModelProto
        return model, ""
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        with open(path, "rb") as f:
            return f.read(), os.path.dirname(os.path.abspath(path))
    if hasattr(model, "SerializeToString") and hasattr(model, "ByteSize"):
        if model.ByteSize() > USE_PATH_THRESHOLD:
            raise RuntimeError("This model is > 2GB. Please pass in a path to the ONNX file instead.")
        return model.SerializeToString(), ""
    raise TypeError(f"generate_artifacts: model must be an onnx.ModelProto or a path, got {type(model).__name__}")


def _names(value, what):
    if value is None:
        return []
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"generate_artifacts: {what} must be a list of names, got {value!r}")
    return list(value)


def generate_artifacts(model, requires_grad=None, frozen_params=None, loss=None, optimizer=None,
                       artifact_directory=None, prefix="", ort_format=False, custom_op_library=None,
                       additional_output_names=None, nominal_checkpoint=False, loss_input_names=None,
                       *, update_batchnorm_statistics=True):
    """Writes ``<prefix>training_model.onnx``, ``<prefix>eval_model.onnx``, ``<prefix>checkpoint``
    (with ``nominal_checkpoint``, ``<prefix>nominal_checkpoint`` too) and, with an ``optimizer``,
    ``<prefix>optimizer_model.onnx`` into ``artifact_directory`` (the working folder when None;
    created when missing).

    ``model``: an ``onnx.ModelProto``, a path (models over 2 GB by path) or serialized bytes. ``requires_grad``: the
    initializers to train; ``frozen_params``: initializers held by the checkpoint but not trained.
    ``loss``: a ``LossType`` or None (the model's first output, or ``loss_input_names[0]``, is the
    loss). ``optimizer``: an ``OptimType`` or None. ``additional_output_names``: values returned
    after the loss. ``loss_input_names``: the output the loss scores. ``ort_format``,
    ``custom_op_library`` and onnxblock blocks as ``loss`` / ``optimizer`` raise
    ``NotImplementedError`` naming them."""
    if ort_format:
        raise NotImplementedError("generate_artifacts: ort_format=True (ORT format models) is not implemented by "
                                  "onnxtrain; its artifacts are ONNX models")
    if custom_op_library is not None:
        raise NotImplementedError("generate_artifacts: custom_op_library is not implemented by onnxtrain (it loads no "
                                  "custom operator libraries)")
    if loss is None:
        loss_name = ""
    elif isinstance(loss, LossType):
        loss_name = loss.name
    elif _is_block(loss):
        raise NotImplementedError("generate_artifacts: an onnxblock block as the loss is not implemented yet; use a "
                                  "LossType or a model whose first output is the loss")
    else:
        raise RuntimeError(f"Unknown loss provided {type(loss)}. Expected loss to be of type "
                           "onnxruntime.training.artifacts.LossType or onnxruntime.training.onnxblock.Block.")
    if optimizer is None:
        optimizer_name = ""
    elif isinstance(optimizer, OptimType):
        optimizer_name = optimizer.name
    elif _is_block(optimizer):
        raise NotImplementedError("generate_artifacts: an onnxblock block as the optimizer is not implemented yet; "
                                  "use an OptimType")
    else:
        raise RuntimeError(f"Unknown optimizer provided {type(optimizer)}. Expected optimizer to be of type "
                           "onnxruntime.training.artifacts.OptimType or onnxruntime.training.onnxblock.Block.")
    if additional_output_names is not None and not isinstance(additional_output_names, list):
        raise RuntimeError(f"Unknown type provided for additional output names {type(additional_output_names)}. "
                           "Expected additional output names to be a list of strings.")
    if not isinstance(prefix, str):
        raise TypeError(f"generate_artifacts: prefix must be a str, got {type(prefix).__name__}")
    data, base_dir = _model_bytes(model)
    directory = pathlib.Path(os.getcwd() if artifact_directory is None else os.fsdecode(artifact_directory))
    directory.mkdir(parents=True, exist_ok=True)
    own = _C.generate_artifacts(data, _names(requires_grad, "requires_grad"), _names(frozen_params, "frozen_params"),
                                loss_name, optimizer_name, _names(additional_output_names, "additional_output_names"),
                                _names(loss_input_names, "loss_input_names"), bool(update_batchnorm_statistics),
                                base_dir, str(directory), prefix, bool(nominal_checkpoint))
    if own:
        warnings.warn(f"generate_artifacts: the training model uses onnxtrain's operators {own} (com.onnxtrain) for "
                      "gradients onnxruntime has no operator for: onnxtrain runs these artifacts, onnxruntime does not",
                      RuntimeWarning, stacklevel=2)
    logging.getLogger(__name__).info("Saved the training artifacts to %s", directory)


__all__ = ["LossType", "OptimType", "generate_artifacts", "USE_PATH_THRESHOLD"]
