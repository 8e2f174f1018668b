"""OrtGradientOptimizer against scikit-learn's own fits, its error paths and scikit-learn's
estimator protocol (clone, get_params/set_params, pickle, GridSearchCV)."""
import os
import pickle

import numpy as np
import pytest

pytest.importorskip("sklearn")
from sklearn.base import clone  # noqa: E402
from sklearn.datasets import make_classification  # noqa: E402
from sklearn.linear_model import LogisticRegression, SGDRegressor  # noqa: E402
from sklearn.metrics import accuracy_score, r2_score  # noqa: E402
from sklearn.model_selection import GridSearchCV, train_test_split  # noqa: E402
from sklearn.neural_network import MLPClassifier, MLPRegressor  # noqa: E402

import onnxtrain  # noqa: E402
from onnxtrain.sklearn import (ConvergenceError, LearningRateSGD, OrtGradientOptimizer,  # noqa: E402
                               to_onnx)

from sklearn_helpers import XTE, XTR, YTE, YTR, predict as _predict, quiet as _quiet, sgd as _sgd  # noqa: E402,I001
XC, YC = make_classification(1000, 20, random_state=0)
XC = XC.astype(np.float32)
CTR, CTE, LTR, LTE = train_test_split(XC, YC, random_state=0)




def _regression_setup(est):
    _quiet(est.fit, XTR[:50], YTR[:50])  # shapes only: the optimizer starts from random weights
    onx = to_onnx(est, XTR)
    return onx, onnxtrain.add_loss_output(onx), list(onnxtrain.get_train_initializer(onx))



def test_linear_regression_vs_sklearn():
    sk = _quiet(SGDRegressor(alpha=0, learning_rate="constant", eta0=1e-3, max_iter=20, tol=None, random_state=0).fit,
                XTR, YTR)
    onx, with_loss, weights = _regression_setup(SGDRegressor())
    opt = OrtGradientOptimizer(with_loss, weights, learning_rate=_sgd(5e-3), batch_size=15, max_iter=20,
                               random_state=0).fit(XTR, YTR)
    ours = r2_score(YTE, _predict(opt.get_trained_onnx(onx), XTE)[0].ravel())
    theirs = sk.score(XTE, YTE)
    assert theirs > 0.99 and abs(ours - theirs) < 0.02, (ours, theirs)


def test_mlp_regression_vs_sklearn():
    ours, theirs = [], []
    for seed in range(3):  # MLP fits vary with the seed: compare the means of 3
        sk = MLPRegressor((50, 10), solver="sgd", learning_rate_init=1e-2, momentum=0, alpha=0, batch_size=15,
                          max_iter=100, n_iter_no_change=1000, random_state=seed)
        _quiet(sk.fit, XTR, YTR)
        onx = to_onnx(sk, XTR)
        # scikit-learn's loss is half the squared error, averaged: the same steps with eta0 / 2 here
        opt = OrtGradientOptimizer(onnxtrain.add_loss_output(onx), list(onnxtrain.get_train_initializer(onx)),
                                   learning_rate=_sgd(5e-3), batch_size=15, max_iter=100, random_state=seed)
        opt.fit(XTR, YTR)
        ours.append(r2_score(YTE, _predict(opt.get_trained_onnx(onx), XTE)[0].ravel()))
        theirs.append(sk.score(XTE, YTE))
        assert opt.train_losses_[-1] < opt.train_losses_[0] / 10
    assert np.mean(theirs) > 0.6 and abs(np.mean(ours) - np.mean(theirs)) < 0.02, (ours, theirs)


