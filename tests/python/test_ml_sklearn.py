"""scikit-learn models converted to ai.onnx.ml nodes as skl2onnx converts them (skl2onnx is not
installed: the small converter below emits the nodes and attributes its converters emit; classifiers
with probabilities as skl2onnx's default zipmap=True writes them: a label tensor and a ZipMap's list
of {class: probability} dicts), run through onnxtrain.InferenceSession and compared with
scikit-learn's own predict / predict_proba / decision_function / transform."""
import numpy as np
import pytest
from onnx import TensorProto, TypeProto, helper, numpy_helper
from sklearn.datasets import load_diabetes, load_digits, load_iris
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import (Binarizer, LabelEncoder, MaxAbsScaler, MinMaxScaler, Normalizer,
                                   OneHotEncoder, StandardScaler)
from sklearn.svm import SVC, SVR, LinearSVC, LinearSVR, NuSVR, OneClassSVM

from sklearn_helpers import quiet

import onnxtrain

ML = "ai.onnx.ml"
F32 = TensorProto.FLOAT


# ---------------------------------------------------------------- the converter
class Graph:
    """Nodes, initializers and outputs of one converted model (input 'X')."""

    def __init__(self, n_features, dtype=F32):
        self.nodes, self.inits, self.outputs, self.k = [], [], [], 0
        self.input = helper.make_tensor_value_info("X", dtype, [None, n_features])

    def name(self, base):
        self.k += 1
        return f"{base}{self.k}"

    def node(self, op, inputs, n_out=1, domain=ML, **attrs):
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op), domain=domain, **attrs))
        return outs if n_out > 1 else outs[0]

    def const(self, array):
        n = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(array), n))
        return n

    def output(self, name, elem):
        self.outputs.append(helper.make_tensor_value_info(name, elem, None))

    def session(self, ml_opset=1):
        g = helper.make_graph(self.nodes, "skl2onnx", [self.input], self.outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15), helper.make_opsetid(ML, ml_opset)])
        m.ir_version = 8
        return onnxtrain.InferenceSession(m.SerializeToString())


def f32(v):
    return np.asarray(v, dtype=np.float32).ravel().tolist()


def regressor(g, x, model):
    """LinearRegression, Ridge, LinearSVR: LinearRegressor."""
    coef = np.atleast_2d(model.coef_)
    return g.node("LinearRegressor", [x], coefficients=f32(coef), intercepts=f32(np.atleast_1d(model.intercept_)),
                  targets=coef.shape[0])


def linear_classifier(g, x, model):
    """LogisticRegression, LinearSVC: LinearClassifier (two classes: weights [-w, w])."""
    coef, intercept = model.coef_.ravel(), np.atleast_1d(model.intercept_)
    binary = len(model.classes_) == 2
    if binary:
        coef, intercept = np.concatenate([-coef, coef]), np.concatenate([-intercept, intercept])
    if isinstance(model, LogisticRegression):
        ovr = model.multi_class == "ovr" or binary
        post = "LOGISTIC" if ovr else "SOFTMAX"
    else:
        ovr, post = False, "NONE"
    label, scores = g.node("LinearClassifier", [x], 2, coefficients=f32(coef), intercepts=f32(intercept),
                           classlabels_ints=[int(c) for c in model.classes_], post_transform=post,
                           multi_class=0 if ovr or binary else 1)
    if isinstance(model, LogisticRegression) and ovr and not binary:
        scores = g.node("Normalizer", [scores], norm="L1")
    elif isinstance(model, LinearSVC) and binary:
        scores = g.node("ArrayFeatureExtractor", [scores, g.const(np.array([1], dtype=np.int64))])
    return label, scores


def svm_kernel_attrs(model):
    return dict(kernel_type=model.kernel.upper(), kernel_params=f32([model._gamma, model.coef0, model.degree]),
                support_vectors=f32(model.support_vectors_))


def svm_classifier(g, x, model):
    """SVC: SVMClassifier (two classes: coefficients and rho negated)."""
    coef, rho = model.dual_coef_.ravel(), model.intercept_
    if len(model.classes_) == 2:
        coef, rho = -coef, -rho
    attrs = svm_kernel_attrs(model)
    if len(model.probA_):
        attrs.update(prob_a=f32(model.probA_), prob_b=f32(model.probB_))
    return g.node("SVMClassifier", [x], 2, coefficients=f32(coef), rho=f32(rho), post_transform="NONE",
                  vectors_per_class=[int(v) for v in model.n_support_],
                  classlabels_ints=[int(c) for c in model.classes_], **attrs)


