"""ai.onnx.ml TreeEnsembleRegressor / TreeEnsembleClassifier on scikit-learn models converted as
skl2onnx converts them (skl2onnx is not installed: the converter below emits the nodes and
attributes skl2onnx's tree converters emit, classifiers with skl2onnx's default zipmap=True), against
scikit-learn's predict and predict_proba.

skl2onnx writes float32 thresholds adjusted so that float32(x) <= t holds exactly when scikit-learn's
float32(x) <= threshold (a double) does, so labels match exactly; scores are float32 sums.
"""
import time

import numpy as np
import pytest

pytest.importorskip("sklearn")
from onnx import TensorProto, TypeProto, helper, numpy_helper  # noqa: E402
from sklearn.datasets import make_classification, make_regression  # noqa: E402
from sklearn.ensemble import (ExtraTreesRegressor, GradientBoostingClassifier,  # noqa: E402
                              GradientBoostingRegressor, RandomForestClassifier, RandomForestRegressor)
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor  # noqa: E402

import onnxtrain  # noqa: E402

XR, YR = make_regression(300, 6, n_targets=1, noise=0.1, random_state=0)
XR = XR.astype(np.float32)
XC, YC = make_classification(300, 6, n_informative=4, n_classes=3, random_state=1)
XC = XC.astype(np.float32)
XB, YB = make_classification(300, 6, n_informative=4, n_classes=2, random_state=2)
XB = XB.astype(np.float32)
RNG = np.random.default_rng(3)


# ---- the converter (skl2onnx's common/tree_ensemble.py, decision_tree.py, random_forest.py and
# gradient_boosting.py, for float32 inputs)
def _threshold(t):
    """skl2onnx's sklearn_threshold for float32 and BRANCH_LEQ: the float w with x <= t <=> x <= w."""
    f = np.float32(t)
    if f <= t:
        return float(f)
    eps = max(abs(f), np.finfo(np.float32).eps) * 10
    return float(np.nextafter(f, np.float32(f - eps), dtype=np.float32))


def _empty_attrs(classifier):
    w = "class_" if classifier else "target_"
    keys = ["nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
            "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true", "nodes_hitrates",
            w + "treeids", w + "nodeids", w + "ids", w + "weights"]
    return {k: [] for k in keys}


def _add_tree(attrs, classifier, tree, tree_id, tree_weight, bias, counts):
    w = "class_" if classifier else "target_"
    for i in range(tree.node_count):
        branch = tree.children_left[i] > i or tree.children_right[i] > i
        attrs["nodes_treeids"].append(tree_id)
        attrs["nodes_nodeids"].append(i)
        attrs["nodes_featureids"].append(int(tree.feature[i]) if branch else 0)
        attrs["nodes_modes"].append("BRANCH_LEQ" if branch else "LEAF")
        attrs["nodes_values"].append(_threshold(tree.threshold[i]) if branch else 0.0)
        attrs["nodes_truenodeids"].append(int(tree.children_left[i]) if branch else 0)
        attrs["nodes_falsenodeids"].append(int(tree.children_right[i]) if branch else 0)
        attrs["nodes_missing_value_tracks_true"].append(0)
        attrs["nodes_hitrates"].append(1.0)
        if branch:
            continue
        weights = tree.value[i].flatten()
        factor = tree_weight
        if counts:
            s = weights.sum()
            factor /= float(s) if s != 0 else 1.0
        weights = [v * factor for v in weights]
        if classifier and len(weights) == 2:
            weights = [weights[1]]  # binary: the positive class's column only
        for k, v in enumerate(weights):
            attrs[w + "treeids"].append(tree_id)
            attrs[w + "nodeids"].append(i)
            attrs[w + "ids"].append(k + bias)
            attrs[w + "weights"].append(float(v))


def _labels(attrs, classes):
    if all(isinstance(c, str) for c in classes):
        attrs["classlabels_strings"] = [str(c) for c in classes]
    else:
        attrs["classlabels_int64s"] = [int(c) for c in classes]