@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_classification_vs_sklearn(kind):
    ours, theirs = [], []
    for seed in range(2):
        if kind == "linear":
            sk = LogisticRegression(C=1e6)
        else:
            sk = MLPClassifier((50, 10), solver="sgd", learning_rate_init=1e-2, momentum=0, alpha=0, batch_size=15,
                               max_iter=60, n_iter_no_change=1000, random_state=seed)
        _quiet(sk.fit, CTR, LTR)
        raw = to_onnx(sk, CTR, raw_scores=True)
        with_loss = onnxtrain.add_loss_output(raw, "bce_with_logits", reduction="sum")
        opt = OrtGradientOptimizer(with_loss, list(onnxtrain.get_train_initializer(raw)), learning_rate=_sgd(1e-2),
                                   batch_size=15, max_iter=60 if kind == "mlp" else 30, random_state=seed)
        opt.fit(CTR, LTR)
        label = _predict(opt.get_trained_onnx(to_onnx(sk, CTR)), CTE)[0]
        ours.append(accuracy_score(LTE, label))
        theirs.append(sk.score(CTE, LTE))
    assert np.mean(theirs) > 0.9 and abs(np.mean(ours) - np.mean(theirs)) < 0.02, (ours, theirs)


@pytest.fixture(scope="module")
def small():
    est = _quiet(MLPRegressor((8,), max_iter=1).fit, XTR[:, :5], YTR)
    onx = to_onnx(est)
    return onx, onnxtrain.add_loss_output(onx), list(onnxtrain.get_train_initializer(onx)), XTR[:200, :5], YTR[:200]


def _small_opt(small, **kw):
    kw.setdefault("learning_rate", _sgd(1e-3))
    kw.setdefault("max_iter", 5)
    kw.setdefault("random_state", 0)
    return OrtGradientOptimizer(small[1], small[2], **kw)


