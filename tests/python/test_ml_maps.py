"""ai.onnx.ml map values and the operators of ai.onnx.ml opsets 4-5, through
onnxtrain.InferenceSession:

- map(K, V) / seq(map(K, V)) feeds and outputs as onnxruntime's Python API presents them: a dict
  feeds a map(int64 | string, float) input, ZipMap's seq(map) comes back as a list of dicts (keys in
  std::map order), onnxruntime's errors for bad dicts;
- ZipMap, DictVectorizer (a scikit-learn DictVectorizer pipeline against its transform / predict),
  CastMap (a numpy reference);
- LabelEncoder-4 (tensor attributes, NaN keys) against scikit-learn's LabelEncoder / a dict lookup
  and onnxruntime-node;
- TreeEnsemble-5 on scikit-learn forests converted to the opset-5 form (one target per leaf, trees
  repeated per class), a hand-made BRANCH_MEMBER model against a Python walk, and onnxruntime-node
  where it is installed (tensor outputs only: the JS API carries no maps).
"""
import math

import numpy as np
import pytest
from onnx import TensorProto, TypeProto, helper, numpy_helper
from sklearn.datasets import load_iris, make_classification, make_regression
from sklearn.ensemble import GradientBoostingClassifier, GradientBoostingRegressor, RandomForestRegressor
from sklearn.feature_extraction import DictVectorizer
from sklearn.linear_model import Ridge
from sklearn.preprocessing import LabelEncoder
from sklearn.tree import DecisionTreeRegressor

import ort_node
import onnxtrain

ML = "ai.onnx.ml"
F32, F64, I64, STR = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.STRING


def map_type(key, value):
    t = TypeProto()
    t.map_type.key_type = key
    t.map_type.value_type.CopyFrom(helper.make_tensor_type_proto(value, None))
    return t


def seq_map_type(key, value):
    t = TypeProto()
    t.sequence_type.elem_type.CopyFrom(map_type(key, value))
    return t


def model(nodes, inputs, outputs, ml_opset=1, inits=()):
    """inputs / outputs: (name, elem type or TypeProto[, shape])."""
    def info(spec):
        name, t = spec[0], spec[1]
        if isinstance(t, TypeProto):
            return helper.make_value_info(name, t)
        return helper.make_tensor_value_info(name, t, spec[2] if len(spec) > 2 else None)
    g = helper.make_graph(nodes, "g", [info(i) for i in inputs], [info(o) for o in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, ml_opset)])
    m.ir_version = 8
    return m


def session(m):
    return onnxtrain.InferenceSession(m.SerializeToString())


def need_ort_node():
    reason = ort_node.unavailable_reason()
    if reason:
        pytest.skip(reason)


# ---------------------------------------------------------------- ZipMap
@pytest.mark.parametrize("labels", [[3, 0, 7], ["b", "a", "c"]], ids=["int64", "string"])
def test_zipmap_rows_as_list_of_dicts(labels):
    strings = isinstance(labels[0], str)
    attr = dict(classlabels_strings=labels) if strings else dict(classlabels_int64s=labels)
    m = model([helper.make_node("ZipMap", ["X"], ["Z"], domain=ML, **attr)], [("X", F32, [None, 3])],
              [("Z", seq_map_type(STR if strings else I64, F32))])
    sess = session(m)
    assert sess.get_outputs()[0].type == f"seq(map({'string' if strings else 'int64'},tensor(float)))"
    x = np.random.default_rng(0).random((4, 3)).astype(np.float32)
    (z,) = sess.run(None, {"X": x})
    assert isinstance(z, list) and len(z) == 4
    for row, d in zip(x, z):
        assert isinstance(d, dict)
        # onnxruntime's std::map: keys in sorted order; values are Python floats (the float32 values).
        assert list(d) == sorted(labels)
        assert all(type(k) is (str if strings else int) for k in d)
        assert all(type(v) is float for v in d.values())
        assert d == {lab: float(v) for lab, v in zip(labels, row)}
    # One row as a 1-D input.
    m.graph.input[0].type.tensor_type.ClearField("shape")
    (z,) = session(m).run(None, {"X": x[1]})
    assert z == [{lab: float(v) for lab, v in zip(labels, x[1])}]


