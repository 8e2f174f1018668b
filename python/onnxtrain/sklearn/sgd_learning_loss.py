"""Losses of OrtGradientForwardBackwardOptimizer (onnxcustom's ``sgd_learning_loss``): each
builds one ONNX graph returning the summed loss and its gradient with respect to the prediction,
and one returning the loss of every observation."""
import numpy as np
from onnx import TensorProto

from ._base import GraphWriter, OnnxFunction
from ._blocks import BaseLearningOnnx


class BaseLearningLoss(BaseLearningOnnx):
    """A loss: ``loss_gradient(device, expected, predicted, weight=None)`` returns the loss
    (summed over the batch, weighted by ``weight`` when given) and its gradient with respect to
    ``predicted``, both OrtValues; ``loss_scores`` returns the loss of every observation.
    Graph inputs: ``X1`` (expected), ``X2`` (predicted), optional ``weight`` (one per
    observation); outputs ``Y`` (loss) and ``Z`` (gradient)."""

    def _elementwise(self, g, diff, expected, predicted):
        """(loss, gradient) element by element, without weights."""
        raise NotImplementedError(f"{type(self).__name__} must define _elementwise")

    def _graph(self, weighted, scores, integer_labels=False):
        g = GraphWriter()
        x1 = g.input("X1", TensorProto.INT64 if integer_labels else TensorProto.FLOAT)
        x2 = g.input("X2", TensorProto.FLOAT)
        wn = g.input("weight", TensorProto.FLOAT, [None]) if weighted else None
        expected = g.op("Cast", [x1], to=TensorProto.FLOAT) if integer_labels else x1
        # The labels take the prediction's shape ([N] labels against [N, 1] predictions).
        expected = g.op("Reshape", [expected, g.op("Shape", [x2])])
        diff = g.op("Sub", [x2, expected])
        loss, grad = self._elementwise(g, diff, expected, x2)
        if weighted:
            w = g.op("Reshape", [wn, g.const([-1, 1], np.int64)])
            loss = g.op("Mul", [loss, w])
            grad = g.op("Mul", [grad, w])
        if scores:
            # One loss per observation: the sum over the other axes.
            flat = g.op("Reshape", [loss, g.const([0, -1], np.int64)])
            g.op("ReduceSum", [flat, g.const([1], np.int64)], "Y", keepdims=0)
            g.output("Y", TensorProto.FLOAT, [None])
        else:
            g.reduce_sum(loss, "Y")
            g.op("Identity", [grad], "Z")
            g.output("Y", TensorProto.FLOAT, [])
            g.output("Z", TensorProto.FLOAT)
        return g.model(type(self).__name__)

    def build_onnx_function(self, opset, device, weight_name):
        """Builds the loss/gradient and score graphs (``weight_name`` not None: weighted)."""
        weighted = weight_name is not None
        self.loss_grad_onnx_ = self._graph(weighted, scores=False)
        self.loss_grad_fct_ = OnnxFunction(self.loss_grad_onnx_)
        self.loss_score_onnx_ = self._graph(weighted, scores=True)
        self.loss_score_fct_ = OnnxFunction(self.loss_score_onnx_)
        self.weighted_ = weighted

    def _weight_arg(self, weight):
        if weight is not None and not self.weighted_:
            raise ValueError(f"{type(self).__name__}: a weight was given but the loss was built without "
                             "weight_name")
        return weight

    def loss_gradient(self, device, expected, predicted, weight=None):
        """(loss, gradient) as C OrtValues: the loss summed over the batch, its gradient with
        respect to ``predicted``."""
        self._check_built("loss_grad_fct_")
        return tuple(self.loss_grad_fct_(expected, predicted, self._weight_arg(weight)))

    def loss_scores(self, device, expected, predicted, weight=None):
        """The (weighted) loss of every observation, a C OrtValue of shape [N]."""
        self._check_built("loss_score_fct_")
        return self.loss_score_fct_(expected, predicted, self._weight_arg(weight))[0]

    @staticmethod
    def select(class_name, **kwargs):
        """A loss from an instance, a class name or an alias: 'square_error'/'square',
        'absolute_error'/'absolute', 'elastic_error'/'elastic', 'log'/'neglog'/'logloss'."""
        table = {SquareLearningLoss: ("square_error", "square"),
                 AbsoluteLearningLoss: ("absolute_error", "absolute"),
                 ElasticLearningLoss: ("elastic_error", "elastic"),
                 NegLogLearningLoss: ("log", "neglog", "logloss")}
        return BaseLearningOnnx._select(BaseLearningLoss, table, class_name, kwargs)


