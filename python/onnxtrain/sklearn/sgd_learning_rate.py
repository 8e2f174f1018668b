"""Learning rates and weight updates (onnxcustom's ``sgd_learning_rate``): scikit-learn's
SGDRegressor schedules, updated once per iteration (epoch); the update itself is an ONNX graph."""
import numpy as np
from onnx import TensorProto

from ._base import GraphWriter, OnnxFunction
from ._blocks import BaseLearningOnnx

_SCHEDULES = ("invscaling", "optimal", "constant")


class BaseLearningRate(BaseLearningOnnx):
    """Learning rate schedule plus weight update. ``init_learning_rate()`` starts a training,
    ``update_learning_rate(t)`` moves to the rate after iteration ``t`` (0-based), ``value`` is
    the current rate; ``update_weights`` applies one gradient step."""

    needs_grad = False

    def init_learning_rate(self):
        raise NotImplementedError(f"{type(self).__name__} must define init_learning_rate")

    def update_learning_rate(self, t):
        raise NotImplementedError(f"{type(self).__name__} must define update_learning_rate")

    @property
    def value(self):
        raise NotImplementedError(f"{type(self).__name__} must define value")

    def loop(self, n=1000):
        """Yields the first ``n`` learning rates."""
        self.init_learning_rate()
        for i in range(n):
            yield self.value
            self.update_learning_rate(i)

    @staticmethod
    def select(class_name, **kwargs):
        """A learning rate from an instance, a float (LearningRateSGD's eta0), a class name or an
        alias: 'SGD', 'SGDNesterov' / 'Nesterov'."""
        if isinstance(class_name, (float, np.floating)) and not isinstance(class_name, bool):
            return LearningRateSGD(float(class_name), **kwargs)
        table = {LearningRateSGD: ("SGD",), LearningRateSGDNesterov: ("SGDNesterov", "Nesterov")}
        return BaseLearningOnnx._select(BaseLearningRate, table, class_name, kwargs)


