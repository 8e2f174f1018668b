"""onnxtrain.Trainer from Python: weights against numpy gradient descent, run sizes, the data order
from the seed, validation against numpy, callbacks, checkpoint + resume bitwise equal to an
uninterrupted run (stop request, should_stop, Ctrl-C), errors."""
import os
import signal
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain as ot


def linear(n_in=3, n_out=1, seed=0, zero=False):
    rng = np.random.default_rng(seed)
    W = np.zeros((n_in, n_out), np.float32) if zero else (0.3 * rng.standard_normal((n_in, n_out))).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["y"])], "lin",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", n_in])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", n_out])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(np.zeros(n_out, np.float32), "B")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), W


def session(model, loss="squared_error", optimizer="SGDOptimizer", **fields):
    p = ot.TrainingParameters()
    p.loss_output_name = "loss"
    p.training_optimizer_name = optimizer
    for k, v in fields.items():
        setattr(p, k, v)
    return ot.TrainingSession(ot.add_loss_output(model, loss, reduction="mean").SerializeToString(), p)


def regression(n=40, n_in=3, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, n_in)).astype(np.float32)
    t = (X @ np.arange(1, n_in + 1, dtype=np.float32)[:, None] * 0.5 + 0.2
         + 0.05 * rng.standard_normal((n, 1))).astype(np.float32)
    return {"X": X, "label": t}


def classes(n=60, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 4)).astype(np.float32)
    y = np.where(X[:, 0] + X[:, 1] > 0.3, 0, np.where(X[:, 2] > X[:, 3], 1, 2)).astype(np.int64)
    return {"X": X, "label": y}


def numpy_eval(state, data, classify):
    """Loss and metric in float64 from the weights: mean squared error and R², or mean softmax
    cross-entropy and accuracy."""
    z = data["X"].astype(np.float64) @ state["W"].astype(np.float64) + state["B"].astype(np.float64)
    y = data["label"]
    if classify:
        zs = z - z.max(1, keepdims=True)
        logp = zs - np.log(np.exp(zs).sum(1, keepdims=True))
        return -logp[np.arange(len(y)), y].mean(), (z.argmax(1) == y).mean()
    res = ((z - y) ** 2).sum(0)
    tot = ((y - y.mean(0)) ** 2).sum(0)
    return ((z - y) ** 2).mean(), (1 - res / tot).mean()


