"""onnxtrain.sklearn building blocks: learning losses, penalties, learning rates, OrtDataLoader,
against numpy double-precision formulas."""
import pickle

import numpy as np
import pytest

sk = pytest.importorskip("sklearn")
from sklearn.base import clone  # noqa: E402

from onnxtrain.sklearn import (AbsoluteLearningLoss, BaseLearningLoss, BaseLearningPenalty,  # noqa: E402
                               BaseLearningRate, ElasticLearningLoss, ElasticLearningPenalty, LearningRateSGD,
                               LearningRateSGDNesterov, NegLogLearningLoss, NoLearningPenalty, OrtDataLoader,
                               SquareLearningLoss)

rng = np.random.default_rng(0)
EXP = rng.standard_normal((7, 1)).astype(np.float32)
PRED = rng.standard_normal((7, 1)).astype(np.float32)
W = rng.uniform(0.5, 2, 7).astype(np.float32)


def _ref(loss, e, p):
    d = p.astype(np.float64) - e
    if isinstance(loss, SquareLearningLoss):
        return d * d, 2 * d
    if isinstance(loss, AbsoluteLearningLoss):
        return np.abs(d), np.sign(d)
    if isinstance(loss, ElasticLearningLoss):
        return loss.l1_weight * np.abs(d) + loss.l2_weight * d * d, loss.l1_weight * np.sign(d) + 2 * loss.l2_weight * d
    pr = 1 / (1 + np.exp(-p.astype(np.float64)))
    pc = np.clip(pr, loss.eps, 1 - loss.eps)
    return -(e * np.log(pc) + (1 - e) * np.log(1 - pc)), pr - e


@pytest.mark.parametrize("loss", [SquareLearningLoss(), AbsoluteLearningLoss(), ElasticLearningLoss(0.3, 0.7),
                                  NegLogLearningLoss()])
@pytest.mark.parametrize("weighted", [False, True])
def test_loss_gradient_scores(loss, weighted):
    expected = (EXP > 0).astype(np.float32) if isinstance(loss, NegLogLearningLoss) else EXP
    loss.build_onnx_function(15, "cpu", "weight" if weighted else None)
    w = W if weighted else None
    value, grad = loss.loss_gradient("cpu", expected, PRED, weight=w)
    ref_l, ref_g = _ref(loss, expected, PRED)
    f = W.reshape((-1, 1)) if weighted else 1
    np.testing.assert_allclose(float(value.numpy()), (ref_l * f).sum(), rtol=1e-5)
    np.testing.assert_allclose(grad.numpy(), ref_g * f, rtol=1e-5, atol=1e-6)
    scores = loss.loss_scores("cpu", expected, PRED, weight=w).numpy()
    np.testing.assert_allclose(scores, (ref_l * f).ravel(), rtol=1e-5, atol=1e-7)
    # 1-D expected values against [N, 1] predictions are not broadcast to [N, N]
    value1, _ = loss.loss_gradient("cpu", expected.ravel(), PRED, weight=w)
    np.testing.assert_allclose(float(value1.numpy()), float(value.numpy()), rtol=1e-6)


def test_neglog_int64_labels_and_finite_difference():
    loss = NegLogLearningLoss()
    loss.build_onnx_function(15, "cpu", None)
    labels = (EXP > 0).astype(np.int64)
    v, g = loss.loss_gradient("cpu", labels, PRED)
    v2, _ = loss.loss_gradient("cpu", labels.astype(np.float32), PRED)
    assert float(v.numpy()) == pytest.approx(float(v2.numpy()), rel=1e-6)
    eps = 1e-3
    for i in range(3):
        pp, pm = PRED.copy(), PRED.copy()
        pp[i] += eps
        pm[i] -= eps
        fd = (float(loss.loss_gradient("cpu", labels, pp)[0].numpy()) -
              float(loss.loss_gradient("cpu", labels, pm)[0].numpy())) / (2 * eps)
        assert g.numpy()[i, 0] == pytest.approx(fd, rel=1e-2, abs=1e-3)


def test_loss_errors():
    with pytest.raises(ValueError, match="Unexpected BaseLearningLoss 'nope'"):
        BaseLearningLoss.select("nope")
    with pytest.raises(RuntimeError, match="build_onnx_function"):
        SquareLearningLoss().loss_gradient("cpu", EXP, PRED)
    loss = SquareLearningLoss()
    loss.build_onnx_function(15, "cpu", None)
    with pytest.raises(ValueError, match="weight was given"):
        loss.loss_gradient("cpu", EXP, PRED, weight=W)
    with pytest.raises(NotImplementedError, match="probability_function='softmax'"):
        NegLogLearningLoss(probability_function="softmax").build_onnx_function(15, "cpu", None)
    with pytest.raises(ValueError, match="l1_weight"):
        ElasticLearningLoss(l1_weight=-1).build_onnx_function(15, "cpu", None)