def test_zipmap_repeated_label_keeps_last_column_and_errors():
    m = model([helper.make_node("ZipMap", ["X"], ["Z"], domain=ML, classlabels_int64s=[5, 1, 5])], [("X", F32)],
              [("Z", seq_map_type(I64, F32))])
    (z,) = session(m).run(None, {"X": np.array([[1, 2, 3]], np.float32)})
    assert z == [{1: 2.0, 5: 3.0}]  # std::map assignment: the last column of label 5 stays
    with pytest.raises(Exception, match="3 columns but there are 2 class labels|has 2 columns but there are 3"):
        session(m).run(None, {"X": np.zeros((2, 2), np.float32)})
    with pytest.raises(Exception, match=r"\[N, C\] or \[C\]"):
        session(m).run(None, {"X": np.zeros((1, 2, 3), np.float32)})
    bad = model([helper.make_node("ZipMap", ["X"], ["Z"], domain=ML)], [("X", F32)], [("Z", seq_map_type(I64, F32))])
    with pytest.raises(Exception, match="exactly one of classlabels_strings and classlabels_int64s"):
        session(bad).run(None, {"X": np.zeros((1, 2), np.float32)})


def test_sequence_operator_on_zipmap_output_names_the_map_sequence():
    nodes = [helper.make_node("ZipMap", ["X"], ["Z"], domain=ML, classlabels_int64s=[0, 1]),
             helper.make_node("SequenceLength", ["Z"], ["n"], name="len")]
    m = model(nodes, [("X", F32)], [("n", I64)])
    with pytest.raises(Exception, match="len.*must be a sequence of tensors, got a sequence of maps"):
        session(m).run(None, {"X": np.zeros((3, 2), np.float32)})


def test_zipmap_output_as_ortvalue_and_through_iobinding():
    m = model([helper.make_node("ZipMap", ["X"], ["Z"], domain=ML, classlabels_strings=["n", "y"])], [("X", F32)],
              [("Z", seq_map_type(STR, F32))])
    sess = session(m)
    x = np.array([[0.25, 0.75]], np.float32)
    (v,) = sess.run_with_ort_values(None, {"X": onnxtrain.OrtValue.ortvalue_from_numpy(x)})
    assert v.data_type() == "seq(map(string,tensor(float)))" and not v.is_tensor()
    with pytest.raises(Exception, match="Only OrtValues that are Tensors are convertible to Numpy objects"):
        v.numpy()
    binding = sess.io_binding()
    binding.bind_cpu_input("X", x)
    binding.bind_output("Z")
    sess.run_with_iobinding(binding)
    assert binding.copy_outputs_to_cpu() == [[{"n": 0.25, "y": 0.75}]]


# ---------------------------------------------------------------- map feeds
def dict_vectorizer_model(vocab, value=F32, key=STR):
    attr = dict(string_vocabulary=vocab) if key == STR else dict(int64_vocabulary=vocab)
    return model([helper.make_node("DictVectorizer", ["M"], ["Y"], domain=ML, **attr)], [("M", map_type(key, value))],
                 [("Y", value)])


def test_map_input_type_string_and_feed_errors():
    sess = session(dict_vectorizer_model(["a", "b"]))
    assert sess.get_inputs()[0].type == "map(string,tensor(float))"
    with pytest.raises(Exception, match="Size of dictionary is empty"):
        sess.run(None, {"M": {}})
    with pytest.raises(Exception, match=r"Key type must be int or string \(not <class 'tuple'>\) for input 'M'"):
        sess.run(None, {"M": {(1, 2): 2.0}})
    # A float is a number: read as an int64 key, which it cannot be (onnxruntime's message).
    with pytest.raises(Exception, match=r"Unexpected key type  <class 'float'>, it cannot be linked to C type int64_t"):
        sess.run(None, {"M": {1.5: 2.0}})
    with pytest.raises(Exception, match=r"Unexpected value type  <class 'str'>, it cannot be linked to C type float"):
        sess.run(None, {"M": {"a": "x"}})
    with pytest.raises(Exception, match=r"has type map\(int64,tensor\(float\)\), the model expects map\(string,tensor\(float\)\)"):
        sess.run(None, {"M": {1: 2.0}})
    with pytest.raises(Exception, match="must be a map map\\(string,tensor\\(float\\)\\), got a tensor"):
        sess.run(None, {"M": np.zeros(2, np.float32)})
    # A dict fed to a tensor input.
    z = session(model([helper.make_node("ZipMap", ["X"], ["Z"], domain=ML, classlabels_int64s=[1])], [("X", F32)],
                      [("Z", seq_map_type(I64, F32))]))
    with pytest.raises(Exception, match="input 'X' must be a tensor, got a map"):
        z.run(None, {"X": {1: 1.0}})
    # Later string keys are read through str() (onnxruntime's string getter); numpy keys are ints.
    (y,) = sess.run(None, {"M": {"b": np.float64(2.5), 7: 1}})
    np.testing.assert_array_equal(y, [[0.0, 2.5]])
    (y,) = session(dict_vectorizer_model([4, 9], key=I64)).run(None, {"M": {np.int64(9): 3, 4: True}})
    np.testing.assert_array_equal(y, [[1.0, 3.0]])