def test_full_batch_training_matches_numpy_gradient_descent():
    model, W = linear()
    s = session(model)
    data = regression()
    t = ot.Trainer(s, batch_size=40, steps=15, learning_rate=0.1, shuffle=False)
    r = t.fit(data)
    assert r.steps == 15 and not r.stopped and r.samples == 15 * 40
    Wd, Bd = W.astype(np.float64), np.zeros(1)
    X, y = data["X"].astype(np.float64), data["label"].astype(np.float64)
    for _ in range(15):
        e = X @ Wd + Bd - y
        Wd, Bd = Wd - 0.1 * 2 * X.T @ e / e.size, Bd - 0.1 * 2 * e.sum(0) / e.size
    st = s.get_state()
    np.testing.assert_allclose(st["W"], Wd, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(st["B"], Bd, rtol=1e-4, atol=1e-6)


def test_run_sizes_and_callbacks():
    model, _ = linear()
    s = session(model)
    steps, epochs, records = [], [], []
    t = ot.Trainer(s, batch_size=16, epochs=3, learning_rate=0.05, score_output="y", metric="r2")
    r = t.fit(regression(), on_step=steps.append, on_epoch_end=epochs.append, on_record=records.append)
    # 40 samples in batches of 16: 3 batches an epoch.
    assert r.steps == 9 == s.step == len(steps)
    assert [x.batch for x in steps] == [1, 2, 3] * 3
    assert [x.epoch for x in steps] == [0] * 3 + [1] * 3 + [2] * 3
    assert [x.samples for x in steps][:3] == [16, 32, 40]
    assert all(x.updated and x.lr == pytest.approx(0.05) for x in steps)
    assert [e.epoch for e in epochs] == [0, 1, 2]
    for e in epochs:
        batch_losses = [x.loss for x in steps if x.epoch == e.epoch]
        assert e.loss == pytest.approx(np.mean(batch_losses), rel=1e-12)
        assert np.isnan(e.val_loss)
    assert len(records) == len(t.history) >= 3
    assert t.history[-1].step == 9 and t.history[-1].epoch == 3.0
    plan = ot.Trainer.plan(t.options, 40)
    assert (plan.batches_per_epoch, plan.total_steps, plan.epochs) == (3, 9, 3)


def order_of(seed, shuffle=True, epochs=3):
    """The data order the trainer draws, read from the losses: zero weights and a learning rate
    of 0 give batch i (one sample) the loss t_i^2, with t_i = i + 1."""
    model, _ = linear(n_in=1, zero=True)
    s = session(model)
    n = 8
    data = {"X": np.zeros((n, 1), np.float32), "label": np.arange(1, n + 1, dtype=np.float32)[:, None]}
    order = [[] for _ in range(epochs)]
    t = ot.Trainer(s, batch_size=1, epochs=epochs, learning_rate=0.0, seed=seed, shuffle=shuffle)
    t.fit(data, on_step=lambda x: order[x.epoch].append(int(round(np.sqrt(x.loss))) - 1))
    return order


def test_shuffling_is_reproducible_from_the_seed_and_differs_across_epochs():
    a, b, c = order_of(5), order_of(5), order_of(6)
    assert a == b and a != c
    assert all(sorted(e) == list(range(8)) for e in a)
    assert a[0] != a[1] != a[2]
    assert order_of(5, shuffle=False) == [list(range(8))] * 3


def test_validation_and_evaluate_match_numpy():
    model, _ = linear(n_in=4, n_out=3)
    s = session(model, "cross_entropy", "AdamOptimizer")
    train, val = classes(60, 1), classes(23, 2)
    seen = []

    def check(e):
        loss, acc = numpy_eval(s.get_state(), val, True)
        assert e.val_loss == pytest.approx(loss, rel=1e-5)
        assert e.val_metric == pytest.approx(acc, abs=1e-12)
        seen.append(e.epoch)

    validations = []
    t = ot.Trainer(s, batch_size=8, epochs=3, learning_rate=0.05, eval_batch_size=5, score_output="y",
                   metric="accuracy")
    t.fit(train, val, on_epoch_end=check, on_validation=validations.append)
    assert seen == [0, 1, 2]
    assert [v.result.samples for v in validations] == [23] * 3
    ev = t.evaluate(val)
    loss, acc = numpy_eval(s.get_state(), val, True)
    assert ev.loss == pytest.approx(loss, rel=1e-5) and ev.metric == pytest.approx(acc, abs=1e-12)
    assert ev.correct == round(acc * 23) and ev.counted == 23
    # R² on a held-out split
    model, _ = linear()
    s2 = session(model)
    t2 = ot.Trainer(s2, batch_size=8, epochs=2, learning_rate=0.05, validation_split=0.25, score_output="y",
                    metric="r2")
    t2.fit(regression())
    assert ot.Trainer.plan(t2.options, 40).validation_samples == 10
    assert np.isfinite(t2.history[-1].val_metric)


def resume_trainer(ckpt, seed=3):
    model, _ = linear(n_in=4, n_out=3, seed=seed)
    s = session(model, "cross_entropy", "AdamOptimizer")
    return s, ot.Trainer(s, batch_size=7, epochs=4, learning_rate=0.02, seed=11, score_output="y",
                         metric="accuracy", checkpoint_path=str(ckpt), checkpoint_metadata={"run": "a"})


def test_stop_and_resume_are_bitwise_the_uninterrupted_run(tmp_path):
    train, val = classes(50, 1), classes(12, 2)
    ref_s, ref = resume_trainer(tmp_path / "ref.ckpt")
    ref_epochs = []
    ref.fit(train, val, on_epoch_end=ref_epochs.append)
    # Stopped by should_stop inside epoch 2 (8 batches an epoch), then resumed in a new session.
    s1, t1 = resume_trainer(tmp_path / "c.ckpt")
    count = iter(range(1000))
    r = t1.fit(train, val, should_stop=lambda: next(count) == 11)
    assert r.stopped and r.steps == 12 and r.checkpoint == str(tmp_path / "c.ckpt")
    s2, t2 = resume_trainer(tmp_path / "c.ckpt")
    assert t2.load_checkpoint(str(tmp_path / "c.ckpt")) == {"run": "a"}
    assert (t2.step, t2.epoch, t2.batch) == (12, 1, 4)
    epochs = []
    t2.fit(train, val, on_epoch_end=epochs.append)
    a, b = ref_s.get_state(), s2.get_state()
    for k in a:
        assert a[k].tobytes() == b[k].tobytes(), k
    assert [e.loss for e in epochs] == [e.loss for e in ref_epochs[1:]]
    assert [e.val_loss for e in epochs] == [e.val_loss for e in ref_epochs[1:]]
    assert len(t2.history) == len(ref.history)
    # request_stop from a callback, then fit again in the same process.
    s3, t3 = resume_trainer(tmp_path / "d.ckpt")
    r = t3.fit(train, val, on_step=lambda x: x.step == 5 and t3.request_stop())
    assert r.stopped and r.steps == 5
    t3.fit(train, val)
    for k, v in s3.get_state().items():
        assert v.tobytes() == a[k].tobytes(), k


def test_ctrl_c_writes_a_checkpoint_then_raises_keyboard_interrupt(tmp_path):
    train = classes(50, 1)
    s, t = resume_trainer(tmp_path / "c.ckpt")

    def interrupt(x):
        if x.step == 6:
            os.kill(os.getpid(), signal.SIGINT)

    # Python only raises KeyboardInterrupt where SIGINT has its default handler: a suite started in
    # the background of a non-interactive shell (as `bash .ci/run &`) inherits SIGINT ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            t.fit(train, on_step=interrupt)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert t.step == 6 and (tmp_path / "c.ckpt").exists()
    ref_s, ref = resume_trainer(tmp_path / "ref.ckpt")
    ref.fit(train)
    s2, t2 = resume_trainer(tmp_path / "c.ckpt")
    t2.load_checkpoint(str(tmp_path / "c.ckpt"))
    t2.fit(train)
    for k, v in ref_s.get_state().items():
        assert v.tobytes() == s2.get_state()[k].tobytes(), k


def test_request_stop_from_another_thread():
    model, _ = linear()
    s = session(model)
    t = ot.Trainer(s, batch_size=1, epochs=100000, learning_rate=0.0)
    started = threading.Event()
    stopper = threading.Thread(target=lambda: (started.wait(), t.request_stop()))
    stopper.start()
    r = t.fit(regression(), on_step=lambda x: started.set())
    stopper.join()
    assert r.stopped and 0 < r.steps < 4000000


def test_callback_errors_propagate():
    model, _ = linear()
    t = ot.Trainer(session(model), batch_size=8, epochs=2, learning_rate=0.1)

    def boom(x):
        if x.step == 2:
            raise ValueError("boom from the callback")

    with pytest.raises(ValueError, match="boom from the callback"):
        t.fit(regression(), on_step=boom)


def test_errors_name_the_problem(tmp_path):
    model, _ = linear()
    s = session(model)
    with pytest.raises(ValueError, match="learning_rate"):
        ot.Trainer(s)
    with pytest.raises(AttributeError, match="batchsize"):
        ot.Trainer(s, batchsize=3, learning_rate=0.1)
    with pytest.raises(ValueError, match="TrainerOptions.batch_size"):
        ot.Trainer(s, batch_size=0, learning_rate=0.1)
    with pytest.raises(ValueError, match="metric"):
        ot.Trainer(s, learning_rate=0.1, metric="f1")
    with pytest.raises(ValueError, match="'logits'"):
        ot.Trainer(s, learning_rate=0.1, score_output="logits", metric="r2")
    t = ot.Trainer(s, learning_rate=0.1, score_output="y", metric="r2")
    with pytest.raises(TypeError, match="dict"):
        t.fit([1, 2, 3])
    with pytest.raises(ValueError, match="'label'"):
        t.fit({"X": regression()["X"]})
    with pytest.raises(ValueError, match="samples"):
        t.fit({"X": np.zeros((3, 3), np.float32), "label": np.zeros((4, 1), np.float32)})
    opts = ot.TrainerOptions()
    opts.batch_size = 5
    opts.learning_rate = 0.1
    opts.objective.score_output = "y"
    opts.objective.metric = "r2"
    t = ot.Trainer(s, opts, epochs=2)
    assert (t.options.batch_size, t.options.epochs, t.options.objective.metric) == (5, 2, "r2")
    t.fit(regression())
    t.save_checkpoint(str(tmp_path / "c.ckpt"))
    other = ot.Trainer(session(model), opts, epochs=2, seed=9)
    with pytest.raises(ValueError, match="seed"):
        other.load_checkpoint(str(tmp_path / "c.ckpt"))
    again = ot.Trainer(session(model), opts, epochs=2)
    again.load_checkpoint(str(tmp_path / "c.ckpt"))
    with pytest.raises(ValueError, match="data differs"):
        again.fit(regression(seed=7))


def test_schedule_of_the_session_gives_the_rate():
    model, _ = linear()
    s = session(model, lr_schedule="invscaling", lr_schedule_params={"eta0": 0.1, "power_t": 0.5})
    lrs = []
    ot.Trainer(s, batch_size=20, epochs=1).fit(regression(), on_step=lambda x: lrs.append(x.lr))
    assert lrs == pytest.approx([0.1, 0.1 / np.sqrt(2)], rel=1e-12)