def test_loss_select_aliases():
    for name, cls in [("square_error", SquareLearningLoss), ("square", SquareLearningLoss),
                      ("absolute_error", AbsoluteLearningLoss), ("elastic", ElasticLearningLoss),
                      ("log", NegLogLearningLoss), ("NegLogLearningLoss", NegLogLearningLoss)]:
        assert type(BaseLearningLoss.select(name)) is cls
    inst = ElasticLearningLoss()
    assert BaseLearningLoss.select(inst) is inst
    assert BaseLearningLoss.select("elastic", l1_weight=0.1).l1_weight == 0.1


def test_penalties():
    assert type(BaseLearningPenalty.select(None)) is NoLearningPenalty
    assert type(BaseLearningPenalty.select("l1l2")) is ElasticLearningPenalty
    with pytest.raises(ValueError, match="Unexpected BaseLearningPenalty"):
        BaseLearningPenalty.select("l3")
    none = NoLearningPenalty()
    none.build_onnx_function(15, "cpu", 2)
    assert none.penalty_loss("cpu", 5.0, EXP) == 5.0
    pen = ElasticLearningPenalty(l1=0.1, l2=0.2)
    pen.build_onnx_function(15, "cpu", 2)
    w0, w1 = EXP.astype(np.float64), PRED.astype(np.float64)
    loss = np.array([3.0], dtype=np.float32)
    got = float(pen.penalty_loss("cpu", loss, EXP, PRED).numpy())
    ref = 3 + sum(0.1 * np.abs(w).sum() + 0.2 * (w * w).sum() for w in (w0, w1))
    assert got == pytest.approx(ref, rel=1e-6)
    np.testing.assert_allclose(pen.update_weights("cpu", EXP).numpy(), w0 * (1 - 0.4) - 0.1 * np.sign(w0), rtol=1e-6)
    np.testing.assert_allclose(pen.update_weights("cpu", EXP, 0.5).numpy(), w0 - 0.5 * (0.1 * np.sign(w0) + 0.4 * w0),
                               rtol=1e-6)
    with pytest.raises(ValueError, match="1 weights given"):
        pen.penalty_loss("cpu", loss, EXP)
    with pytest.raises(ValueError, match="l2 must be"):
        ElasticLearningPenalty(l2="x").build_onnx_function(15, "cpu", 1)
    with pytest.raises(RuntimeError, match="build_onnx_function"):
        ElasticLearningPenalty().update_weights("cpu", EXP)


def _sklearn_like(lr, n):
    """Reference schedule: value before iteration t (onnxcustom's update after every iteration)."""
    out, v = [], lr.eta0
    for t in range(n):
        out.append(v)
        if lr.learning_rate == "invscaling":
            v = lr.eta0 / (t + 1) ** lr.power_t
        elif lr.learning_rate == "optimal":
            typw = np.sqrt(1.0 / np.sqrt(lr.alpha))
            init = 1.0 / (typw / max(1.0, (1 + typw) * 2) * lr.alpha)
            v = lr.eta0 * lr.alpha * init / (lr.alpha * (init + t))
    return out


@pytest.mark.parametrize("schedule", ["constant", "invscaling", "optimal"])
def test_learning_rate_schedules(schedule):
    lr = LearningRateSGD(eta0=0.1, alpha=0.01, power_t=0.5, learning_rate=schedule)
    got = list(lr.loop(6))
    np.testing.assert_allclose(got, _sklearn_like(lr, 6), rtol=1e-12)
    assert got[0] == 0.1
    if schedule != "constant":
        assert got[-1] < got[1]


def test_learning_rate_updates():
    lr = LearningRateSGD(eta0=0.2, learning_rate="constant")
    lr.build_onnx_function(15, "cpu", 2)
    lr.init_learning_rate()
    np.testing.assert_allclose(lr.update_weights("cpu", EXP, PRED, 4).numpy(), EXP - 0.05 * PRED, rtol=1e-6)
    ws, vs = lr.update_all_weights("cpu", [EXP, PRED], [PRED, EXP], 4)
    assert vs is None
    np.testing.assert_allclose(ws[1].numpy(), PRED - 0.05 * EXP, rtol=1e-6)
    for nesterov in (True, False):
        nl = LearningRateSGDNesterov(eta0=0.2, learning_rate="constant", momentum=0.9, nesterov=nesterov)
        nl.build_onnx_function(15, "cpu", 2)
        nl.init_learning_rate()
        vel = W.reshape((-1, 1))
        new_v = 0.9 * vel - 0.05 * PRED
        ref_w = EXP + (0.9 * new_v - 0.05 * PRED if nesterov else new_v)
        w1, v1 = nl.update_weights("cpu", EXP, PRED, 4, vel)
        np.testing.assert_allclose(v1.numpy(), new_v, rtol=1e-6)
        np.testing.assert_allclose(w1.numpy(), ref_w, rtol=1e-6, atol=1e-7)
        ws, vs = nl.update_all_weights("cpu", [EXP, EXP], [PRED, PRED], 4, [vel, vel])
        np.testing.assert_allclose(ws[1].numpy(), ref_w, rtol=1e-6, atol=1e-7)
        with pytest.raises(ValueError, match="velocity is required"):
            nl.update_weights("cpu", EXP, PRED, 4)
    with pytest.raises(ValueError, match="velocity must be None"):
        lr.update_weights("cpu", EXP, PRED, 4, EXP)