def svm_regressor(g, x, model):
    """SVR, NuSVR, OneClassSVM: SVMRegressor."""
    return g.node("SVMRegressor", [x], coefficients=f32(model.dual_coef_), rho=f32(model.intercept_),
                  n_supports=len(model.support_), post_transform="NONE", **svm_kernel_attrs(model))


def scaler(g, x, model):
    """StandardScaler, MinMaxScaler, MaxAbsScaler: Scaler ((x - offset) * scale)."""
    if isinstance(model, StandardScaler):
        offset, scale = model.mean_, 1 / model.scale_
    elif isinstance(model, MinMaxScaler):
        offset, scale = -model.min_ / model.scale_, model.scale_
    else:
        offset, scale = np.zeros_like(model.max_abs_), 1 / model.max_abs_
    return g.node("Scaler", [x], offset=f32(offset), scale=f32(scale))


# ---------------------------------------------------------------- data
IRIS_X, IRIS_Y = load_iris(return_X_y=True)
IRIS_X = IRIS_X.astype(np.float32)
DIAB_X, DIAB_Y = load_diabetes(return_X_y=True)
DIAB_X = DIAB_X.astype(np.float32)
DIGITS_X, DIGITS_Y = load_digits(return_X_y=True)
DIGITS_X = (DIGITS_X[:300] / 16).astype(np.float32)
DIGITS_Y = DIGITS_Y[:300]


def run_classifier(g, label, scores, x, classes=None):
    """Runs a converted classifier with outputs label (int64) and scores (float). With `classes`
    (zipmap=True, skl2onnx's default) the scores go through ZipMap: the run returns them as
    onnxruntime does, a list of {class: probability} dicts, turned back into an array here after
    checking that form."""
    g.output(label, TensorProto.INT64)
    if classes is None:
        g.output(scores, F32)
        return g.session().run(None, {"X": x})
    zipped = g.node("ZipMap", [scores], classlabels_int64s=[int(c) for c in classes])
    t = TypeProto()
    t.sequence_type.elem_type.map_type.key_type = TensorProto.INT64
    t.sequence_type.elem_type.map_type.value_type.CopyFrom(helper.make_tensor_type_proto(F32, None))
    g.outputs.append(helper.make_value_info(zipped, t))
    lab, dicts = g.session().run(None, {"X": x})
    assert isinstance(dicts, list) and len(dicts) == len(x)
    assert all(type(d) is dict and list(d) == sorted(int(c) for c in classes) for d in dicts)
    assert all(type(k) is int and type(v) is float for d in dicts for k, v in d.items())
    return lab, np.array([[d[int(c)] for c in classes] for d in dicts])


def close(actual, expected, rtol=1e-4, atol=1e-4):
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64),
                               rtol=rtol, atol=atol)


# ---------------------------------------------------------------- linear models
@pytest.mark.parametrize("model", [LinearRegression(), Ridge(alpha=0.5),
                                   LinearSVR(C=10, max_iter=20000, random_state=0)], ids=lambda m: type(m).__name__)
def test_linear_regressors(model):
    quiet(model.fit, DIAB_X, DIAB_Y)
    g = Graph(DIAB_X.shape[1])
    g.output(regressor(g, "X", model), F32)
    (y,) = g.session().run(None, {"X": DIAB_X})
    assert y.shape == (len(DIAB_X), 1)
    close(y[:, 0], model.predict(DIAB_X), rtol=1e-4, atol=1e-3)


def test_linear_regressor_double_input():
    model = Ridge().fit(DIAB_X, DIAB_Y)
    g = Graph(DIAB_X.shape[1], TensorProto.DOUBLE)
    g.output(regressor(g, "X", model), F32)
    (y,) = g.session().run(None, {"X": DIAB_X.astype(np.float64)})
    close(y[:, 0], model.predict(DIAB_X), atol=1e-3)


@pytest.mark.parametrize("case", ["binary", "multinomial", "ovr", "digits"])
def test_logistic_regression(case):
    x, y = (DIGITS_X, DIGITS_Y) if case == "digits" else (IRIS_X, IRIS_Y)
    if case == "binary":
        y = (y == 2).astype(np.int64)
    model = LogisticRegression(max_iter=3000, multi_class="ovr" if case == "ovr" else "auto")
    quiet(model.fit, x, y)
    g = Graph(x.shape[1])
    lab, prob = run_classifier(g, *linear_classifier(g, "X", model), x, classes=model.classes_)
    np.testing.assert_array_equal(lab, model.predict(x))
    close(prob, model.predict_proba(x), atol=1e-5)


