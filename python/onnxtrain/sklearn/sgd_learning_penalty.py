"""Weight penalties of OrtGradientForwardBackwardOptimizer (onnxcustom's
``sgd_learning_penalty``)."""
import numpy as np
from onnx import TensorProto

from ._base import GraphWriter, OnnxFunction
from ._blocks import BaseLearningOnnx


class BaseLearningPenalty(BaseLearningOnnx):
    """A penalty on the trained weights: ``penalty_loss(device, loss, *weights)`` adds it to
    the loss, ``update_weights(device, weight)`` applies its gradient step to one weight."""

    @staticmethod
    def select(class_name, **kwargs):
        """A penalty from an instance, a class name or an alias: None or '' (no penalty),
        'elastic' or 'l1l2'."""
        table = {NoLearningPenalty: (None, ""), ElasticLearningPenalty: ("elastic", "l1l2")}
        return BaseLearningOnnx._select(BaseLearningPenalty, table, class_name, kwargs)

    def penalty_loss(self, device, loss, *weights):
        raise NotImplementedError(f"{type(self).__name__} must define penalty_loss")

    def update_weights(self, device, statei, learning_rate=1.0):
        raise NotImplementedError(f"{type(self).__name__} must define update_weights")


class NoLearningPenalty(BaseLearningPenalty):
    """No penalty: the loss and the weights are returned unchanged."""

    def __init__(self):
        pass

    def build_onnx_function(self, opset, device, n_tensors):
        """Nothing to build."""

    def penalty_loss(self, device, loss, *weights):
        """Returns ``loss``."""
        return loss

    def update_weights(self, device, statei, learning_rate=1.0):
        """Returns ``statei``."""
        return statei


class ElasticLearningPenalty(BaseLearningPenalty):
    """Elastic penalty :math:`\\sum_W l1 \\sum |W| + l2 \\sum W^2` on every trained weight.

    ``update_weights(device, W, learning_rate=1)`` returns
    :math:`W - learning\\_rate (l1\\, sign(W) + 2\\, l2\\, W)`: with the default rate 1, onnxcustom's
    update :math:`W (1 - 2 l2) - l1\\, sign(W)`; OrtGradientForwardBackwardOptimizer passes the
    step's rate so that the penalty is part of the gradient step (see docs/sklearn.md)."""

    def __init__(self, l1=0.5, l2=0.5):
        self.l1 = l1
        self.l2 = l2

    def _check(self):
        for name in ("l1", "l2"):
            v = getattr(self, name)
            if not isinstance(v, (int, float, np.floating, np.integer)) or v < 0:
                raise ValueError(f"ElasticLearningPenalty: {name} must be a number >= 0, got {v!r}")

    def build_onnx_function(self, opset, device, n_tensors):
        """Builds the penalty graph for ``n_tensors`` weights and the update graph."""
        self._check()
        if not isinstance(n_tensors, int) or n_tensors <= 0:
            raise ValueError(f"ElasticLearningPenalty: n_tensors must be a positive integer, got {n_tensors!r}")
        g = GraphWriter()
        total = g.input("loss", TensorProto.FLOAT)
        l1, l2 = g.const([self.l1]), g.const([self.l2])
        terms = [total]
        for i in range(n_tensors):
            w = g.input(f"W{i}", TensorProto.FLOAT)
            terms.append(g.op("Mul", [g.reduce_sum(g.op("Abs", [w])), l1]))
            terms.append(g.op("Mul", [g.reduce_sum(g.op("Mul", [w, w])), l2]))
        g.op("Reshape", [g.op("Sum", terms), g.op("Shape", [total])], "Y")
        g.output("Y", TensorProto.FLOAT)
        self.penalty_onnx_ = g.model("penalty_elastic")
        self.penalty_fct_ = OnnxFunction(self.penalty_onnx_)

        g = GraphWriter()
        x = g.input("X", TensorProto.FLOAT)
        lr = g.input("learning_rate", TensorProto.FLOAT, [1])
        step = g.op("Add", [g.op("Mul", [g.op("Sign", [x]), g.const([self.l1])]), g.op("Mul", [x, g.const([2.0 * self.l2])])])
        g.op("Sub", [x, g.op("Mul", [step, lr])], "Y")
        g.output("Y", TensorProto.FLOAT)
        self.penalty_grad_onnx_ = g.model("update_penalty_elastic")
        self.penalty_grad_fct_ = OnnxFunction(self.penalty_grad_onnx_)
        self.n_tensors_ = n_tensors

    def penalty_loss(self, device, loss, *weights):
        """``loss`` plus the penalty of ``weights`` (as many as built for)."""
        self._check_built("penalty_fct_")
        if len(weights) != self.n_tensors_:
            raise ValueError(f"ElasticLearningPenalty.penalty_loss: {len(weights)} weights given, the penalty was "
                             f"built for {self.n_tensors_}")
        return self.penalty_fct_(loss, *weights)[0]

    def update_weights(self, device, statei, learning_rate=1.0):
        """``statei`` after the penalty's gradient step of rate ``learning_rate``."""
        self._check_built("penalty_grad_fct_")
        return self.penalty_grad_fct_(statei, np.array([learning_rate], dtype=np.float32))[0]
