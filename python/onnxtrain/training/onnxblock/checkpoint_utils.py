"""onnxblock's checkpoint functions over onnxruntime's checkpoint format (ODTC)."""
import os

import onnx

from ... import _C


def save_checkpoint(parameters, path_to_checkpoint, nominal_checkpoint=False):
    """Writes ``parameters`` — (trainable, frozen) lists of onnx.TensorProto, as
    TrainingBlock.parameters() returns them — to ``path_to_checkpoint`` (atomically); with
    ``nominal_checkpoint`` only their names, types and shapes."""
    if not isinstance(parameters, tuple) or len(parameters) != 2:
        raise RuntimeError("save_checkpoint: parameters must be (trainable, frozen) lists of onnx.TensorProto")
    state = _C.CheckpointState()
    for protos, requires_grad in ((parameters[0], True), (parameters[1], False)):
        for p in protos or []:
            state.add_parameter(p.name, onnx.numpy_helper.to_array(p), requires_grad)
    state.nominal = bool(nominal_checkpoint)
    state.save(os.fspath(path_to_checkpoint))


def load_checkpoint_to_model(path_to_checkpoint, model, external_data_path=None):
    """Copies the parameter values of the checkpoint into the initializers of ``model`` (an
    onnx.ModelProto) of the same names, in place."""
    if external_data_path is not None:
        raise NotImplementedError("load_checkpoint_to_model: external_data_path is not implemented by onnxtrain")
    state = _C.CheckpointState.load(os.fspath(path_to_checkpoint))
    names = set(state.parameter_names())
    for i, init in enumerate(model.graph.initializer):
        if init.name in names:
            model.graph.initializer[i].CopyFrom(onnx.numpy_helper.from_array(state.parameter_data(init.name), init.name))
