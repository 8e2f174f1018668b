"""``Module``: onnxruntime 1.19's on-device training module over a ``CheckpointState`` — training and
eval steps, gradient accumulation, the parameters as one buffer, and the export of an inference
model. The steps run onnxtrain's C++ Module (``include/onnxtrain/on_device.h``), which reads and
updates the state's own tensors."""
from __future__ import annotations

import os

import numpy as np

from ... import _C
from ...capi._values import OrtValue
from .checkpoint_state import CheckpointState


def _model_arg(uri):
    """A model argument as the C++ side takes it: a path (str) or serialized bytes; None stays None."""
    if uri is None or isinstance(uri, (bytes, bytearray)):
        return bytes(uri) if uri is not None else None
    return os.fspath(uri)


def _array(value, what: str) -> np.ndarray:
    """A numpy array from a numpy array or an OrtValue."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, OrtValue):
        return value.numpy()
    raise ValueError(f"Expected input of type: numpy array or OrtValue, actual: {type(value)} ({what})")


class Module:
    """A training model (and optionally an eval model) made by onnxruntime's ``generate_artifacts``
    (or in its shape), run over ``state``.

    ``module(*inputs)`` runs a training step while ``module.training`` (the default) and an eval
    step after ``module.eval()``. Numpy inputs give numpy outputs; OrtValue inputs give OrtValues;
    one output is returned as it is, several as a tuple."""

    training: bool

    def __init__(self, train_model_uri: os.PathLike | str | bytes, state: CheckpointState,
                 eval_model_uri: os.PathLike | str | bytes | None = None, device: str = "cpu",
                 session_options=None) -> None:
        if not isinstance(state, CheckpointState):
            raise TypeError(f"state must be a CheckpointState, got {type(state)}")
        if device.split(":")[0].lower() != "cpu":
            raise ValueError(f"Module: device '{device}' is not available; onnxtrain's on-device training runs "
                             "on the CPU (its CUDA provider is not built)")
        self.training = True
        self._state = state
        self._device = device
        self._model = _C.Module(_model_arg(train_model_uri), state._state, _model_arg(eval_model_uri),
                                session_options)

    def __call__(self, *user_inputs) -> tuple | np.ndarray | OrtValue:
        """A training step (``self.training``) or an eval step on the user inputs."""
        is_np = any(isinstance(x, np.ndarray) for x in user_inputs)
        arrays = [_array(x, f"input {i}") for i, x in enumerate(user_inputs)]
        fetches = self._model.train_step(arrays) if self.training else self._model.eval_step(arrays)
        if not is_np:
            fetches = [OrtValue.ortvalue_from_numpy(np.asarray(f)) for f in fetches]
        if len(fetches) == 1:
            return fetches[0]
        return tuple(fetches)

    def train(self, mode: bool = True) -> Module:
        """Sets training mode (``mode``) or eval mode; returns the module."""
        self.training = mode
        return self

    def eval(self) -> Module:
        """Sets eval mode; returns the module."""
        return self.train(False)

    def lazy_reset_grad(self) -> None:
        """The next training step overwrites the gradients instead of adding to them."""
        self._model.lazy_reset_grad()

    def reset_grad(self) -> None:
        """onnxruntime 1.13's name of ``lazy_reset_grad``: the next training step overwrites the
        gradients instead of adding to them."""
        self.lazy_reset_grad()

    def save_checkpoint(self, ckpt_uri: str | os.PathLike) -> None:
        """onnxruntime 1.13's ``Module.save_checkpoint``: writes the module's state (its parameters
        and properties, without optimizer state) to ``ckpt_uri``, as
        ``CheckpointState.save_checkpoint(state, ckpt_uri)`` does."""
        CheckpointState.save_checkpoint(self._state, ckpt_uri)

    def get_contiguous_parameters(self, trainable_only: bool = False) -> OrtValue:
        """The parameters as one float32 vector (an OrtValue), in the training model's input order."""
        return OrtValue.ortvalue_from_numpy(self._model.copy_parameters_to_buffer(trainable_only))

    def get_parameters_size(self, trainable_only: bool = True) -> int:
        """Number of parameter elements (the trainable ones, or all)."""
        return self._model.get_parameters_size(trainable_only)

    def copy_buffer_to_parameters(self, buffer: OrtValue | np.ndarray, trainable_only: bool = True) -> None:
        """Copies a float32 vector (``get_contiguous_parameters``' layout) into the parameters; on a
        nominal state with ``trainable_only=False`` this gives every parameter its value."""
        self._model.copy_buffer_to_parameters(np.ascontiguousarray(_array(buffer, "buffer")), trainable_only)

    def export_model_for_inferencing(self, inference_model_uri: str | os.PathLike,
                                     graph_output_names: list[str]) -> None:
        """Writes the eval model with the trained parameters as initializers and ``graph_output_names``
        as its outputs."""
        if isinstance(graph_output_names, str):
            graph_output_names = [graph_output_names]
        self._model.export_model_for_inferencing(os.fspath(inference_model_uri), list(graph_output_names))

    def input_names(self) -> list[str]:
        """The user inputs of the training model (``self.training``) or of the eval model."""
        return self._model.input_names(self.training)

    def output_names(self) -> list[str]:
        """The user outputs of the training model (``self.training``) or of the eval model."""
        return self._model.output_names(self.training)
