"""OrtGradientForwardBackwardOptimizer (TrainingAgent forward/backward + ONNX loss, penalty and
update) against scikit-learn's fits and numpy gradient descent; errors and scikit-learn protocol."""
import pickle

import numpy as np
import pytest

pytest.importorskip("sklearn")
from sklearn.base import clone  # noqa: E402
from sklearn.datasets import make_classification  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from sklearn.metrics import accuracy_score, r2_score  # noqa: E402
from sklearn.model_selection import GridSearchCV, train_test_split  # noqa: E402
from sklearn.neural_network import MLPRegressor  # noqa: E402

from onnxtrain.sklearn import (ConvergenceError, ElasticLearningPenalty,  # noqa: E402
                               LearningRateSGDNesterov, OrtGradientForwardBackwardOptimizer, to_onnx)

from sklearn_helpers import XTE, XTR, YTE, YTR, predict as _predict, quiet as _quiet, sgd as _sgd  # noqa: E402,I001





@pytest.fixture(scope="module")
def linear():
    est = _quiet(LinearRegression().fit, XTR[:, :4], YTR)
    return to_onnx(est), XTR[:100, :4], YTR[:100]


def test_one_step_matches_numpy(linear):
    onx, x, y = linear
    opt = OrtGradientForwardBackwardOptimizer(onx, learning_rate=_sgd(0.01), batch_size=100, max_iter=1,
                                              warm_start=True, random_state=0)
    opt.fit(x, y)
    coef = _quiet(LinearRegression().fit, XTR[:, :4], YTR)
    w0 = coef.coef_.reshape((-1, 1)).astype(np.float64)
    b0 = np.float64(coef.intercept_)
    pred = x.astype(np.float64) @ w0 + b0
    g = 2 * (pred - y.reshape((-1, 1)))
    state = dict(zip(opt.weights_to_train_, opt.get_state()))
    mats = [v for v in state.values() if np.asarray(v).ndim == 2 and np.asarray(v).shape[0] == 4]
    np.testing.assert_allclose(mats[0], w0 - 0.01 / 100 * x.T.astype(np.float64) @ g, rtol=1e-4, atol=1e-6)
    assert opt.train_losses_[0] == pytest.approx(np.mean((pred.ravel() - y) ** 2), rel=1e-4)


def test_mlp_regression_vs_sklearn():
    ours, theirs = [], []
    for seed in range(2):
        sk = MLPRegressor((50, 10), solver="sgd", learning_rate_init=1e-2, momentum=0.9, nesterovs_momentum=True,
                          alpha=0, batch_size=15, max_iter=40, n_iter_no_change=1000, random_state=seed)
        _quiet(sk.fit, XTR, YTR)
        onx = to_onnx(sk, XTR)
        opt = OrtGradientForwardBackwardOptimizer(
            onx, learning_rate=LearningRateSGDNesterov(5e-3, learning_rate="constant", momentum=0.9),
            batch_size=15, max_iter=40, random_state=seed).fit(XTR, YTR)
        ours.append(r2_score(YTE, _predict(opt.get_trained_onnx(), XTE)[0].ravel()))
        theirs.append(sk.score(XTE, YTE))
    assert np.mean(theirs) > 0.6 and abs(np.mean(ours) - np.mean(theirs)) < 0.02, (ours, theirs)


def test_logistic_vs_sklearn():
    Xc, yc = make_classification(1000, 20, random_state=0)
    Xc = Xc.astype(np.float32)
    tr, te, ltr, lte = train_test_split(Xc, yc, random_state=0)
    sk = _quiet(LogisticRegression(C=1e6).fit, tr, ltr)
    opt = OrtGradientForwardBackwardOptimizer(to_onnx(sk, tr, raw_scores=True), learning_rate=_sgd(1e-2),
                                              learning_loss="log", batch_size=15, max_iter=20, random_state=0)
    opt.fit(tr, ltr)
    label = _predict(opt.get_trained_onnx(to_onnx(sk, tr)), te)[0]
    assert abs(accuracy_score(lte, label) - sk.score(te, lte)) < 0.02
    losses = opt.losses(te, lte)
    assert losses.shape == (len(te),) and opt.score(te, lte) == pytest.approx(-losses.mean(), rel=1e-6)


def test_penalty_weights_validation_and_state(linear):
    onx, x, y = linear
    base = dict(learning_rate=_sgd(1e-3), batch_size=10, max_iter=4, random_state=0)
    a = OrtGradientForwardBackwardOptimizer(onx, **base).fit(x, y, X_val=x, y_val=y)
    assert len(a.validation_losses_) == 4
    assert a.validation_losses_[-1] == pytest.approx(float(np.mean(a.losses(x, y))), rel=1e-5)
    p = OrtGradientForwardBackwardOptimizer(onx, learning_penalty=ElasticLearningPenalty(0.01, 0.01), **base)
    p.fit(x, y)
    assert np.sum(np.abs(p.get_state()[0])) < np.sum(np.abs(a.get_state()[0]))
    w = OrtGradientForwardBackwardOptimizer(onx, weight_name="weight", **base)
    w.fit(x, y, sample_weight=np.ones(len(y), dtype=np.float32))
    for u, v in zip(w.get_state(), a.get_state()):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)
    a.set_state([np.zeros_like(v) for v in a.get_state()])
    assert a.losses(x, y) == pytest.approx(y ** 2, rel=1e-5)


def test_errors_and_divergence(linear):
    onx, x, y = linear
    with pytest.raises(ValueError, match="Unexpected BaseLearningLoss"):
        OrtGradientForwardBackwardOptimizer(onx, learning_loss="hinge")
    with pytest.raises(ValueError, match="Unexpected BaseLearningPenalty"):
        OrtGradientForwardBackwardOptimizer(onx, learning_penalty="l0")
    opt = OrtGradientForwardBackwardOptimizer(onx, learning_rate=_sgd(1e8), max_iter=5, random_state=0)
    with pytest.raises(ConvergenceError, match=r"at iteration \d+, batch \d+"):
        opt.fit(x * 1e4, y)
    opt.set_params(exc=False)
    with pytest.warns(RuntimeWarning, match="exc=False"):
        opt.fit(x * 1e4, y)
    assert all(np.isfinite(v).all() for v in opt.get_state())
    with pytest.raises(ValueError, match="weight_name is None"):
        OrtGradientForwardBackwardOptimizer(onx).fit(x, y, sample_weight=np.ones(len(y)))
    with pytest.raises(ValueError, match="same number of rows"):
        OrtGradientForwardBackwardOptimizer(onx).fit(x, y[:3])
    with pytest.raises(AttributeError, match="fit must be called"):
        OrtGradientForwardBackwardOptimizer(onx).get_state()


def test_sklearn_protocol(linear):
    onx, x, y = linear
    opt = OrtGradientForwardBackwardOptimizer(onx, learning_rate=_sgd(1e-3), max_iter=2, random_state=0,
                                              learning_loss="square")
    c = clone(opt)
    assert c.get_params()["learning_loss"] is not opt.learning_loss
    opt.fit(x, y)
    back = pickle.loads(pickle.dumps(opt))
    assert back.score(x, y) == pytest.approx(opt.score(x, y), rel=1e-5)
    grid = GridSearchCV(c, {"learning_rate": [_sgd(1e-7), _sgd(1e-3)]}, cv=2).fit(x, y)
    assert grid.best_params_["learning_rate"].eta0 == 1e-3
