"""onnxblock's loss blocks (onnxruntime's formulas). Each takes ``reduction`` "mean" or "sum" (a
scalar loss) or "none" (per element), and adds its target input (``target`` like the scores;
``labels``, int64, for CrossEntropyLoss) unless a value of that name exists."""
import numpy as np
import onnx

from .. import _graph_utils, blocks

_REDUCTIONS = {"mean": blocks.ReduceMean, "sum": blocks.ReduceSum, "none": blocks.PassThrough}


def _reduction(reduction):
    if reduction not in _REDUCTIONS:
        raise RuntimeError(f"Reduction {reduction} not supported: choose mean, sum or none")
    return _REDUCTIONS[reduction]()


def _target(block, like, name):
    return name if _graph_utils.node_arg_exists(block.base, name) else blocks.InputLike(like)(name)


class MSELoss(blocks.Block):
    """reduce((input - target)^2)."""

    def __init__(self, reduction="mean"):
        super().__init__()
        self._reduce = _reduction(reduction)
        self._sub, self._square = blocks.Sub(), blocks.Pow(2.0)

    def build(self, loss_input_name, target_name="target"):
        return self._reduce(self._square(self._sub(loss_input_name, _target(self, loss_input_name, target_name))))


class L1Loss(blocks.Block):
    """reduce(|input - target|)."""

    def __init__(self, reduction="mean"):
        super().__init__()
        self._reduce = _reduction(reduction)
        self._sub, self._abs = blocks.Sub(), blocks.Abs()

    def build(self, loss_input_name, target_name="target"):
        return self._reduce(self._abs(self._sub(loss_input_name, _target(self, loss_input_name, target_name))))


class CrossEntropyLoss(blocks.Block):
    """ONNX SoftmaxCrossEntropyLoss of scores [N, C, ...] against int64 class ``labels`` [N, ...],
    with class ``weight`` (a list of floats) and ``ignore_index``."""

    def __init__(self, weight=None, reduction="mean", ignore_index=None):
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise RuntimeError(f"Reduction {reduction} not supported: choose mean, sum or none")
        self._weight, self._reduction, self._ignore_index = weight, reduction, ignore_index

    def build(self, scores_input_name, labels_name="labels"):
        model = self.base
        if not _graph_utils.node_arg_exists(model, labels_name):
            scores = _graph_utils.value_info_of(model, scores_input_name)
            labels = onnx.helper.make_tensor_value_info(labels_name, onnx.TensorProto.INT64, None)
            if scores is not None and scores.type.tensor_type.HasField("shape"):
                dims = list(scores.type.tensor_type.shape.dim)
                del dims[1:2]
                labels.type.tensor_type.shape.dim.extend(dims)
            model.graph.input.append(labels)
        inputs = [scores_input_name, labels_name]
        if self._weight is not None:
            weight = _graph_utils.generate_graph_name("celoss.weight")
            model.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(self._weight, np.float32), weight))
            inputs.append(weight)
        attrs = {"reduction": self._reduction}
        if self._ignore_index is not None:
            attrs["ignore_index"] = int(self._ignore_index)
        outputs = [_graph_utils.generate_graph_name("loss"), _graph_utils.generate_graph_name("log_prob")]
        model.graph.node.append(onnx.helper.make_node("SoftmaxCrossEntropyLoss", inputs, outputs,
                                                      name=_graph_utils.generate_graph_name("SoftmaxCrossEntropyLoss"),
                                                      **attrs))
        return outputs[0]


class BCEWithLogitsLoss(blocks.Block):
    """reduce(-(log(sigmoid(x)) * t [* pos_weight] + log(1 - sigmoid(x)) * (1 - t)) [* weight])."""

    def __init__(self, weight=None, reduction="mean", pos_weight=None):
        super().__init__()
        self._reduce = _reduction(reduction)
        self._weight, self._pos_weight = weight, pos_weight

    def _const(self, values, token):
        name = _graph_utils.generate_graph_name(token)
        self.base.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(values, np.float32), name))
        return name

    def build(self, loss_input_name, target_name="target"):
        target = _target(self, loss_input_name, target_name)
        sig = blocks.Sigmoid()(loss_input_name)
        pos = blocks.Mul()(blocks.Log()(sig), target)
        if self._pos_weight is not None:
            pos = blocks.Mul()(pos, self._const(self._pos_weight, "bceloss.pos_weight"))
        one = self._const([1.0], "bceloss.one")
        neg = blocks.Mul()(blocks.Log()(blocks.Sub()(one, sig)), blocks.Sub()(one, target))
        loss = blocks.Neg()(blocks.Add()(pos, neg))
        if self._weight is not None:
            loss = blocks.Mul()(loss, self._const(self._weight, "bceloss.weight"))
        return self._reduce(loss)
