"""Names and graph outputs for the blocks."""
import itertools

import onnx

_COUNTER = itertools.count()


def generate_graph_name(token):
    """A fresh name, ``onnx::<token>::<n>`` as onnxruntime's blocks name their values."""
    return f"onnx::{token}::{next(_COUNTER)}"


def value_info_of(model, name):
    """The ValueInfoProto declaring ``name`` (inputs, outputs, value_info), or None."""
    for v in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        if v.name == name:
            return v
    return None


def node_arg_exists(model, name):
    """Whether ``name`` is a value of the model's graph."""
    if value_info_of(model, name) is not None or any(i.name == name for i in model.graph.initializer):
        return True
    return any(name in n.output for n in model.graph.node)


def register_graph_outputs(model, output_names):
    """Makes ``output_names`` (a name or a list) the graph's outputs, typed where the model knows."""
    if isinstance(output_names, str):
        output_names = [output_names]
    outputs = []
    for name in output_names:
        known = value_info_of(model, name)
        outputs.append(known if known is not None else onnx.helper.make_empty_tensor_value_info(name))
    outputs = [onnx.ValueInfoProto.FromString(o.SerializeToString()) for o in outputs]
    del model.graph.output[:]
    model.graph.output.extend(outputs)