def convert(est, n_features, zipmap=True):
    """The ONNX model skl2onnx writes for `est`; classifiers with zipmap=True (skl2onnx's default)
    return their probabilities through a ZipMap (a list of {label: probability} dicts)."""
    name = type(est).__name__
    classifier = name.endswith("Classifier")
    attrs = _empty_attrs(classifier)
    if name.startswith("DecisionTree"):
        _add_tree(attrs, classifier, est.tree_, 0, 1.0, 0, classifier)
    elif name.startswith(("RandomForest", "ExtraTrees")):
        for t, e in enumerate(est.estimators_):
            _add_tree(attrs, classifier, e.tree_, t, 1.0 / len(est.estimators_), 0, classifier)
    elif name == "GradientBoostingRegressor":
        attrs["base_values"] = [float(v) for v in np.ravel(est.init_.constant_)]
        for t in range(est.n_estimators_):
            _add_tree(attrs, False, est.estimators_[t][0].tree_, t, est.learning_rate, 0, False)
    elif name == "GradientBoostingClassifier":
        attrs["base_values"] = [float(v) for v in est._raw_predict_init(np.zeros((1, n_features))).ravel()]
        attrs["post_transform"] = "LOGISTIC" if est.n_classes_ == 2 else "SOFTMAX"
        k = est.n_classes_ if est.n_classes_ > 2 else 1
        for i in range(est.n_estimators_):
            for c in range(k):
                _add_tree(attrs, True, est.estimators_[i][c].tree_, i * k + c, est.learning_rate, c, False)
    else:
        raise NotImplementedError(name)
    X = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", n_features])
    if classifier:
        _labels(attrs, list(est.classes_))
        label_type = TensorProto.STRING if "classlabels_strings" in attrs else TensorProto.INT64
        node = helper.make_node("TreeEnsembleClassifier", ["X"], ["label", "probabilities"], domain="ai.onnx.ml",
                                name="trees", **attrs)
        outputs = [helper.make_tensor_value_info("label", label_type, ["N"]),
                   helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", len(est.classes_)])]
        if zipmap:
            labels = {k: v for k, v in attrs.items() if k.startswith("classlabels_")}
            zip_node = helper.make_node("ZipMap", ["probabilities"], ["output_probability"], domain="ai.onnx.ml",
                                        name="zipmap", **labels)
            t = TypeProto()
            t.sequence_type.elem_type.map_type.key_type = label_type
            t.sequence_type.elem_type.map_type.value_type.CopyFrom(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
            outputs[1] = helper.make_value_info("output_probability", t)
            node = [node, zip_node]
    else:
        n_targets = getattr(est, "n_outputs_", 1)
        node = helper.make_node("TreeEnsembleRegressor", ["X"], ["variable"], domain="ai.onnx.ml", name="trees",
                                n_targets=n_targets, **attrs)
        outputs = [helper.make_tensor_value_info("variable", TensorProto.FLOAT, ["N", n_targets])]
    graph = helper.make_graph(node if isinstance(node, list) else [node], name, [X], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 8
    return model


def _run(model, X):
    return onnxtrain.InferenceSession(model.SerializeToString()).run(None, {"X": X})


def _held_out(X):
    return (X + RNG.normal(0, 0.3, X.shape)).astype(np.float32)


# ---- regressors
@pytest.mark.parametrize("est", [DecisionTreeRegressor(max_depth=8, random_state=0),
                                 RandomForestRegressor(n_estimators=20, max_depth=6, random_state=0),
                                 ExtraTreesRegressor(n_estimators=20, max_depth=6, random_state=0),
                                 GradientBoostingRegressor(n_estimators=30, max_depth=3, random_state=0)],
                         ids=lambda e: type(e).__name__)
def test_regressors(est):
    est.fit(XR, YR)
    model = convert(est, XR.shape[1])
    for X in (XR, _held_out(XR)):
        (pred,) = _run(model, X)
        assert pred.shape == (len(X), 1) and pred.dtype == np.float32
        np.testing.assert_allclose(pred.ravel(), est.predict(X), rtol=1e-5, atol=1e-5 * np.abs(YR).max())


def test_multi_target_decision_tree():
    Y2 = np.stack([YR, np.sin(YR / 50)], axis=1)
    est = DecisionTreeRegressor(max_depth=6, random_state=0).fit(XR, Y2)
    (pred,) = _run(convert(est, XR.shape[1]), XR)
    assert pred.shape == (len(XR), 2)
    np.testing.assert_allclose(pred, est.predict(XR), rtol=1e-5, atol=1e-4)


# ---- classifiers
def _unzip(dicts, classes):
    """ZipMap's output as onnxruntime returns it (a list of dicts, keys in sorted order, Python
    floats) checked, then as an array in the order of `classes`."""
    keys = [c if isinstance(c, str) else int(c) for c in classes]
    assert isinstance(dicts, list)
    assert all(type(d) is dict and list(d) == sorted(keys) for d in dicts)
    assert all(type(v) is float for d in dicts for v in d.values())
    return np.array([[d[k] for k in keys] for d in dicts], dtype=np.float32).reshape(len(dicts), len(keys))


def _check_classifier(est, X):
    label, dicts = _run(convert(est, X.shape[1]), X)
    proba = _unzip(dicts, est.classes_)
    expected = est.predict_proba(X)
    assert proba.shape == expected.shape and proba.dtype == np.float32
    np.testing.assert_allclose(proba, expected, rtol=1e-5, atol=1e-5)
    # Labels where the best class is clear (probabilities summed in float32 may break exact ties).
    top = np.sort(expected, axis=1)
    clear = top[:, -1] - top[:, -2] > 1e-4
    assert clear.mean() > 0.8
    np.testing.assert_array_equal(label[clear], est.predict(X)[clear])
    return label


@pytest.mark.parametrize("make", [lambda: DecisionTreeClassifier(max_depth=6, random_state=0),
                                  lambda: RandomForestClassifier(n_estimators=15, max_depth=6, random_state=0),
                                  lambda: GradientBoostingClassifier(n_estimators=20, max_depth=3, random_state=0)],
                         ids=["DecisionTree", "RandomForest", "GradientBoosting"])
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "multiclass"])
def test_classifiers(make, binary):
    X, y = (XB, YB) if binary else (XC, YC)
    y = np.where(y == 1, 9, y) if binary else y + 3  # labels other than 0..C-1
    est = make().fit(X, y)
    for data in (X, _held_out(X)):
        _check_classifier(est, data)


def test_string_labels():
    names = np.array(["ant", "bee", "cat"])
    est = RandomForestClassifier(n_estimators=9, max_depth=5, random_state=0).fit(XC, names[YC])
    label = _check_classifier(est, _held_out(XC))
    assert label.dtype == object and set(label) <= set(names)


def test_one_row_and_empty_batch():
    est = GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0).fit(XB, YB)
    model = convert(est, XB.shape[1])
    label, proba = _run(model, XB[:1])
    np.testing.assert_allclose(_unzip(proba, est.classes_), est.predict_proba(XB[:1]), rtol=1e-5, atol=1e-6)
    label, proba = _run(model, XB[:0])
    assert label.shape == (0,) and proba == []
    label, proba = _run(convert(est, XB.shape[1], zipmap=False), XB[:0])  # zipmap=False: the tensor
    assert label.shape == (0,) and proba.shape == (0, 2)