def test_seq_map_input_and_output_pass_through():
    """A seq(map) graph input returned as a graph output: a tuple or list of dicts in, a list of dicts out."""
    m = model([helper.make_node("Identity", ["S"], ["T"])], [("S", seq_map_type(STR, F32))],
              [("T", seq_map_type(STR, F32))])
    sess = session(m)
    feeds = ({"b": 1.0, "a": 2.0}, {"c": 3.0})
    (out,) = sess.run(None, {"S": feeds})
    assert out == [{"a": 2.0, "b": 1.0}, {"c": 3.0}] and list(out[0]) == ["a", "b"]
    (out,) = sess.run(None, {"S": list(feeds)})
    assert out == [{"a": 2.0, "b": 1.0}, {"c": 3.0}]
    with pytest.raises(Exception, match="has type seq\\(map\\(int64"):
        sess.run(None, {"S": ({1: 1.0},)})
    with pytest.raises(Exception, match="give dicts only"):
        sess.run(None, {"S": ({"a": 1.0}, 3)})


# ---------------------------------------------------------------- DictVectorizer
MEASUREMENTS = [{"city": 1.0, "temperature": 33.0}, {"city": 2.0, "temperature": 12.0, "rain": 4.0},
                {"temperature": 18.0, "wind": 7.5}, {"rain": 1.0}]


def test_dict_vectorizer_pipeline_against_scikit_learn():
    dv = DictVectorizer(sparse=False).fit(MEASUREMENTS)
    X = dv.transform(MEASUREMENTS)
    reg = Ridge(alpha=0.1).fit(X, np.arange(len(X), dtype=np.float64))
    nodes = [helper.make_node("DictVectorizer", ["M"], ["V"], domain=ML, string_vocabulary=list(dv.feature_names_)),
             helper.make_node("LinearRegressor", ["V"], ["P"], domain=ML, coefficients=reg.coef_.astype(np.float32).tolist(),
                              intercepts=[float(reg.intercept_)], targets=1)]
    m = model(nodes, [("M", map_type(STR, F32))], [("V", F32), ("P", F32)])
    sess = session(m)
    for d in MEASUREMENTS + [{"wind": 2.0, "unknown": 9.0}]:
        v, p = sess.run(None, {"M": d})
        np.testing.assert_array_equal(v, dv.transform([d]).astype(np.float32))
        np.testing.assert_allclose(p.ravel(), reg.predict(dv.transform([d])), rtol=1e-5, atol=1e-5)


def test_dict_vectorizer_errors():
    sess = session(dict_vectorizer_model([1, 2], key=I64))
    with pytest.raises(Exception, match="expects map\\(int64,tensor\\(float\\)\\)"):
        sess.run(None, {"M": {"a": 1.0}})
    bad = model([helper.make_node("DictVectorizer", ["M"], ["Y"], domain=ML)], [("M", map_type(STR, F32))], [("Y", F32)])
    with pytest.raises(Exception, match="exactly one of string_vocabulary and int64_vocabulary"):
        session(bad).run(None, {"M": {"a": 1.0}})