@pytest.mark.parametrize("binary", [True, False])
def test_linear_svc(binary):
    y = (IRIS_Y == 1).astype(np.int64) if binary else IRIS_Y
    model = quiet(LinearSVC(max_iter=20000, random_state=0).fit, IRIS_X, y)
    g = Graph(IRIS_X.shape[1])
    lab, dec = run_classifier(g, *linear_classifier(g, "X", model), IRIS_X)
    np.testing.assert_array_equal(lab, model.predict(IRIS_X))
    close(dec.reshape(model.decision_function(IRIS_X).shape), model.decision_function(IRIS_X), atol=1e-4)


# ---------------------------------------------------------------- SVMs
SCALED_IRIS = StandardScaler().fit_transform(IRIS_X).astype(np.float32)


@pytest.mark.parametrize("kernel", ["rbf", "poly", "linear", "sigmoid"])
@pytest.mark.parametrize("probability", [True, False])
@pytest.mark.parametrize("binary", [True, False])
def test_svc(kernel, probability, binary):
    y = (IRIS_Y == 1).astype(np.int64) if binary else IRIS_Y
    model = SVC(kernel=kernel, probability=probability, random_state=0, decision_function_shape="ovo", degree=2,
                gamma=0.5, coef0=0.1 if kernel != "sigmoid" else -0.5)
    model.fit(SCALED_IRIS, y)
    g = Graph(4)
    lab, z = run_classifier(g, *svm_classifier(g, "X", model), SCALED_IRIS,
                            classes=model.classes_ if probability else None)
    np.testing.assert_array_equal(lab, model.predict(SCALED_IRIS))
    dec = model.decision_function(SCALED_IRIS)
    if probability:
        # libsvm's pairwise coupling, iterated in float32 to its stopping tolerance (0.005 / classes).
        close(z, model.predict_proba(SCALED_IRIS), atol=2e-3)
    elif binary:
        # onnxruntime's two columns for the negated libsvm score: [-s, s] = [decision, -decision].
        close(z[:, 0], dec, atol=1e-4)
        close(z[:, 1], -dec, atol=1e-4)
    else:
        close(z, dec, atol=1e-4)


@pytest.mark.parametrize("model", [SVR(kernel="rbf", C=10), SVR(kernel="poly", degree=3, C=5, coef0=1),
                                   SVR(kernel="linear"), SVR(kernel="sigmoid", gamma=0.1, coef0=0.2),
                                   NuSVR(kernel="rbf", nu=0.4)], ids=lambda m: f"{type(m).__name__}-{m.kernel}")
def test_svm_regressors(model):
    x = StandardScaler().fit_transform(DIAB_X).astype(np.float32)
    y = (DIAB_Y - DIAB_Y.mean()) / DIAB_Y.std()
    model.fit(x, y)
    g = Graph(x.shape[1])
    g.output(svm_regressor(g, "X", model), F32)
    (p,) = g.session().run(None, {"X": x})
    assert p.shape == (len(x), 1)
    close(p[:, 0], model.predict(x), atol=2e-4)


def test_one_class_svm():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 3)).astype(np.float32)
    model = OneClassSVM(nu=0.2, gamma=0.3).fit(x)
    g = Graph(3)
    scores = svm_regressor(g, "X", model)
    # skl2onnx: the label is Cast(Sign(scores), int64).
    label = g.node("Cast", [g.node("Sign", [scores], domain="")], domain="", to=TensorProto.INT64)
    g.output(label, TensorProto.INT64)
    g.output(scores, F32)
    lab, z = g.session().run(None, {"X": x})
    close(z[:, 0], model.decision_function(x), atol=1e-4)
    np.testing.assert_array_equal(lab[:, 0], model.predict(x))


# ---------------------------------------------------------------- transformers
@pytest.mark.parametrize("model", [StandardScaler(), MinMaxScaler(), MaxAbsScaler()], ids=lambda m: type(m).__name__)
def test_scalers(model):
    model.fit(DIAB_X)
    g = Graph(DIAB_X.shape[1])
    g.output(scaler(g, "X", model), F32)
    (y,) = g.session().run(None, {"X": DIAB_X})
    close(y, model.transform(DIAB_X), atol=1e-5)