def test_trainer_and_python_loop_agree(small):
    a = _small_opt(small, batch_size=7).fit(small[3], small[4])
    b = _small_opt(small, batch_size=7).fit(small[3], small[4], use_numpy=True)
    for k in small[2]:
        np.testing.assert_allclose(a.trained_coef_[k], b.trained_coef_[k], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(a.train_losses_, b.train_losses_, rtol=1e-6)
    assert a.n_iter_ == 5 and a.validation_losses_ is None


def test_state_warm_start_and_trained_onnx(small):
    opt = _small_opt(small).fit(small[3], small[4])
    state = opt.get_state()
    assert set(small[2]) <= set(state)
    pred = _predict(opt.get_trained_onnx(small[0]), small[3])[0].ravel()
    with_loss = opt.get_trained_onnx()
    assert [o.name for o in with_loss.graph.output][0] == "loss"
    ref = np.sum((pred - small[4]) ** 2) / len(pred)
    assert opt.losses(small[3], small[4]) == pytest.approx(ref, rel=1e-4)
    assert opt.score(small[3], small[4]) == pytest.approx(-ref, rel=1e-4)
    last = opt.train_losses_[-1]
    opt.set_params(warm_start=True, max_iter=2)
    opt.fit(small[3], small[4])
    assert opt.train_losses_[0] < last * 1.05  # continued from the trained weights
    zero = {k: np.zeros_like(v) for k, v in state.items() if k in small[2]}
    opt.set_state(zero)
    assert np.all(opt.get_state()[small[2][0]] == 0)


def test_validation_and_sample_weight(small):
    opt = _small_opt(small, max_iter=4, validation_every=2).fit(small[3], small[4], X_val=XTE[:50, :5],
                                                                 y_val=YTE[:50])
    assert len(opt.validation_losses_) == 2
    assert opt.validation_losses_[-1] == pytest.approx(opt.losses(XTE[:50, :5], YTE[:50]), rel=1e-5)
    weighted = onnxtrain.add_loss_output(small[0], weight_name="weight")
    a = OrtGradientOptimizer(weighted, small[2], learning_rate=_sgd(1e-3), max_iter=3, random_state=0)
    a.fit(small[3], small[4], sample_weight=np.ones(len(small[4]), dtype=np.float32))
    b = _small_opt(small, max_iter=3).fit(small[3], small[4])
    np.testing.assert_allclose(a.trained_coef_[small[2][0]], b.trained_coef_[small[2][0]], rtol=1e-5, atol=1e-6)
    c = OrtGradientOptimizer(weighted, small[2], learning_rate=_sgd(1e-3), max_iter=3, random_state=0)
    c.fit(small[3], small[4], sample_weight=np.linspace(0, 2, len(small[4])).astype(np.float32))
    assert not np.allclose(c.trained_coef_[small[2][0]], b.trained_coef_[small[2][0]])


@pytest.mark.parametrize("use_numpy", [False, True])
def test_divergence_raises_convergence_error(small, use_numpy):
    opt = _small_opt(small, learning_rate=_sgd(1e6), max_iter=10)
    with pytest.raises(ConvergenceError, match=r"at iteration \d+"):
        opt.fit(small[3] * 1e3, small[4], use_numpy=use_numpy)


def test_constructor_and_fit_errors(small):
    with pytest.raises(NotImplementedError, match="LearningRateSGDNesterov"):
        OrtGradientOptimizer(small[1], small[2], learning_rate="SGDNesterov")
    with pytest.raises(ValueError, match="Unexpected BaseLearningRate 'Adagrad'"):
        OrtGradientOptimizer(small[1], small[2], learning_rate="Adagrad")
    with pytest.raises(ValueError, match="device='cuda'"):
        OrtGradientOptimizer(small[1], small[2], device="cuda")
    X, y = small[3], small[4]
    for kw, err, msg in [({"max_iter": 0}, ValueError, "max_iter"), ({"batch_size": -1}, ValueError, "batch_size"),
                         ({"training_optimizer_name": "AdamOptimizer"}, NotImplementedError, "AdamOptimizer"),
                         ({"loss_output_name": "nope"}, ValueError, "loss_output_name='nope'"),
                         ({"validation_every": 0}, ValueError, "validation_every")]:
        with pytest.raises(err, match=msg):
            _small_opt(small, **kw).fit(X, y)
    with pytest.raises(ValueError, match="not initializers"):
        OrtGradientOptimizer(small[1], ["w_unknown"]).fit(X, y)
    with pytest.raises(TypeError, match="ModelProto"):
        OrtGradientOptimizer(b"bytes", small[2]).fit(X, y)
    with pytest.raises(ValueError, match="same number of rows"):
        _small_opt(small).fit(X, y[:10])
    with pytest.raises(ValueError, match="expected 2"):
        _small_opt(small).fit(X, y, sample_weight=np.ones(len(y), dtype=np.float32))
    with pytest.raises(ValueError, match="sample_weight must have shape"):
        _small_opt(small).fit(X, y, sample_weight=np.ones(3))
    with pytest.raises(ValueError, match="given together"):
        _small_opt(small).fit(X, y, X_val=X)
    with pytest.raises(AttributeError, match="fit must be called"):
        _small_opt(small).get_state()
    with pytest.raises(AttributeError, match="fit must be called"):
        _small_opt(small).set_state({})


def test_sklearn_protocol(small, tmp_path, capsys):
    opt = _small_opt(small, batch_size=9)
    params = opt.get_params()
    assert params["batch_size"] == 9 and params["learning_rate__eta0"] == 1e-3
    c = clone(opt)
    assert c.batch_size == 9 and c.learning_rate is not opt.learning_rate
    c.set_params(learning_rate__eta0=0.01, max_iter=2, learning_rate="SGD")
    assert isinstance(c.learning_rate, LearningRateSGD) and c.max_iter == 2
    with pytest.raises(ValueError, match="Invalid parameter 'nope'"):
        c.set_params(nope=1)
    opt.fit(small[3], small[4])
    back = pickle.loads(pickle.dumps(opt))
    assert not hasattr(back, "train_session_")
    for k in small[2]:
        np.testing.assert_array_equal(back.get_state()[k], opt.get_state()[k])
    assert back.score(small[3], small[4]) == pytest.approx(opt.score(small[3], small[4]), rel=1e-6)
    grid = GridSearchCV(_small_opt(small, max_iter=3), {"learning_rate": [_sgd(1e-6), _sgd(1e-3)],
                                                        "batch_size": [5, 50]}, cv=2)
    grid.fit(small[3], small[4])
    assert grid.best_params_["learning_rate"].eta0 == 1e-3
    path = str(tmp_path / "grad.onnx")
    _small_opt(small, max_iter=1, verbose=2, saved_gradient=path).fit(small[3], small[4])
    assert os.path.exists(path) and os.path.exists(path + ".training.onnx")
    err = capsys.readouterr().err
    assert "1/1" in err and "loss=" in err