# ---------------------------------------------------------------- CastMap
def cast_map_reference(d, cast_to, map_form, max_map):
    keys = sorted(d)
    conv = {"TO_FLOAT": lambda v: np.float32(v), "TO_INT64": lambda v: np.int64(np.float32(v)),
            "TO_STRING": lambda v: "%f" % np.float32(v)}[cast_to]
    pad = {"TO_FLOAT": np.float32(0), "TO_INT64": np.int64(0), "TO_STRING": "0.f"}[cast_to]
    if map_form == "DENSE":
        row = [conv(d[k]) for k in keys]
    else:
        row = [conv(d[k]) if k in d else pad for k in range(max_map)]
    dtype = {"TO_FLOAT": np.float32, "TO_INT64": np.int64, "TO_STRING": object}[cast_to]
    return np.array([row], dtype=dtype)


@pytest.mark.parametrize("cast_to", ["TO_FLOAT", "TO_INT64", "TO_STRING"])
@pytest.mark.parametrize("map_form", ["DENSE", "SPARSE"])
def test_cast_map(cast_to, map_form):
    out_type = {"TO_FLOAT": F32, "TO_INT64": I64, "TO_STRING": STR}[cast_to]
    node = helper.make_node("CastMap", ["M"], ["Y"], domain=ML, cast_to=cast_to, map_form=map_form, max_map=6)
    sess = session(model([node], [("M", map_type(I64, F32))], [("Y", out_type)]))
    for d in ({4: 2.75, 0: -1.5, 2: 7.0}, {1: 3.25}, {3: 1e6, 9: 2.0}):
        (y,) = sess.run(None, {"M": d})
        expected = cast_map_reference(d, cast_to, map_form, 6)
        assert y.shape == expected.shape
        np.testing.assert_array_equal(y, expected)
    if map_form == "SPARSE":
        with pytest.raises(Exception, match="Negative index values are not permitted"):
            sess.run(None, {"M": {-1: 1.0, 2: 1.0}})


def test_cast_map_bad_attributes():
    for attrs, what in ((dict(map_form="PACKED"), "map_form 'PACKED' is not one of DENSE, SPARSE"),
                        (dict(cast_to="TO_DOUBLE"), "cast_to 'TO_DOUBLE'"),
                        (dict(map_form="SPARSE", max_map=0), "max_map is 0")):
        node = helper.make_node("CastMap", ["M"], ["Y"], domain=ML, name="cm", **attrs)
        with pytest.raises(Exception, match=what) as e:  # refused when the session is made
            session(model([node], [("M", map_type(I64, F32))], [("Y", F32)])).run(None, {"M": {1: 1.0}})
        assert "cm" in str(e.value)


# ---------------------------------------------------------------- LabelEncoder-4
def label_encoder4(x_type, y_type, **attrs):
    node = helper.make_node("LabelEncoder", ["X"], ["Y"], domain=ML, name="le", **attrs)
    return model([node], [("X", x_type)], [("Y", y_type)], ml_opset=4)


def test_label_encoder4_tensor_attributes_against_scikit_learn():
    labels = np.array(["setosa", "versicolor", "virginica"])
    enc = LabelEncoder().fit(labels)
    m = label_encoder4(STR, I64, keys_tensor=numpy_helper.from_array(enc.classes_.astype(object), "k"),
                       values_tensor=numpy_helper.from_array(np.arange(3, dtype=np.int64), "v"))
    x = np.array(load_iris().target_names[load_iris().target[::7]], dtype=object)
    (y,) = session(m).run(None, {"X": x})
    np.testing.assert_array_equal(y, enc.transform(x))
    (y,) = session(m).run(None, {"X": np.array(["tulip"], dtype=object)})
    assert y.tolist() == [-1]  # default_int64's default


def float_keys_model():
    keys = np.array([1.5, np.nan, -0.0, 7.0], np.float32)
    return label_encoder4(F32, STR, keys_tensor=numpy_helper.from_array(keys, "k"),
                          values_strings=["one and a half", "not a number", "zero", "seven"],
                          default_string="other")