@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
def test_normalizer(norm):
    # onnxruntime's MAX divides by the largest value (scikit-learn: the largest magnitude): the
    # two agree on non-negative data, which is what skl2onnx's Normalizer node is checked on.
    x = IRIS_X if norm == "max" else DIAB_X
    model = Normalizer(norm=norm).fit(x)
    g = Graph(x.shape[1])
    g.output(g.node("Normalizer", ["X"], norm=norm.upper()), F32)
    (y,) = g.session().run(None, {"X": x})
    close(y, model.transform(x), atol=1e-6)


def test_binarizer():
    model = Binarizer(threshold=0.01).fit(DIAB_X)
    g = Graph(DIAB_X.shape[1])
    g.output(g.node("Binarizer", ["X"], threshold=0.01), F32)
    (y,) = g.session().run(None, {"X": DIAB_X})
    np.testing.assert_array_equal(y, model.transform(DIAB_X))


def test_simple_imputer():
    rng = np.random.default_rng(1)
    x = IRIS_X.copy()
    x[rng.random(x.shape) < 0.2] = np.nan
    model = SimpleImputer(strategy="median").fit(x)
    g = Graph(4)
    g.output(g.node("Imputer", ["X"], imputed_value_floats=f32(model.statistics_), replaced_value_float=np.nan), F32)
    (y,) = g.session().run(None, {"X": x})
    close(y, model.transform(x), atol=1e-6)


@pytest.mark.parametrize("strings", [False, True])
def test_one_hot_encoder(strings):
    rng = np.random.default_rng(2)
    x = rng.integers(0, 5, size=(40, 3)).astype(np.int64) * np.array([1, 10, 3])
    if strings:
        x = np.array([[f"c{v}" for v in row] for row in x], dtype=object)
    model = OneHotEncoder(handle_unknown="ignore").fit(x[:30])
    g = Graph(3, TensorProto.STRING if strings else TensorProto.INT64)
    # skl2onnx: per column ArrayFeatureExtractor -> OneHotEncoder -> Reshape, then Concat.
    parts = []
    for j, cats in enumerate(model.categories_):
        col = g.node("ArrayFeatureExtractor", ["X", g.const(np.array([j], dtype=np.int64))])
        cats_attr = dict(cats_strings=[str(c) for c in cats]) if strings else dict(cats_int64s=[int(c) for c in cats])
        enc = g.node("OneHotEncoder", [col], zeros=1, **cats_attr)
        parts.append(g.node("Reshape", [enc, g.const(np.array([-1, len(cats)], dtype=np.int64))], domain=""))
    g.output(g.node("Concat", parts, domain="", axis=1), F32)
    (y,) = g.session().run(None, {"X": x})
    np.testing.assert_array_equal(y, model.transform(x).toarray())


def test_label_encoder_strings():
    labels = np.array(["setosa", "versicolor", "virginica", "versicolor"])
    model = LabelEncoder().fit(labels)
    g = Graph(1, TensorProto.STRING)
    g.input = helper.make_tensor_value_info("X", TensorProto.STRING, [None])
    g.output(g.node("LabelEncoder", ["X"], keys_strings=[str(c) for c in model.classes_],
                    values_int64s=list(range(len(model.classes_)))), TensorProto.INT64)
    x = np.array(["virginica", "setosa", "versicolor", "virginica"], dtype=object)
    (y,) = g.session(ml_opset=2).run(None, {"X": x})
    np.testing.assert_array_equal(y, model.transform(x))
    # An unknown label gets default_int64 (-1).
    (y,) = g.session(ml_opset=2).run(None, {"X": np.array(["tulip"], dtype=object)})
    np.testing.assert_array_equal(y, [-1])


def test_pipeline_scaler_logistic_regression():
    pipe = quiet(make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit, IRIS_X, IRIS_Y)
    g = Graph(4)
    lab, prob = run_classifier(g, *linear_classifier(g, scaler(g, "X", pipe[0]), pipe[1]), IRIS_X,
                               classes=pipe.classes_)
    np.testing.assert_array_equal(lab, pipe.predict(IRIS_X))
    close(prob, pipe.predict_proba(IRIS_X), atol=1e-5)


def test_ml_opsets_4_and_5_run_and_newer_is_refused_naming_operator_and_opset():
    model = StandardScaler().fit(IRIS_X)
    g = Graph(4)
    g.output(scaler(g, "X", model), F32)
    for opset in (4, 5):
        (y,) = g.session(ml_opset=opset).run(None, {"X": IRIS_X})
        close(y, model.transform(IRIS_X), atol=1e-5)
    with pytest.raises(Exception, match=r"Scaler.*opset 6"):
        g.session(ml_opset=6).run(None, {"X": IRIS_X})
