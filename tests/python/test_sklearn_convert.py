"""onnxtrain.sklearn.to_onnx against the estimators' own predict / predict_proba."""
import warnings

import numpy as np
import pytest

pytest.importorskip("sklearn")
from sklearn.datasets import make_classification, make_regression  # noqa: E402
from sklearn.linear_model import (LinearRegression, LogisticRegression, Ridge, SGDClassifier,  # noqa: E402
                                  SGDRegressor)
from sklearn.neural_network import MLPClassifier, MLPRegressor  # noqa: E402
from sklearn.tree import DecisionTreeRegressor  # noqa: E402

import onnxtrain  # noqa: E402
from onnxtrain.sklearn import to_onnx  # noqa: E402

XR, YR = make_regression(200, 8, random_state=0)
XR = XR.astype(np.float32)
XC, YC = make_classification(200, 8, random_state=0)
XC = XC.astype(np.float32)


def _run(onx, X):
    return onnxtrain.InferenceSession(onx.SerializeToString()).run(None, {"X": X})


def _fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y)


@pytest.mark.parametrize("est", [LinearRegression(), Ridge(alpha=2.0), SGDRegressor(random_state=0)]
                         + [MLPRegressor((6, 4), activation=a, max_iter=30, random_state=0)
                            for a in ("relu", "tanh", "logistic", "identity")])
def test_regressors(est):
    _fit(est, XR, YR)
    (pred,) = _run(to_onnx(est, XR), XR)
    assert pred.shape == (200, 1)
    np.testing.assert_allclose(pred.ravel(), est.predict(XR), rtol=1e-4, atol=1e-3 * np.abs(YR).max())


@pytest.mark.parametrize("est", [LogisticRegression(), SGDClassifier(loss="log_loss", random_state=0),
                                 SGDClassifier(loss="modified_huber", random_state=0)]
                         + [MLPClassifier((6,), activation=a, max_iter=30, random_state=0)
                            for a in ("relu", "tanh", "logistic", "identity")])
def test_binary_classifiers(est):
    y = np.where(YC > 0, 7, 3)  # classes other than 0/1
    _fit(est, XC, y)
    label, proba = _run(to_onnx(est, XC), XC)
    np.testing.assert_array_equal(label, est.predict(XC))
    np.testing.assert_allclose(proba, est.predict_proba(XC), rtol=1e-4, atol=1e-5)
    (raw,) = _run(to_onnx(est, XC, raw_scores=True), XC)
    if hasattr(est, "decision_function"):
        np.testing.assert_allclose(raw.ravel(), est.decision_function(XC), rtol=1e-4, atol=1e-4)


def test_hinge_classifier_and_multiclass_mlp():
    est = _fit(SGDClassifier(random_state=0), XC, YC)
    label, scores = _run(to_onnx(est, XC), XC)
    np.testing.assert_array_equal(label, est.predict(XC))
    np.testing.assert_allclose(scores.ravel(), est.decision_function(XC), rtol=1e-4, atol=1e-4)
    X3, y3 = make_classification(200, 8, n_classes=3, n_informative=4, random_state=0)
    X3 = X3.astype(np.float32)
    mlp = _fit(MLPClassifier((5,), max_iter=30, random_state=0), X3, y3)
    label, proba = _run(to_onnx(mlp, X3), X3)
    np.testing.assert_array_equal(label, mlp.predict(X3))
    np.testing.assert_allclose(proba, mlp.predict_proba(X3), rtol=1e-4, atol=1e-5)


def test_errors():
    with pytest.raises(NotImplementedError, match="DecisionTreeRegressor is not supported"):
        to_onnx(_fit(DecisionTreeRegressor(), XR, YR))
    with pytest.raises(TypeError, match="not fitted"):
        to_onnx(LinearRegression())
    est = _fit(LinearRegression(), XR, YR)
    with pytest.raises(ValueError, match=r"expects \[N, 8\]"):
        to_onnx(est, XR[:, :3])
    with pytest.raises(NotImplementedError, match="float32 only"):
        to_onnx(est, dtype=np.float64)
    X3, y3 = make_classification(200, 8, n_classes=3, n_informative=4, random_state=0)
    with pytest.raises(NotImplementedError, match="3 classes"):
        to_onnx(_fit(LogisticRegression(), X3, y3))
    with pytest.raises(NotImplementedError, match="non-integer classes"):
        to_onnx(_fit(LogisticRegression(), XC, np.where(YC > 0, "a", "b")))