def test_label_encoder4_nan_keys_and_defaults():
    x = np.array([[np.nan, 0.0, 7.0], [2.0, 1.5, -np.nan]], np.float32)
    (y,) = session(float_keys_model()).run(None, {"X": x})
    table = {1.5: "one and a half", 0.0: "zero", 7.0: "seven"}
    expected = [["not a number" if math.isnan(v) else table.get(float(v), "other") for v in row] for row in x]
    assert y.tolist() == expected
    # double keys -> double values with a default_tensor; string -> int16 with onnxruntime's default -1.
    m = label_encoder4(F64, F64, keys_tensor=numpy_helper.from_array(np.array([0.1, 0.2]), "k"),
                       values_tensor=numpy_helper.from_array(np.array([10.5, 20.5]), "v"),
                       default_tensor=numpy_helper.from_array(np.array([-7.25]), "d"))
    (y,) = session(m).run(None, {"X": np.array([0.2, 0.3, 0.1])})
    assert y.dtype == np.float64 and y.tolist() == [20.5, -7.25, 10.5]
    m = label_encoder4(STR, TensorProto.INT16, keys_strings=["a", "b"],
                       values_tensor=numpy_helper.from_array(np.array([3, 4], np.int16), "v"))
    (y,) = session(m).run(None, {"X": np.array(["b", "z"], dtype=object)})
    assert y.dtype == np.int16 and y.tolist() == [4, -1]


def test_label_encoder4_against_onnxruntime_node():
    need_ort_node()
    x = np.array([[np.nan, 0.0, 7.0], [2.0, 1.5, 1.5]], np.float32)
    m = float_keys_model()
    ref, err = ort_node.run(m.SerializeToString(), {"X": x})
    assert err is None, err
    (y,) = session(m).run(None, {"X": x})
    assert y.tolist() == ref["Y"].tolist()
    m = label_encoder4(I64, F32, keys_int64s=[3, 1], values_floats=[0.5, 1.5])
    xi = np.array([1, 2, 3], np.int64)
    ref, err = ort_node.run(m.SerializeToString(), {"X": xi})
    assert err is None, err
    (y,) = session(m).run(None, {"X": xi})
    np.testing.assert_array_equal(y, ref["Y"])  # the default of int64 -> float is 0.0 (float keys: -0.0)



def test_repeated_keys_and_nan_keys_against_onnxruntime_node():
    """onnxruntime's encoders take repeated keys (LabelEncoder keeps the first value, OneHotEncoder
    the last column) and, before LabelEncoder-4, never match a NaN key."""
    need_ort_node()
    cases = [
        (model([helper.make_node("LabelEncoder", ["X"], ["Y"], domain=ML, keys_strings=["a", "b", "a"],
                                 values_int64s=[1, 2, 3])], [("X", STR)], [("Y", I64)], ml_opset=2),
         np.array(["a", "b", "c"], dtype=object), [1, 2, -1]),
        (label_encoder4(I64, I64, keys_int64s=[5, 6, 5], values_int64s=[1, 2, 3]), np.array([5, 6, 7], np.int64),
         [1, 2, -1]),
        (model([helper.make_node("LabelEncoder", ["X"], ["Y"], domain=ML, keys_floats=[0.5, float("nan"), -1.0],
                                 values_floats=[5.0, 6.0, 7.0], default_float=9.0)], [("X", F32)], [("Y", F32)],
               ml_opset=3),
         np.array([0.5, np.nan, 2, -1], np.float32), [5, 9, 9, 7]),
        (label_encoder4(F32, I64, keys_floats=[float("nan"), 1.0, float("nan")], values_int64s=[1, 2, 3]),
         np.array([np.nan, 1, 2], np.float32), [1, 2, -1]),
        (model([helper.make_node("OneHotEncoder", ["X"], ["Y"], domain=ML, cats_int64s=[5, 6, 5], zeros=1)],
               [("X", I64)], [("Y", F32)], ml_opset=1),
         np.array([5, 6, 6], np.int64), [[0, 0, 1], [0, 1, 0], [0, 1, 0]]),
    ]
    for m, x, want in cases:
        ref, err = ort_node.run(m.SerializeToString(), {"X": x})
        assert err is None, err
        np.testing.assert_array_equal(ref["Y"], want)  # the expectation is onnxruntime's
        (y,) = session(m).run(None, {"X": x})
        np.testing.assert_array_equal(y, ref["Y"])