class LearningRateSGD(BaseLearningRate):
    """Learning rate of scikit-learn's SGDRegressor, one step per iteration (epoch):
    'constant' :math:`\\eta_0`, 'invscaling' :math:`\\eta_0 / (t + 1)^{power\\_t}`, 'optimal'
    :math:`1 / (\\alpha (t_0 + t))` with Bottou's :math:`t_0`, scaled so that the first rate is
    :math:`\\eta_0` (t: the 0-based iteration just done, as in onnxcustom). ``update_weights`` does :math:`W \\leftarrow W - value / batch\\_size \\cdot G`
    (G: gradient of the loss summed over the batch)."""

    def __init__(self, eta0=0.01, alpha=0.0001, power_t=0.25, learning_rate="invscaling"):
        self.eta0 = eta0
        self.alpha = alpha
        self.power_t = power_t
        self.learning_rate = learning_rate
        self._check()

    def _check(self):
        if self.learning_rate not in _SCHEDULES:
            raise ValueError(f"{type(self).__name__}: unexpected learning_rate={self.learning_rate!r}, "
                             f"expected one of {list(_SCHEDULES)}")
        for name in ("eta0", "alpha", "power_t"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not np.isfinite(v):
                raise ValueError(f"{type(self).__name__}: {name} must be a finite number, got {v!r}")
        if self.eta0 <= 0:
            raise ValueError(f"{type(self).__name__}: eta0 must be > 0, got {self.eta0!r}")
        if self.learning_rate == "optimal" and self.alpha <= 0:
            raise ValueError(f"{type(self).__name__}: alpha must be > 0 with learning_rate='optimal'")

    @property
    def value(self):
        """The current learning rate (init_learning_rate must have been called)."""
        if getattr(self, "value_", None) is None:
            raise RuntimeError(f"{type(self).__name__}: init_learning_rate was never called")
        return self.value_

    def init_learning_rate(self):
        """Starts the schedule: ``value`` becomes eta0."""
        self._check()
        self.eta0_ = float(self.eta0)
        if self.learning_rate == "optimal":
            typw = np.sqrt(1.0 / np.sqrt(self.alpha))
            eta_bottou = typw / max(1.0, (1 + typw) * 2)
            self.optimal_init_ = 1.0 / (eta_bottou * self.alpha)
            # Scales Bottou's schedule so that its first value is eta0.
            self.optimal_fact_ = self.eta0 * self.alpha * self.optimal_init_
        self.value_ = self.eta0_
        return self

    def update_learning_rate(self, t):
        """The rate after iteration ``t`` (0-based)."""
        if getattr(self, "value_", None) is None:
            raise RuntimeError(f"{type(self).__name__}: init_learning_rate was never called")
        if self.learning_rate == "optimal":
            self.value_ = self.optimal_fact_ / (self.alpha * (self.optimal_init_ + t))
        elif self.learning_rate == "invscaling":
            self.value_ = self.eta0_ / np.power(t + 1, self.power_t)
        return self

    # ---- weight updates

    def _update_graph(self, n):
        g = GraphWriter()
        alpha = g.input("alpha", TensorProto.FLOAT, [1])
        for i in range(n):
            grad, weight = g.input(f"X1_{i}", TensorProto.FLOAT), g.input(f"X2_{i}", TensorProto.FLOAT)
            g.op("Add", [g.op("Mul", [grad, alpha]), weight], f"Y_{i}")
            g.output(f"Y_{i}", TensorProto.FLOAT)
        return g.model("axpy")

    def build_onnx_function(self, opset, device, n_tensors=1):
        """Builds the update graph of one weight and the fused one of ``n_tensors`` weights."""
        self.axpy_onnx_ = self._update_graph(1)
        self.axpy_fct_ = OnnxFunction(self.axpy_onnx_)
        self.axpy_n_fct_ = OnnxFunction(self._update_graph(n_tensors)) if n_tensors > 1 else self.axpy_fct_

    def _alpha(self, batch_size):
        return np.array([-self.value / batch_size], dtype=np.float32)

    def update_weights(self, device, statei, gradienti, batch_size, velocity=None):
        """The weight after one step: ``statei - value / batch_size * gradienti`` (OrtValue)."""
        if velocity is not None:
            raise ValueError(f"{type(self).__name__}.update_weights: velocity must be None")
        self._check_built("axpy_fct_")
        return self.axpy_fct_(self._alpha(batch_size), gradienti, statei)[0]

    def update_all_weights(self, device, states, gradients, batch_size, velocities=None):
        """Every weight after one step, through the fused graph; returns (weights, None)."""
        if velocities is not None:
            raise ValueError(f"{type(self).__name__}.update_all_weights: velocities must be None")
        self._check_built("axpy_n_fct_")
        inputs = [self._alpha(batch_size)]
        for g, w in zip(gradients, states):
            inputs.extend((g, w))
        return list(self.axpy_n_fct_(*inputs)), None


class LearningRateSGDNesterov(LearningRateSGD):
    """LearningRateSGD's schedule with momentum (scikit-learn's MLP SGD): the velocity
    :math:`V \\leftarrow momentum\\, V - \\eta G`, then :math:`W \\leftarrow W + V`, or with
    Nesterov :math:`W \\leftarrow W + momentum\\, V - \\eta G` (:math:`\\eta = value / batch\\_size`)."""

    needs_grad = True

    def __init__(self, eta0=0.01, alpha=0.0001, power_t=0.25, learning_rate="invscaling", momentum=0.9,
                 nesterov=True):
        self.momentum = momentum
        self.nesterov = nesterov
        LearningRateSGD.__init__(self, eta0=eta0, alpha=alpha, power_t=power_t, learning_rate=learning_rate)

    def _check(self):
        LearningRateSGD._check(self)
        if isinstance(self.momentum, bool) or not isinstance(self.momentum, (int, float, np.floating)) or \
                self.momentum < 0:
            raise ValueError(f"LearningRateSGDNesterov: momentum must be a number >= 0, got {self.momentum!r}")
        if not isinstance(self.nesterov, (bool, np.bool_)):
            raise ValueError(f"LearningRateSGDNesterov: nesterov must be a bool, got {self.nesterov!r}")

    def _update_graph(self, n):
        g = GraphWriter()
        alpha = g.input("alpha", TensorProto.FLOAT, [1])
        beta = g.input("beta", TensorProto.FLOAT, [1])
        for i in range(n):
            grad = g.input(f"X1_{i}", TensorProto.FLOAT)
            weight = g.input(f"X2_{i}", TensorProto.FLOAT)
            vel = g.input(f"G_{i}", TensorProto.FLOAT)
            step = g.op("Mul", [grad, alpha])
            z = g.op("Add", [step, g.op("Mul", [vel, beta])], f"Z_{i}")
            if self.nesterov:
                g.op("Add", [g.op("Add", [g.op("Mul", [z, beta]), step]), weight], f"Y_{i}")
            else:
                g.op("Add", [z, weight], f"Y_{i}")
            g.output(f"Y_{i}", TensorProto.FLOAT)
            g.output(f"Z_{i}", TensorProto.FLOAT)
        return g.model("axpyw")

    def build_onnx_function(self, opset, device, n_tensors=1):
        """Builds the update graph (weight and velocity) of one weight and the fused one."""
        self._check()
        self.axpyw_onnx_ = self._update_graph(1)
        self.axpyw_fct_ = OnnxFunction(self.axpyw_onnx_)
        self.axpyw_n_fct_ = OnnxFunction(self._update_graph(n_tensors)) if n_tensors > 1 else self.axpyw_fct_

    def _beta(self):
        return np.array([self.momentum], dtype=np.float32)

    def update_weights(self, device, statei, gradienti, batch_size, velocity=None):
        """(new weight, new velocity) after one step."""
        if velocity is None:
            raise ValueError("LearningRateSGDNesterov.update_weights: velocity is required")
        self._check_built("axpyw_fct_")
        return tuple(self.axpyw_fct_(self._alpha(batch_size), self._beta(), gradienti, statei, velocity))

    def update_all_weights(self, device, states, gradients, batch_size, velocities=None):
        """(weights, velocities) after one step, through the fused graph."""
        if velocities is None:
            raise ValueError("LearningRateSGDNesterov.update_all_weights: velocities are required")
        self._check_built("axpyw_n_fct_")
        inputs = [self._alpha(batch_size), self._beta()]
        for g, w, v in zip(gradients, states, velocities):
            inputs.extend((g, w, v))
        out = self.axpyw_n_fct_(*inputs)
        return list(out[0::2]), list(out[1::2])
