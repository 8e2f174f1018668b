"""onnxruntime-training's ``onnxruntime.training.onnxblock`` (reachable under that name through the
alias): building ONNX training graphs from blocks. ``base(model)`` / ``empty_base()`` open a model
that blocks append to; ``blocks`` holds the building blocks (``Add``, ``Sub``, ``Mul``, ``Div``,
``Pow``, ``ReduceMean``, ``ReduceSum``, ``Sigmoid``, ``Log``, ``Neg``, ``Abs``, ``Constant``,
``Cast``, ``Linear``, ``PassThrough``, ``InputLike``, ...); ``loss`` the losses (``MSELoss``,
``CrossEntropyLoss``, ``BCEWithLogitsLoss``, ``L1Loss``); ``optim`` the optimizers (``AdamW``,
``SGD``, ``ClipGradNorm``). A ``TrainingBlock`` differentiates what its ``build`` returns with
onnxtrain's gradient builder and lays the training and eval models out as onnxruntime does
(``to_model_proto``); ``save_checkpoint`` writes its parameters in onnxruntime's checkpoint format.
"""
from . import blocks, loss, optim  # noqa: F401
from .blocks import Block  # noqa: F401
from .checkpoint_utils import load_checkpoint_to_model, save_checkpoint  # noqa: F401
from .model_accessor import base, custom_op_library, empty_base  # noqa: F401
from .onnxblock import ForwardBlock, TrainingBlock  # noqa: F401

__all__ = ["Block", "ForwardBlock", "TrainingBlock", "base", "blocks", "custom_op_library", "empty_base",
           "load_checkpoint_to_model", "loss", "optim", "save_checkpoint"]
