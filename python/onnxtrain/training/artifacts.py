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


def _kind(value, enum, what):
    """The enum member's name, "" for None, None for an onnxblock block; RuntimeError otherwise."""
    if value is None:
        return ""
    if isinstance(value, enum):
        return value.name
    if _is_block(value):
        return None
    raise RuntimeError(f"Unknown {what} provided {type(value)}. Expected {what} to be of type "
                       f"onnxruntime.training.artifacts.{enum.__name__} or onnxruntime.training.onnxblock.Block.")


def _with_loss_block(data, block, loss_inputs):
    """(the model with ``block`` stacked on its outputs — or on ``loss_inputs`` —, [loss name])."""
    import onnx

    from . import onnxblock
    model = onnx.load_from_string(data)
    with onnxblock.base(model) as accessor:
        out = block(*(loss_inputs or [o.name for o in model.graph.output]))
        built = accessor.model
    first = out if isinstance(out, str) else out[0]
    return built.SerializeToString(), [first]


def _write_optimizer_block(data, block, requires_grad, path):
    """Builds the optimizer block over the trained parameters in a new model; writes it atomically."""
    import onnx

    from .. import _files
    from . import onnxblock
    model = onnx.ModelProto.FromString(data)
    trainable = [p for p in model.graph.initializer if p.name in set(requires_grad)]
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    with onnxblock.empty_base(opset_version=opset) as accessor:
        block((trainable, []))
        optimizer_model = accessor.model
    _files.write_bytes(os.fspath(path), optimizer_model.SerializeToString(), "optimizer model")


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
    ``loss``: a ``LossType``, an onnxblock block (called on the model's outputs, or on
    ``loss_input_names``; its first output is the loss) or None (the model's first output, or
    ``loss_input_names[0]``, is the loss). ``optimizer``: an ``OptimType``, an onnxblock optimizer
    block (``onnxblock.optim.AdamW(...)``) or None. ``additional_output_names``: values returned after
    the loss. ``loss_input_names``: the output(s) the loss takes. ``ort_format`` and
    ``custom_op_library`` raise ``NotImplementedError`` naming them."""
    if ort_format:
        raise NotImplementedError("generate_artifacts: ort_format=True (ORT format models) is not implemented by "
                                  "onnxtrain; its artifacts are ONNX models")
    if custom_op_library is not None:
        raise NotImplementedError("generate_artifacts: custom_op_library is not implemented by onnxtrain (it loads no "
                                  "custom operator libraries)")
    loss_name = _kind(loss, LossType, "loss")
    optimizer_name = _kind(optimizer, OptimType, "optimizer")
    if additional_output_names is not None and not isinstance(additional_output_names, list):
        raise RuntimeError(f"Unknown type provided for additional output names {type(additional_output_names)}. "
                           "Expected additional output names to be a list of strings.")
    if not isinstance(prefix, str):
        raise TypeError(f"generate_artifacts: prefix must be a str, got {type(prefix).__name__}")
    data, base_dir = _model_bytes(model)
    loss_inputs = _names(loss_input_names, "loss_input_names")
    if loss_name is None:  # an onnxblock block: stacked on the model, its first output is the loss
        data, loss_inputs = _with_loss_block(data, loss, loss_inputs)
        loss_name = ""
    o = _C.ArtifactOptions()
    o.requires_grad = _names(requires_grad, "requires_grad")
    o.frozen_params = _names(frozen_params, "frozen_params")
    o.loss, o.optimizer = loss_name, optimizer_name or ""
    o.additional_output_names = _names(additional_output_names, "additional_output_names")
    o.loss_input_names = loss_inputs
    o.update_batchnorm_statistics = bool(update_batchnorm_statistics)
    o.base_dir = base_dir
    made = _C.make_artifacts(data, o)
    directory = pathlib.Path(os.getcwd() if artifact_directory is None else os.fsdecode(artifact_directory))
    directory.mkdir(parents=True, exist_ok=True)
    made.save(str(directory), prefix, bool(nominal_checkpoint))
    if optimizer_name is None:
        _write_optimizer_block(data, optimizer, o.requires_grad, directory / f"{prefix}optimizer_model.onnx")
    own = made.onnxtrain_operators
    if own:
        warnings.warn(f"generate_artifacts: the training model uses onnxtrain's operators {own} (com.onnxtrain) for "
                      "gradients onnxruntime has no operator for: onnxtrain runs these artifacts, onnxruntime does not",
                      RuntimeWarning, stacklevel=2)
    logging.getLogger(__name__).info("Saved the training artifacts to %s", directory)


__all__ = ["LossType", "OptimType", "generate_artifacts", "USE_PATH_THRESHOLD"]
