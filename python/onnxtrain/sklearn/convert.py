"""A small scikit-learn -> ONNX converter for the models onnxtrain.sklearn trains (skl2onnx's role
for these estimators): linear regressors, binary linear classifiers, MLPRegressor and
MLPClassifier, from their fitted coefficients."""
import numpy as np
from onnx import TensorProto

from ._base import GraphWriter

_ACTIVATIONS = {"relu": "Relu", "tanh": "Tanh", "logistic": "Sigmoid", "identity": None}


def _linear_layers(est):
    """[(coef [in, out], intercept [out])] of the estimator, and the hidden activation."""
    name = type(est).__name__
    if hasattr(est, "coefs_") and hasattr(est, "intercepts_"):
        if est.activation not in _ACTIVATIONS:
            raise NotImplementedError(f"to_onnx: {name} activation={est.activation!r} is not supported "
                                      f"(supported: {sorted(_ACTIVATIONS)})")
        return [(np.asarray(c), np.asarray(b)) for c, b in zip(est.coefs_, est.intercepts_)], est.activation
    if hasattr(est, "coef_"):
        coef = np.asarray(est.coef_)
        intercept = np.atleast_1d(np.asarray(getattr(est, "intercept_", 0.0), dtype=np.float64))
        coef2 = coef.reshape((1, -1)) if coef.ndim == 1 else coef
        if intercept.shape[0] != coef2.shape[0]:
            intercept = np.broadcast_to(intercept, (coef2.shape[0],))
        return [(coef2.T, intercept)], None
    raise TypeError(f"to_onnx: {name} is not fitted or not supported (no coef_/intercept_ nor coefs_/intercepts_)")


_SUPPORTED = ("LinearRegression", "Ridge", "SGDRegressor", "Lasso", "ElasticNet", "LogisticRegression",
              "SGDClassifier", "MLPRegressor", "MLPClassifier")


def to_onnx(estimator, X=None, raw_scores=False, input_name="X", dtype=np.float32):
    """Converts a fitted estimator into an ONNX model (onnx.ModelProto, float32).

    Supported: LinearRegression, Ridge, Lasso, ElasticNet, SGDRegressor (output ``variable``,
    ``[N, 1]`` or ``[N, targets]``); LogisticRegression and SGDClassifier with two classes
    (outputs ``label`` int64 ``[N]`` and ``probabilities`` ``[N, 2]``; an SGDClassifier without
    predict_proba outputs ``scores`` instead); MLPRegressor and MLPClassifier (relu, tanh,
    logistic or identity; binary or multiclass). ``X`` (optional) gives the number of features
    and is checked against the estimator. ``raw_scores=True`` returns a model whose only output
    ``score`` is the last layer before its output function (decision_function of a classifier):
    the graph to train with a log loss.
    """
    name = type(estimator).__name__
    if name not in _SUPPORTED:
        raise NotImplementedError(f"to_onnx: {name} is not supported (supported: {list(_SUPPORTED)})")
    if np.dtype(dtype) != np.float32:
        raise NotImplementedError(f"to_onnx: dtype={np.dtype(dtype)} is not supported (float32 only)")
    layers, activation = _linear_layers(estimator)
    n_features = layers[0][0].shape[0]
    if X is not None:
        shape = np.shape(X)
        if len(shape) != 2 or shape[1] != n_features:
            raise ValueError(f"to_onnx: X has shape {shape}, {name} expects [N, {n_features}]")
    classes = getattr(estimator, "classes_", None)
    is_classifier = classes is not None
    if is_classifier:
        classes = np.asarray(classes)
        if not np.issubdtype(classes.dtype, np.integer) and not np.issubdtype(classes.dtype, np.bool_):
            raise NotImplementedError(f"to_onnx: {name} with non-integer classes {classes.dtype} is not supported")
        if len(classes) != 2 and not hasattr(estimator, "coefs_"):
            raise NotImplementedError(f"to_onnx: {name} with {len(classes)} classes is not supported "
                                      "(binary only)")

    g = GraphWriter()
    x = g.input(input_name, TensorProto.FLOAT, [None, n_features])
    h = x
    for i, (coef, intercept) in enumerate(layers):
        h = g.op("Add", [g.op("MatMul", [h, g.const(coef, dtype)]), g.const(intercept, dtype)])
        if i < len(layers) - 1 and _ACTIVATIONS[activation]:
            h = g.op(_ACTIVATIONS[activation], [h])
    n_out = layers[-1][0].shape[1]
    if raw_scores:
        g.op("Identity", [h], "score")
        g.output("score", TensorProto.FLOAT, [None, n_out])
        return g.model(f"{name}_raw_scores")

    if not is_classifier:
        g.op("Identity", [h], "variable")
        g.output("variable", TensorProto.FLOAT, [None, n_out])
        return g.model(name)

    has_proba = not (name == "SGDClassifier" and estimator.loss not in ("log_loss", "log", "modified_huber"))
    if n_out == 1:
        if has_proba:
            if name == "SGDClassifier" and estimator.loss == "modified_huber":
                # (clip(score, -1, 1) + 1) / 2
                p1 = g.op("Div", [g.op("Add", [g.op("Clip", [h, g.const(-1.0), g.const(1.0)]), g.const([1.0])]),
                                  g.const([2.0])])
            else:
                p1 = g.op("Sigmoid", [h])
            g.op("Concat", [g.op("Sub", [g.const([1.0]), p1]), p1], "probabilities", axis=1)
        positive = g.op("Cast", [g.op("Greater", [h, g.const([0.0])])], to=TensorProto.INT64)
        index = g.op("Reshape", [positive, g.const([-1], np.int64)])
    else:
        g.op("Softmax", [h], "probabilities", axis=1)
        index = g.op("ArgMax", [h], axis=1, keepdims=0)
    g.op("Gather", [g.const(classes.astype(np.int64), np.int64), index], "label", axis=0)
    g.output("label", TensorProto.INT64, [None])
    if has_proba:
        g.output("probabilities", TensorProto.FLOAT, [None, len(classes)])
    else:
        g.op("Identity", [h], "scores")
        g.output("scores", TensorProto.FLOAT, [None, 1])
    return g.model(name)
