"""onnxblock's optimizer blocks, built inside ``empty_base()`` and called with a TrainingBlock's
``parameters()``: the optimizer model onnxruntime's on-device Optimizer runs (inputs
``learning_rate``, ``step``, ``params``, ``gradients``, ``first_order_moments`` [,
``second_order_moments``] as sequences of tensors; one com.microsoft optimizer node; a bool update
flag as output)."""
import onnx

from .. import _graph_utils, blocks

_MS = "com.microsoft"


def _trainable(parameters):
    trainable = parameters[0] if isinstance(parameters, tuple) else parameters
    if not trainable:
        raise RuntimeError("onnxblock optimizer: there is no trainable parameter")
    return trainable


def _inputs(model, parameters, moments):
    dtype = _trainable(parameters)[0].data_type
    model.graph.input.extend([onnx.helper.make_tensor_value_info("learning_rate", onnx.TensorProto.FLOAT, [1]),
                              onnx.helper.make_tensor_value_info("step", onnx.TensorProto.INT64, [1])])
    names = ["params", "gradients", "first_order_moments", "second_order_moments"][:2 + moments]
    model.graph.input.extend(onnx.helper.make_tensor_sequence_value_info(n, dtype, None) for n in names)
    return names


def _finish(model, node, flag):
    model.graph.node.append(node)
    model.graph.output.append(onnx.helper.make_tensor_value_info(flag, onnx.TensorProto.BOOL, [1]))
    return flag


class ClipGradNorm(blocks.Block):
    """The gradients (a sequence) scaled so that their joint Frobenius norm is at most
    ``max_norm`` (com.microsoft InplaceClipGradNorm)."""

    def __init__(self, max_norm):
        super().__init__()
        self._max_norm = float(max_norm)

    def build(self, gradients_name):
        out = _graph_utils.generate_graph_name("clip_grad_norm_output")
        self.base.graph.node.append(onnx.helper.make_node(
            "InplaceClipGradNorm", [gradients_name], [out], name=_graph_utils.generate_graph_name("ClipGradNorm"),
            domain=_MS, max_norm=self._max_norm, norm_type="fro"))
        return out


class AdamW(blocks.Block):
    """AdamWOptimizer (mode 1, Hugging Face's): betas, eps, weight_decay, bias correction;
    ``clip_grad`` a ClipGradNorm applied to the gradients first."""

    def __init__(self, bias_correction=True, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, clip_grad=None):
        super().__init__()
        self._attrs = dict(alpha=float(betas[0]), beta=float(betas[1]), epsilon=float(eps),
                           weight_decay=float(weight_decay), correct_bias=1 if bias_correction else 0, adam_mode=1)
        self._clip = clip_grad

    def build(self, parameters):
        model = self.base
        model.graph.name = "AdamW Optimizer Model"
        lr, step, params, grads, m1, m2 = ["learning_rate", "step"] + _inputs(model, parameters, 2)
        if self._clip is not None:
            grads = self._clip(grads)
        flag = _graph_utils.generate_graph_name("adamw.updated_flag")
        node = onnx.helper.make_node("AdamWOptimizer", [lr, step, params, grads, m1, m2], [flag],
                                     name=_graph_utils.generate_graph_name("AdamWOptimizer"), domain=_MS, **self._attrs)
        return _finish(model, node, flag)


class SGD(blocks.Block):
    """SGDOptimizerV2 (w -= lr * g); ``clip_grad`` a ClipGradNorm applied to the gradients first.
    The model declares the step and one moment, as onnxruntime's does (neither is read)."""

    def __init__(self, clip_grad=None):
        super().__init__()
        self._clip = clip_grad

    def build(self, parameters):
        model = self.base
        model.graph.name = "SGD Optimizer Model"
        lr, _, params, grads, _ = ["learning_rate", "step"] + _inputs(model, parameters, 1)
        if self._clip is not None:
            grads = self._clip(grads)
        flag = _graph_utils.generate_graph_name("sgd.updated_flag")
        node = onnx.helper.make_node("SGDOptimizerV2", [lr, params, grads], [flag],
                                     name=_graph_utils.generate_graph_name("SGDOptimizerV2"), domain=_MS)
        return _finish(model, node, flag)