class SquareLearningLoss(BaseLearningLoss):
    """Square loss :math:`\\sum (Y - Z)^2` (Y: prediction, Z: expected), gradient :math:`2 (Y - Z)`."""

    def __init__(self):
        pass

    def _elementwise(self, g, diff, expected, predicted):
        return g.op("Mul", [diff, diff]), g.op("Mul", [diff, g.const([2.0])])


class AbsoluteLearningLoss(BaseLearningLoss):
    """Absolute loss :math:`\\sum |Y - Z|`, gradient :math:`sign(Y - Z)`."""

    def __init__(self):
        pass

    def _elementwise(self, g, diff, expected, predicted):
        return g.op("Abs", [diff]), g.op("Sign", [diff])


class ElasticLearningLoss(BaseLearningLoss):
    """:math:`\\sum l2\\_weight (Y - Z)^2 + l1\\_weight |Y - Z|`."""

    def __init__(self, l1_weight=0.5, l2_weight=0.5):
        self.l1_weight = l1_weight
        self.l2_weight = l2_weight

    def _elementwise(self, g, diff, expected, predicted):
        for name in ("l1_weight", "l2_weight"):
            v = getattr(self, name)
            if not isinstance(v, (int, float, np.floating, np.integer)) or v < 0:
                raise ValueError(f"ElasticLearningLoss: {name} must be a number >= 0, got {v!r}")
        l1, l2 = g.const([self.l1_weight]), g.const([self.l2_weight])
        loss = g.op("Add", [g.op("Mul", [g.op("Abs", [diff]), l1]), g.op("Mul", [g.op("Mul", [diff, diff]), l2])])
        grad = g.op("Add", [g.op("Mul", [g.op("Sign", [diff]), l1]),
                            g.op("Mul", [diff, g.const([2.0 * self.l2_weight])])])
        return loss, grad


class NegLogLearningLoss(BaseLearningLoss):
    """Binary log loss on a raw score S (the model's output, one column):
    :math:`-y \\log p - (1 - y) \\log(1 - p)` with :math:`p = sigmoid(S)` clipped to
    ``[eps, 1 - eps]``; the gradient with respect to S is :math:`p - y` (the labels ``y`` are 0/1,
    float or int64)."""

    def __init__(self, eps=1e-5, probability_function="sigmoid"):
        self.eps = eps
        self.probability_function = probability_function

    def _graph(self, weighted, scores, integer_labels=False):
        if self.probability_function != "sigmoid":
            raise NotImplementedError(f"NegLogLearningLoss: probability_function={self.probability_function!r} "
                                      "is not implemented (only 'sigmoid')")
        if not (isinstance(self.eps, (float, int)) and 0 < self.eps < 0.5):
            raise ValueError(f"NegLogLearningLoss: eps must be in (0, 0.5), got {self.eps!r}")
        return BaseLearningLoss._graph(self, weighted, scores, integer_labels)

    def build_onnx_function(self, opset, device, weight_name):
        BaseLearningLoss.build_onnx_function(self, opset, device, weight_name)
        # Labels may come as int64: a second pair of graphs casts them.
        self.loss_grad_int_fct_ = OnnxFunction(self._graph(self.weighted_, False, integer_labels=True))
        self.loss_score_int_fct_ = OnnxFunction(self._graph(self.weighted_, True, integer_labels=True))

    def _pick(self, expected, float_fct, int_fct):
        dt = expected.dtype if isinstance(expected, np.ndarray) else None
        if dt is None and hasattr(expected, "data_type"):
            dt = np.int64 if expected.data_type() == "tensor(int64)" else np.float32
        return int_fct if dt == np.int64 else float_fct

    def loss_gradient(self, device, expected, predicted, weight=None):
        self._check_built("loss_grad_fct_")
        fct = self._pick(expected, self.loss_grad_fct_, self.loss_grad_int_fct_)
        return tuple(fct(expected, predicted, self._weight_arg(weight)))

    def loss_scores(self, device, expected, predicted, weight=None):
        self._check_built("loss_score_fct_")
        fct = self._pick(expected, self.loss_score_fct_, self.loss_score_int_fct_)
        return fct(expected, predicted, self._weight_arg(weight))[0]

    def _elementwise(self, g, diff, expected, predicted):
        p = g.op("Sigmoid", [predicted])
        pc = g.op("Clip", [p, g.const(self.eps), g.const(1.0 - self.eps)])
        one = g.const([1.0])
        log_p = g.op("Log", [pc])
        log_q = g.op("Log", [g.op("Sub", [one, pc])])
        loss = g.op("Neg", [g.op("Add", [g.op("Mul", [expected, log_p]),
                                         g.op("Mul", [g.op("Sub", [one, expected]), log_q])])])
        grad = g.op("Sub", [p, expected])
        return loss, grad