def test_label_encoder4_malformed():
    m = label_encoder4(STR, I64, keys_strings=["a", "b"], values_int64s=[1])
    with pytest.raises(Exception, match="le.*have 2 and 1 entries: they must have the same length"):
        session(m).run(None, {"X": np.array(["a"], dtype=object)})
    m = label_encoder4(STR, I64, keys_strings=["a"], keys_tensor=numpy_helper.from_array(np.array(["a"], dtype=object)),
                       values_int64s=[1])
    with pytest.raises(Exception, match="exactly one of keys_strings, keys_int64s, keys_floats and keys_tensor"):
        session(m).run(None, {"X": np.array(["a"], dtype=object)})
    m = label_encoder4(STR, I64, keys_strings=["a"], values_int64s=[1],
                       default_tensor=numpy_helper.from_array(np.array([1.0])))
    with pytest.raises(Exception, match="default_tensor must hold one int64"):
        session(m).run(None, {"X": np.array(["a"], dtype=object)})


# ---------------------------------------------------------------- TreeEnsemble (opset 5)
class V5:
    """TreeEnsemble-5 attributes built tree by tree from scikit-learn trees (float32 splits chosen as
    skl2onnx chooses them: float32(x) <= split exactly when scikit-learn's float32(x) <= threshold)."""

    def __init__(self, dtype=np.float32):
        self.dtype = dtype
        self.a = {k: [] for k in ("nodes_featureids", "nodes_splits", "nodes_modes", "nodes_truenodeids",
                                  "nodes_trueleafs", "nodes_falsenodeids", "nodes_falseleafs", "leaf_targetids",
                                  "leaf_weights", "tree_roots")}

    def split(self, t):
        if self.dtype == np.float64:
            return float(t)
        f = np.float32(t)
        return float(f) if f <= t else float(np.nextafter(f, np.float32(-np.inf), dtype=np.float32))

    def add_tree(self, tree, weight_of_leaf, target):
        """One tree; weight_of_leaf(i) gives leaf i's weight for `target`."""
        a = self.a
        nodes = {}  # sklearn node -> index in nodes_*
        leaves = {}
        internal = [i for i in range(tree.node_count) if tree.children_left[i] != -1]
        for i in internal:
            nodes[i] = len(a["nodes_featureids"]) + len(nodes)
        for i in range(tree.node_count):
            if tree.children_left[i] == -1:
                leaves[i] = len(a["leaf_targetids"])
                a["leaf_targetids"].append(target)
                a["leaf_weights"].append(weight_of_leaf(i))
        for i in internal:
            a["nodes_featureids"].append(int(tree.feature[i]))
            a["nodes_splits"].append(self.split(tree.threshold[i]))
            a["nodes_modes"].append(0)  # BRANCH_LEQ
            for side, child in (("true", tree.children_left[i]), ("false", tree.children_right[i])):
                leaf = child in leaves
                a[f"nodes_{side}nodeids"].append(leaves[child] if leaf else nodes[child])
                a[f"nodes_{side}leafs"].append(int(leaf))
        a["tree_roots"].append(nodes[0])

    def node(self, n_targets, aggregate=1, post=0, **extra):
        a = dict(self.a)
        for k in ("nodes_splits", "leaf_weights"):
            a[k] = numpy_helper.from_array(np.array(a[k], dtype=self.dtype), k)
        a["nodes_modes"] = numpy_helper.from_array(np.array(a["nodes_modes"], dtype=np.uint8), "nodes_modes")
        return helper.make_node("TreeEnsemble", ["X"], ["Y"], domain=ML, name="te", n_targets=n_targets,
                                aggregate_function=aggregate, post_transform=post, **a, **extra)


XR, YR = make_regression(200, 5, noise=0.1, random_state=0)
XR = XR.astype(np.float32)
XC, YC = make_classification(240, 5, n_informative=4, n_redundant=0, n_classes=3, random_state=1)
XC = XC.astype(np.float32)


def v5_model(node, n_features, dtype=F32, extra_nodes=(), out="Y", inits=()):
    return model([node, *extra_nodes], [("X", dtype, [None, n_features])], [(out, dtype, [None, None])], ml_opset=5,
                 inits=inits)