def test_learning_rate_select_and_errors():
    assert type(BaseLearningRate.select("SGD")) is LearningRateSGD
    assert type(BaseLearningRate.select("Nesterov")) is LearningRateSGDNesterov
    assert type(BaseLearningRate.select("LearningRateSGDNesterov")) is LearningRateSGDNesterov
    assert BaseLearningRate.select(0.5).eta0 == 0.5
    with pytest.raises(ValueError, match="Unexpected BaseLearningRate 'Adam'"):
        BaseLearningRate.select("Adam")
    with pytest.raises(ValueError, match="learning_rate='adaptive'"):
        LearningRateSGD(learning_rate="adaptive")
    with pytest.raises(ValueError, match="eta0 must be > 0"):
        LearningRateSGD(eta0=0)
    with pytest.raises(ValueError, match="momentum"):
        LearningRateSGDNesterov(momentum=-1)
    with pytest.raises(RuntimeError, match="init_learning_rate was never called"):
        LearningRateSGD().value  # noqa: B018


def test_blocks_sklearn_protocol_and_pickle():
    lr = LearningRateSGDNesterov(eta0=0.3, momentum=0.5)
    assert lr.get_params()["momentum"] == 0.5
    c = clone(lr)
    assert c is not lr and c.get_params() == lr.get_params()
    lr.set_params(momentum=0.7)
    assert lr.momentum == 0.7
    with pytest.raises(ValueError, match="Invalid parameter 'foo'"):
        lr.set_params(foo=1)
    lr.build_onnx_function(15, "cpu", 1)
    lr.init_learning_rate()
    back = pickle.loads(pickle.dumps(lr))
    assert back.get_params() == lr.get_params() and not hasattr(back, "axpyw_fct_")
    assert "momentum=0.7" in repr(lr)


def test_data_loader():
    X = np.arange(40, dtype=np.float32).reshape((20, 2))
    y = np.arange(20, dtype=np.float32)
    w = np.ones(20, dtype=np.float32)
    dl = OrtDataLoader(X, y, sample_weight=w, batch_size=6, random_state=3)
    assert len(dl) == 20 and dl.n_batches == 4
    seen = []
    for bx, by, bw in dl.iter_numpy(0):
        np.testing.assert_array_equal(bx[:, 0] / 2, by[:, 0])
        seen.extend(by[:, 0].tolist())
    assert sorted(seen) == list(range(20)) and seen != list(range(20))
    again = [b[1][:, 0].tolist() for b in dl.iter_numpy(0)]
    assert sum(again, []) == seen  # reproducible from the seed and the epoch
    other = sum([b[1][:, 0].tolist() for b in dl.iter_numpy(1)], [])
    assert other != seen
    batches = list(dl.iter_ortvalue(0))
    assert [b[0].shape() for b in batches] == [[6, 2], [6, 2], [6, 2], [2, 2]]
    np.testing.assert_array_equal(batches[0][1].numpy()[:, 0], seen[:6])
    ordered = OrtDataLoader(X, y, batch_size=6, random_iter=False)
    assert sum([b[1][:, 0].tolist() for b in ordered.iter_numpy()], []) == list(range(20))
    assert len(ordered.data_ort) == 2 and ordered.data_ort[0].shape() == [20, 2]
    back = pickle.loads(pickle.dumps(dl))
    assert sum([b[1][:, 0].tolist() for b in back.iter_numpy(0)], []) == seen
    with pytest.raises(ValueError, match="shape mismatch"):
        OrtDataLoader(X, y[:5])
    with pytest.raises(ValueError, match="sample_weight.shape"):
        OrtDataLoader(X, y, sample_weight=w[:3])
    with pytest.raises(ValueError, match="batch_size"):
        OrtDataLoader(X, y, batch_size=0)
    with pytest.raises(ValueError, match="device='cuda'"):
        OrtDataLoader(X, y, device="cuda")