def test_double_input_with_double_attributes():
    """ai.onnx.ml opset 3: thresholds and weights as double tensors, double input."""
    est = DecisionTreeRegressor(max_depth=8, random_state=0).fit(XR, YR)
    t = est.tree_
    branch = (t.children_left > np.arange(t.node_count)) | (t.children_right > np.arange(t.node_count))
    leaves = np.flatnonzero(~branch)
    node = helper.make_node(
        "TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml", n_targets=1,
        nodes_treeids=[0] * t.node_count, nodes_nodeids=list(range(t.node_count)),
        nodes_featureids=[int(f) if b else 0 for f, b in zip(t.feature, branch)],
        nodes_modes=["BRANCH_LEQ" if b else "LEAF" for b in branch],
        nodes_truenodeids=[int(c) if b else 0 for c, b in zip(t.children_left, branch)],
        nodes_falsenodeids=[int(c) if b else 0 for c, b in zip(t.children_right, branch)],
        nodes_values_as_tensor=numpy_helper.from_array(np.where(branch, t.threshold, 0.0)),
        target_treeids=[0] * len(leaves), target_nodeids=[int(i) for i in leaves], target_ids=[0] * len(leaves),
        target_weights_as_tensor=numpy_helper.from_array(t.value[leaves, 0, 0].astype(np.float64)),
        base_values_as_tensor=numpy_helper.from_array(np.array([1e-9])))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.DOUBLE, ["N", 6])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    X = _held_out(XR).astype(np.float64)  # float32 values: scikit-learn compares float32(x) too
    (pred,) = _run(model, X)
    np.testing.assert_allclose(pred.ravel(), est.predict(X), rtol=1e-6, atol=1e-4)


def test_malformed_model_is_refused():
    est = DecisionTreeRegressor(max_depth=3, random_state=0).fit(XR, YR)
    model = convert(est, XR.shape[1])
    attr = next(a for a in model.graph.node[0].attribute if a.name == "nodes_truenodeids")
    attr.ints[0] = 0  # the root's true child is the root
    with pytest.raises(Exception, match="form a cycle"):
        _run(model, XR)


def test_forest_speed():
    """A random forest of 100 trees over 10,000 rows runs in milliseconds (about 20 ms on one idle core;
    the bound only catches a pathological slowdown, as shared machines vary tenfold)."""
    X, y = make_regression(10000, 10, random_state=4)
    X = X.astype(np.float32)
    est = RandomForestRegressor(n_estimators=100, max_depth=10, random_state=0, n_jobs=1).fit(X[:2000], y[:2000])
    sess = onnxtrain.InferenceSession(convert(est, 10).SerializeToString())
    sess.run(None, {"X": X})
    t0 = time.perf_counter()
    (pred,) = sess.run(None, {"X": X})
    elapsed = time.perf_counter() - t0
    print(f"100 trees x 10000 rows: {elapsed * 1e3:.1f} ms")
    np.testing.assert_allclose(pred.ravel(), est.predict(X), rtol=1e-5, atol=1e-5 * np.abs(y).max())
    assert elapsed < 5.0