def forest_regressor_model():
    est = RandomForestRegressor(n_estimators=8, max_depth=5, random_state=0).fit(XR, YR)
    v5 = V5()
    for e in est.estimators_:
        v5.add_tree(e.tree_, lambda i, t=e.tree_: float(t.value[i, 0, 0]), 0)
    return est, v5_model(v5.node(1, aggregate=0), 5)  # AVERAGE


def test_tree_ensemble5_random_forest_regressor():
    est, m = forest_regressor_model()
    (y,) = session(m).run(None, {"X": XR})
    assert y.shape == (len(XR), 1) and y.dtype == np.float32
    np.testing.assert_allclose(y.ravel(), est.predict(XR), rtol=1e-5, atol=1e-4)


def gradient_boosting_classifier_model():
    """Per class c, each boosting stage's tree c adds learning_rate * leaf value to target c; the
    initial raw scores are added by an Add node (TreeEnsemble has no base values), SOFTMAX after."""
    est = GradientBoostingClassifier(n_estimators=12, max_depth=3, random_state=0).fit(XC, YC)
    v5 = V5()
    for stage in est.estimators_:
        for c, tree in enumerate(stage):
            v5.add_tree(tree.tree_, lambda i, t=tree.tree_: float(est.learning_rate * t.value[i, 0, 0]), c)
    base = est._raw_predict_init(XC[:1]).astype(np.float32)
    add = helper.make_node("Add", ["raw", "base"], ["scores"])
    soft = helper.make_node("Softmax", ["scores"], ["P"], axis=1)
    node = v5.node(3)
    node.output[0] = "raw"
    return est, v5_model(node, 5, extra_nodes=(add, soft), out="P", inits=[numpy_helper.from_array(base, "base")])


def test_tree_ensemble5_gradient_boosting_classifier():
    est, m = gradient_boosting_classifier_model()
    (p,) = session(m).run(None, {"X": XC})
    np.testing.assert_allclose(p, est.predict_proba(XC), rtol=1e-5, atol=1e-5)


def test_tree_ensemble5_double():
    est = DecisionTreeRegressor(max_depth=7, random_state=0).fit(XR.astype(np.float64), YR)
    v5 = V5(np.float64)
    v5.add_tree(est.tree_, lambda i: float(est.tree_.value[i, 0, 0]), 0)
    m = v5_model(v5.node(1), 5, dtype=F64)
    X = XR.astype(np.float64) + 0.01
    (y,) = session(m).run(None, {"X": X})
    assert y.dtype == np.float64
    np.testing.assert_allclose(y.ravel(), est.predict(X), rtol=1e-12, atol=1e-9)
    with pytest.raises(Exception, match="input X is float.* but the tensor attributes .* are (double|float64)"):
        session(v5_model(v5.node(1), 5)).run(None, {"X": XR})


def member_model(missing_true=0):
    """One tree: x0 in {1, 3, 5} ? leaf 0 (10 to target 0) : (x1 <= 0.5 ? leaf 1 (1 to target 1) :
    leaf 2 (2 to target 0))."""
    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain=ML, name="te", n_targets=2,
        nodes_featureids=[0, 1], nodes_splits=numpy_helper.from_array(np.array([0, 0.5], np.float32)),
        nodes_modes=numpy_helper.from_array(np.array([6, 0], np.uint8)),
        nodes_truenodeids=[0, 1], nodes_trueleafs=[1, 1], nodes_falsenodeids=[1, 2], nodes_falseleafs=[0, 1],
        nodes_missing_value_tracks_true=[missing_true, 0],
        membership_values=numpy_helper.from_array(np.array([1, 3, 5, np.nan], np.float32)),
        leaf_targetids=[0, 1, 0], leaf_weights=numpy_helper.from_array(np.array([10, 1, 2], np.float32)),
        tree_roots=[0])
    return v5_model(node, 2)


def member_reference(x, missing_true):
    x0, x1 = x
    if x0 in (1.0, 3.0, 5.0) or (missing_true and math.isnan(x0)):
        return [10.0, 0.0]
    return [0.0, 1.0] if x1 <= 0.5 else [2.0, 0.0]


@pytest.mark.parametrize("missing_true", [0, 1])
def test_tree_ensemble5_branch_member(missing_true):
    X = np.array([[1, 9], [3, 0], [2, 0], [2, 1], [5, 5], [np.nan, 0], [np.nan, 1], [4.9999, 0]], np.float32)
    m = member_model(missing_true)
    (y,) = session(m).run(None, {"X": X})
    np.testing.assert_array_equal(y, [member_reference(r, missing_true) for r in X])
    if ort_node.unavailable_reason() is None:
        ref, err = ort_node.run(m.SerializeToString(), {"X": X})
        assert err is None, err
        np.testing.assert_array_equal(y, ref["Y"])


def test_tree_ensemble5_against_onnxruntime_node():
    need_ort_node()
    for make, X in ((forest_regressor_model, XR), (gradient_boosting_classifier_model, XC)):
        _, m = make()
        ref, err = ort_node.run(m.SerializeToString(), {"X": X})
        assert err is None, err
        (y,) = session(m).run(None, {"X": X})
        np.testing.assert_allclose(y, list(ref.values())[0], rtol=1e-6, atol=1e-6)


def test_tree_ensemble_classifier_regressor_refused_at_opset5():
    est = GradientBoostingRegressor(n_estimators=2, max_depth=2, random_state=0).fit(XR, YR)
    t = est.estimators_[0][0].tree_
    leaf = [i for i in range(t.node_count) if t.children_left[i] == -1]
    node = helper.make_node(
        "TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, name="old", n_targets=1,
        nodes_treeids=[0] * t.node_count, nodes_nodeids=list(range(t.node_count)),
        nodes_featureids=[max(int(f), 0) for f in t.feature],
        nodes_modes=["LEAF" if t.children_left[i] == -1 else "BRANCH_LEQ" for i in range(t.node_count)],
        nodes_values=[float(v) for v in t.threshold], nodes_truenodeids=[max(int(c), 0) for c in t.children_left],
        nodes_falsenodeids=[max(int(c), 0) for c in t.children_right], target_treeids=[0] * len(leaf),
        target_nodeids=leaf, target_ids=[0] * len(leaf), target_weights=[float(t.value[i, 0, 0]) for i in leaf])
    for opset in (3, 4):
        m = model([node], [("X", F32, [None, 5])], [("Y", F32)], ml_opset=opset)
        (y,) = session(m).run(None, {"X": XR[:3]})
        np.testing.assert_allclose(y.ravel(), est.estimators_[0][0].predict(XR[:3]), rtol=1e-5)
    m = model([node], [("X", F32, [None, 5])], [("Y", F32)], ml_opset=5)
    with pytest.raises(Exception, match="TreeEnsembleRegressor is deprecated from ai.onnx.ml opset 5"):
        session(m).run(None, {"X": XR[:3]})


@pytest.mark.parametrize("change, what", [
    (dict(post_transform=7), "post_transform is 7"),
    (dict(aggregate_function=9), "aggregate_function is 9"),
    (dict(nodes_truenodeids=[0, 4]), "nodes_truenodeids: node 1 has true child 4, out of range"),
    (dict(nodes_falsenodeids=[0, 2], nodes_falseleafs=[0, 0]), "nodes_falsenodeids: node 1 has false child 2"),
    (dict(nodes_falsenodeids=[1, 0], nodes_falseleafs=[0, 0]), "tree 0 has a cycle through node 0"),
    (dict(tree_roots=[5]), "tree_roots: tree 0 has root 5"),
    (dict(membership_values=numpy_helper.from_array(np.array([np.nan], np.float32))), "BRANCH_MEMBER node 0 has no values"),
    (dict(leaf_targetids=[0, 2, 0]), "leaf_targetids: leaf 1 names target 2"),
], ids=["post", "aggregate", "true-child", "false-child", "cycle", "root", "member", "target"])
def test_tree_ensemble5_malformed(change, what):
    m = member_model()
    node = m.graph.node[0]
    for name, value in change.items():
        attr = next((a for a in node.attribute if a.name == name), None)
        if attr is not None:
            node.attribute.remove(attr)
        node.attribute.append(helper.make_attribute(name, value))
    with pytest.raises(Exception, match=what) as e:
        session(m).run(None, {"X": np.zeros((1, 2), np.float32)})
    assert "te" in str(e.value)
