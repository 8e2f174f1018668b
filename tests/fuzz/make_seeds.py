#!/usr/bin/env python3
"""Seed corpora of the fuzz targets (scripts/fuzz.sh).

usage: make_seeds.py TARGET OUTDIR [--conformance DIR] [--internal-only]

model       the conformance models (model.onnx)
gradient    conformance models whose inputs became initializers (their test values) and whose first
            float output feeds a ReduceSum loss, so GradientGraphBuilder has weights and a loss
structured  "OTFZ" containers: a conformance model and its test_data_set_0 inputs; then graphs of the
            internal operators with feeds (needs onnxtrain's Python module, PYTHONPATH=build/python):
            gradient graphs of the gradient seeds' models (com.onnxtrain *Grad kernels), training
            graphs of small models with every optimizer, accumulation, clipping and loss scaling
            (also the portable ai.onnx.preview.training form), OrtModuleGraphBuilder graphs with a
            com.microsoft.YieldOp, and single internal nodes the others miss.
            --internal-only: the internal-operator seeds alone (a campaign on them)
npy, npz    arrays of every supported dtype and layout saved by numpy (npz stored and deflated)
csv         small tables: header, no header, quoting, CRLF, BOM, missing values
checkpoint  written by the fuzz_checkpoint binary itself (ONNXTRAIN_FUZZ_WRITE_SEEDS)
"""
import glob
import io
import os
import struct
import sys

import numpy as np


def conformance_cases(root):
    for model in sorted(glob.glob(os.path.join(root, "node", "*", "model.onnx")) +
                        glob.glob(os.path.join(root, "simple", "*", "model.onnx"))):
        case = os.path.dirname(model)
        inputs = sorted(glob.glob(os.path.join(case, "test_data_set_0", "input_*.pb")),
                        key=lambda p: int(p.rsplit("_", 1)[1].split(".")[0]))
        yield os.path.basename(case), model, inputs


def write(outdir, name, data):
    with open(os.path.join(outdir, name), "wb") as f:
        f.write(data)


def seeds_model(root, outdir):
    for name, model, _ in conformance_cases(root):
        write(outdir, name + ".onnx", open(model, "rb").read())


def otfz(model_bytes, feeds):
    """The structured target's container: the model, then its feeds (serialized TensorProtos)."""
    out = b"OTFZ" + struct.pack("<I", len(model_bytes)) + model_bytes
    for t in feeds:
        out += struct.pack("<I", len(t)) + t
    return out


def seeds_structured(root, outdir, internal_only=False):
    if not internal_only:
        for name, model, inputs in conformance_cases(root):
            write(outdir, name + ".otfz", otfz(open(model, "rb").read(), [open(p, "rb").read() for p in inputs]))
    seeds_internal(root, outdir)


def with_loss(model, inputs):
    """A conformance model whose float inputs became initializers (their test values) and whose
    first float output feeds a ReduceSum loss "fuzz_loss"; with the test values of its remaining
    inputs by name. None when it has no float output or no float input."""
    import onnx
    from onnx import helper, TensorProto
    try:
        m = onnx.load(model)
    except Exception:
        return None
    g = m.graph
    values = {}
    for p in inputs:
        t = onnx.TensorProto()
        t.ParseFromString(open(p, "rb").read())
        values[t.name] = t
    floats = [o for o in g.output if o.type.HasField("tensor_type")
              and o.type.tensor_type.elem_type in (TensorProto.FLOAT, TensorProto.DOUBLE)]
    if not floats:
        return None
    moved = False
    init_names = {i.name for i in g.initializer}
    for inp in list(g.input):
        t = values.get(inp.name)
        if t is None or inp.name in init_names or t.data_type not in (TensorProto.FLOAT, TensorProto.DOUBLE):
            continue
        t.name = inp.name
        g.initializer.append(t)
        moved = True
    if not moved:
        return None
    keep = [i for i in g.input if i.name not in {t.name for t in g.initializer}]
    del g.input[:]
    g.input.extend(keep)
    y = floats[0]
    g.node.append(helper.make_node("ReduceSum", [y.name], ["fuzz_loss"], keepdims=0))
    loss = helper.make_tensor_value_info("fuzz_loss", y.type.tensor_type.elem_type, [])
    outs = [loss] + list(g.output)
    del g.output[:]
    g.output.extend(outs)
    return m, values


def seeds_gradient(root, outdir):
    for name, model, inputs in conformance_cases(root):
        r = with_loss(model, inputs)
        if r:
            write(outdir, name + ".onnx", r[0].SerializeToString())


# ---------------------------------------------------------------- internal operators
INTERNAL_DOMAINS = ("com.onnxtrain", "com.microsoft", "ai.onnx.preview.training")
MAX_SEED = 200 * 1024  # under the campaign's -max_len (256 KiB), with room to grow


def internal_ops_of(model_bytes):
    import onnx
    m = onnx.ModelProto()
    m.ParseFromString(model_bytes)
    ops = set()

    def walk(g):
        for n in g.node:
            if n.domain in INTERNAL_DOMAINS:
                ops.add(n.domain + "." + n.op_type)
            for a in n.attribute:
                if a.HasField("g"):
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)
    walk(m.graph)
    return ops


def feeds_for(model_bytes, known=None, rng=None):
    """Serialized feeds for the graph inputs of a model, in order: `known` values by name, else
    random ones of the declared type (free dims 2; learning rates 0.01, steps 1, flags true)."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.ModelProto()
    m.ParseFromString(model_bytes)
    rng = rng or np.random.default_rng(0)
    out = []
    for inp in m.graph.input:
        if known and inp.name in known:
            t = known[inp.name]
            t.name = inp.name
            out.append(t.SerializeToString())
            continue
        tt = inp.type.tensor_type
        if not inp.type.HasField("tensor_type"):
            return None
        shape = [d.dim_value if d.HasField("dim_value") else 2 for d in tt.shape.dim]
        dt = onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[tt.elem_type]
        lname = inp.name.lower()
        if dt == np.bool_:
            a = np.ones(shape, np.bool_)
        elif np.issubdtype(dt, np.integer):
            a = np.ones(shape, dt) if "step" in lname else rng.integers(0, 2, size=shape).astype(dt)
        elif "learning" in lname or lname.startswith("lr"):
            a = np.full(shape, 0.01, dt)
        elif "loss_scale" in lname:
            a = np.full(shape, 1024.0, dt)
        else:
            a = rng.standard_normal(shape).astype(dt)
        out.append(numpy_helper.from_array(a, inp.name).SerializeToString())
    return out


def put_internal(outdir, census, name, model_bytes, feeds):
    """Writes a seed when it holds internal operators and fits the campaign's size."""
    ops = internal_ops_of(model_bytes)
    if not ops or feeds is None:
        return False
    data = otfz(model_bytes, feeds)
    if len(data) > MAX_SEED:
        return False
    write(outdir, "internal_" + name + ".otfz", data)
    for op in ops:
        census[op] = census.get(op, 0) + 1
    return True


def internal_gradient_graphs(root, outdir, census):
    """Gradient graphs of the gradient seeds' models: the *Grad kernels fed as the rules feed them."""
    from onnxtrain import GradientGraphBuilder
    for name, model, inputs in conformance_cases(root):
        r = with_loss(model, inputs)
        if not r:
            continue
        m, values = r
        weights = {t.name for t in m.graph.initializer if t.data_type in (1, 11)}
        outputs = {o.name for o in m.graph.output}
        try:
            b = GradientGraphBuilder(m.SerializeToString(), outputs, weights, "fuzz_loss")
            b.build()
            g = b.get_model()
        except Exception:
            continue
        put_internal(outdir, census, "grad_" + name, g, feeds_for(g, values))


def small_models():
    """Small training models (name, ModelProto) whose gradients use the internal kernels: an MLP
    with a softmax cross-entropy loss, a CNN (Conv, BatchNormalization, pooling), recurrent nets,
    and a model of embeddings, normalizations, slicing, padding, resizing and dropout."""
    from onnx import helper, numpy_helper, TensorProto
    rng = np.random.default_rng(7)
    f32 = TensorProto.FLOAT

    def init(name, *shape, scale=0.5):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    def model(name, nodes, inputs, inits, loss_input, extra_outputs=()):
        nodes = list(nodes) + [helper.make_node("ReduceMean", [loss_input], ["loss"], keepdims=0)]
        g = helper.make_graph(nodes, name, inputs, [helper.make_tensor_value_info("loss", f32, [])] +
                              list(extra_outputs), inits)
        return name, helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    X = lambda *s: helper.make_tensor_value_info("X", f32, list(s))
    yield model("mlp", [
        helper.make_node("MatMul", ["X", "W1"], ["h1"]), helper.make_node("Add", ["h1", "b1"], ["h2"]),
        helper.make_node("Relu", ["h2"], ["h3"]), helper.make_node("MatMul", ["h3", "W2"], ["z"]),
        helper.make_node("SoftmaxCrossEntropyLoss", ["z", "label"], ["ce"], reduction="none"),
    ], [X(4, 3), helper.make_tensor_value_info("label", TensorProto.INT64, [4])],
        [init("W1", 3, 5), init("b1", 5), init("W2", 5, 3)], "ce")
    yield model("cnn", [
        helper.make_node("Conv", ["X", "Wc", "Bc"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"]),
        helper.make_node("MaxPool", ["n"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("AveragePool", ["p"], ["a"], kernel_shape=[2, 2]),
        helper.make_node("LpPool", ["a"], ["lp"], kernel_shape=[1, 1]),
        helper.make_node("GlobalMaxPool", ["lp"], ["gm"]),
        helper.make_node("ConvTranspose", ["gm", "Wt"], ["ct"]),
        helper.make_node("LRN", ["ct"], ["l"], size=3),
        helper.make_node("Mul", ["l", "l"], ["sq"]),
    ], [X(2, 1, 6, 6)], [init("Wc", 2, 1, 3, 3), init("Bc", 2), init("s", 2), init("bb", 2), init("m", 2),
                         numpy_helper.from_array(np.ones(2, np.float32), "v"), init("Wt", 2, 2, 2, 2)], "sq")
    for op, gates in (("LSTM", 4), ("GRU", 3), ("RNN", 1)):
        for direction in ("forward", "bidirectional"):
            d = 2 if direction == "bidirectional" else 1
            yield model(f"{op.lower()}_{direction}", [
                helper.make_node(op, ["X", "W", "R", "B"], ["Y", "Yh"], hidden_size=3, direction=direction),
                helper.make_node("Mul", ["Y", "Y"], ["sq"]),
            ], [X(3, 2, 4)], [init("W", d, gates * 3, 4), init("R", d, gates * 3, 3), init("B", d, 2 * gates * 3)], "sq")
    yield model("misc", [
        helper.make_node("Gather", ["E", "idx"], ["e"]),
        helper.make_node("LayerNormalization", ["e", "g", "b"], ["ln"]),
        helper.make_node("Softmax", ["ln"], ["sm"]), helper.make_node("LogSoftmax", ["sm"], ["ls"]),
        helper.make_node("Slice", ["ls", "st", "en"], ["sl"]),
        helper.make_node("Pad", ["sl", "pads"], ["pd"], mode="reflect"),
        helper.make_node("Resize", ["pd", "", "scales"], ["rs"], mode="linear"),
        helper.make_node("Dropout", ["rs", "ratio", "train"], ["do"]),
        helper.make_node("GatherElements", ["do", "gi"], ["ge"], axis=1),
        helper.make_node("GatherND", ["ge", "ni"], ["gn"]),
        helper.make_node("Mul", ["gn", "gn"], ["sq"]),
    ], [helper.make_tensor_value_info("idx", TensorProto.INT64, [2, 3])],
        [init("E", 5, 4), init("g", 4), init("b", 4),
         numpy_helper.from_array(np.array([0, 1], np.int64), "st"),
         numpy_helper.from_array(np.array([2, 4], np.int64), "en"),
         numpy_helper.from_array(np.array([0, 0, 1, 0, 0, 1], np.int64), "pads"),
         numpy_helper.from_array(np.array([1, 1, 2], np.float32), "scales"),
         numpy_helper.from_array(np.array(0.25, np.float32), "ratio"),
         numpy_helper.from_array(np.array(True), "train"),
         numpy_helper.from_array(rng.integers(0, 2, (2, 2, 3)).astype(np.int64), "gi"),
         numpy_helper.from_array(np.array([[0, 1], [1, 0]], np.int64), "ni")], "sq")


def internal_training_graphs(outdir, census):
    """Training graphs (model, loss, gradients, optimizer) of the small models with every optimizer;
    gradient accumulation, global-norm clipping, fp16 loss scaling and the portable form on some."""
    import tempfile
    from onnxtrain.training import TrainingParameters, TrainingSession
    optimizers = ["SGDOptimizer", "MomentumOptimizer", "AdamOptimizer", "AdamWOptimizer", "LambOptimizer",
                  "AdagradOptimizer"]
    variants = [{}, {"gradient_accumulation_steps": 2, "enable_grad_norm_clip": True},
                {"mixed_precision": "fp16"}, {"portable_training_graph": True}]
    with tempfile.TemporaryDirectory() as tmp:
        for k, (name, m) in enumerate(small_models()):
            for j, opt in enumerate(optimizers):
                for v, variant in enumerate(variants):
                    if (j + k) % len(variants) != v and v != 0:
                        continue  # every optimizer plain; each variant on some (model, optimizer) pairs
                    p = TrainingParameters()
                    p.loss_output_name = "loss"
                    p.training_optimizer_name = opt
                    path = os.path.join(tmp, "t.onnx")
                    p.model_with_training_graph_path = path
                    for key, val in variant.items():
                        setattr(p, key, val)
                    try:
                        TrainingSession(m.SerializeToString(), p)
                        g = open(path, "rb").read()
                    except Exception as e:
                        print(f"[fuzz] no training graph for {name} {opt} {variant}: {e}", file=sys.stderr)
                        continue
                    tag = "_".join(f"{a}" for a in variant) or "plain"
                    put_internal(outdir, census, f"train_{name}_{opt}_{tag}", g, feeds_for(g))


def internal_module_graphs(outdir, census):
    """OrtModuleGraphBuilder training graphs: forward, com.microsoft.YieldOp, backward. An
    InferenceSession runs the forward part (the graph's outputs are the user outputs; the
    backward's nodes stay for the mutator to wire in) or, asked for everything, refuses YieldOp."""
    import onnx
    from onnxtrain.capi._module_graph import OrtModuleGraphBuilder, OrtModuleGraphBuilderConfiguration
    for name, m in small_models():
        weights = [t.name for t in m.graph.initializer if t.data_type == 1]
        c = OrtModuleGraphBuilderConfiguration()
        c.initializer_names = weights
        c.initializer_names_to_train = weights
        try:
            b = OrtModuleGraphBuilder()
            b.initialize(m.SerializeToString(), c)
            b.build()
            g = b.get_gradient_model()
        except Exception as e:
            print(f"[fuzz] no module graph for {name}: {e}", file=sys.stderr)
            continue
        known = {t.name: t for t in m.graph.initializer}
        put_internal(outdir, census, "module_" + name, g, feeds_for(g, known))
        fwd = onnx.ModelProto()
        fwd.ParseFromString(g)
        user = set(b.get_graph_info().user_output_names)
        keep = [o for o in fwd.graph.output if o.name in user]
        del fwd.graph.output[:]
        fwd.graph.output.extend(keep)
        put_internal(outdir, census, "module_forward_" + name, fwd.SerializeToString(), feeds_for(g, known))


def internal_single_nodes(outdir, census):
    """Single internal nodes, well-formed, with their shape inputs as initializers (so that the
    mutator changes their values)."""
    import onnx
    from onnx import helper, numpy_helper, TensorProto
    rng = np.random.default_rng(11)

    def node(name, op, inputs, outputs, attrs=None, domain="com.onnxtrain", inits=()):
        ins, feeds = [], []
        init_names = {t.name for t in inits}
        for n, a in inputs:
            if n in init_names:
                continue
            ins.append(helper.make_tensor_value_info(n, onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[a.dtype], list(a.shape)))
            feeds.append(numpy_helper.from_array(a, n).SerializeToString())
        outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs if o]
        g = helper.make_graph([helper.make_node(op, [n for n, _ in inputs], outputs, domain=domain, **(attrs or {}))],
                              name, ins, outs, list(inits))
        imports = [helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)]
        m = helper.make_model(g, opset_imports=imports)
        put_internal(outdir, census, "node_" + name, m.SerializeToString(), feeds)

    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    i64 = lambda *v: np.array(v, np.int64)
    sh = lambda n, *v: numpy_helper.from_array(i64(*v), n)
    w, g1, g2 = f(3, 4), f(3, 4), f(2)
    node("accumulate", "AccumulateGradients", [("reset", np.array([False])), ("a", w), ("g", g1)], ["a2"])
    node("global_norm_clip", "GlobalNormClip", [("g1", g1), ("g2", g2)], ["scale", "norm"], {"max_norm": 1.0})
    node("loss_scale_check", "LossScaleCheck", [("ls", np.array([1024.0], np.float32)), ("g1", g1), ("g2", g2)],
         ["scale", "finite"], {"max_norm": 1.0})
    node("adam_gated", "AdamOptimizer",
         [("lr", np.array([0.01], np.float32)), ("step", i64(1)), ("gs", np.array([0.5])), ("go", np.array([True])),
          ("w", w), ("g", g1), ("m1", np.zeros_like(w)), ("m2", np.zeros_like(w))], ["w2", "m12", "m22"],
         {"update_signal": 1})
    node("preview_adam", "Adam", [("r", np.array(0.01, np.float32)), ("t", np.array(1, np.int64)), ("x", w), ("g", g1),
                                  ("v", np.zeros_like(w)), ("h", np.zeros_like(w))], ["x2", "v2", "h2"],
         domain="ai.onnx.preview.training")
    node("dropout_grad", "DropoutGrad", [("dy", f(2, 3)), ("mask", rng.random((2, 3)) > 0.5),
                                         ("ratio", np.array(0.25, np.float32)), ("train", np.array(True))], ["dx"])
    node("gelu", "Gelu", [("x", f(2, 3))], ["y", "a"])
    node("gelu_grad", "GeluGrad", [("dy", f(2, 3)), ("x", f(2, 3))], ["dx"])
    node("relu_grad", "ReluGrad", [("dy", f(2, 3)), ("y", f(2, 3))], ["dx"])
    node("sum_to_shape", "SumToShape", [("g", f(2, 3, 4)), ("s", i64(3, 1))], ["y"], inits=[sh("s", 3, 1)])
    node("gather_grad", "GatherGrad", [("s", i64(5, 4)), ("i", i64(0, 4, 4)), ("dy", f(3, 4))], ["dx"],
         inits=[sh("s", 5, 4), sh("i", 0, 4, 4)])
    node("gather_nd_grad", "GatherNDGrad", [("s", i64(2, 3)), ("i", np.array([[1], [0]], np.int64)), ("dy", f(2, 3))],
         ["dx"], inits=[sh("s", 2, 3)])
    node("slice_grad", "SliceGrad", [("dy", f(2, 2)), ("s", i64(4, 3)), ("b", i64(1, 0)), ("e", i64(3, 3)),
                                     ("a", i64(0, 1)), ("st", i64(1, 2))], ["dx"],
         inits=[sh("s", 4, 3), sh("b", 1, 0), sh("e", 3, 3), sh("a", 0, 1), sh("st", 1, 2)])
    node("softmax_grad", "SoftmaxGrad", [("dy", f(2, 3)), ("y", f(2, 3))], ["dx"], {"axis": 1})
    node("nll_grad", "NegativeLogLikelihoodLossGrad", [("dl", np.array(1.0, np.float32)), ("x", f(3, 4)),
                                                       ("t", i64(0, 3, 1)), ("w", f(4))], ["dx"],
         {"reduction": "mean", "ignore_index": 3})
    x = f(1, 2, 3, 3)
    node("global_avg_pool_grad", "GlobalAveragePoolGrad", [("dy", f(1, 2, 1, 1)), ("x", x)], ["dx"])
    node("global_lp_pool_grad", "GlobalLpPoolGrad",
         [("dy", f(1, 2, 1, 1)), ("x", x), ("y", np.sqrt((x * x).sum(axis=(2, 3), keepdims=True)))], ["dx"], {"p": 2.0})
    node("fused_matmul", "FusedMatMul", [("a", f(4, 3)), ("b", f(5, 4))], ["y"], {"transA": 1, "transB": 1})


def seeds_internal(root, outdir):
    try:
        import onnxtrain  # noqa: F401
    except ImportError:
        print("[fuzz] onnxtrain's Python module is not on PYTHONPATH (build/python): no internal-operator seeds",
              file=sys.stderr)
        return
    census = {}
    internal_gradient_graphs(root, outdir, census)
    internal_training_graphs(outdir, census)
    internal_module_graphs(outdir, census)
    internal_single_nodes(outdir, census)
    print(f"[fuzz] internal operators in the seeds: " +
          ", ".join(f"{op} {n}" for op, n in sorted(census.items())))


def seeds_npy(outdir):
    arrays = {
        "f32": np.arange(12, dtype=np.float32).reshape(3, 4),
        "f64": np.linspace(0, 1, 5),
        "f16": np.ones((2, 2), np.float16),
        "i8": np.array([-1, 2], np.int8), "u8": np.arange(6, dtype=np.uint8),
        "i16": np.array([1], np.int16), "u16": np.array([7], np.uint16),
        "i32": np.array([[1, 2]], np.int32), "u32": np.array([3], np.uint32),
        "i64": np.array([-5, 5], np.int64), "u64": np.array([9], np.uint64),
        "bool": np.array([True, False, True]),
        "scalar": np.float32(3.5), "empty": np.zeros((0, 3), np.float32),
        "fortran": np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
        "bigendian": np.arange(4, dtype=">f4"),
    }
    for k, a in arrays.items():
        b = io.BytesIO()
        np.save(b, a)
        write(outdir, k + ".npy", b.getvalue())
    b = io.BytesIO()
    np.lib.format.write_array(b, np.arange(3, dtype=np.float32), version=(2, 0))
    write(outdir, "v2.npy", b.getvalue())


def seeds_npz(outdir):
    a = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "y": np.array([1, 0, 1], np.int64),
         "b": np.array([True]), "e": np.zeros((0,), np.float64)}
    for k, save in (("stored", np.savez), ("deflated", np.savez_compressed)):
        b = io.BytesIO()
        save(b, **a)
        write(outdir, k + ".npz", b.getvalue())
        b = io.BytesIO()
        save(b, only=np.float32(1))
        write(outdir, k + "_one.npz", b.getvalue())


def seeds_csv(outdir):
    tables = {
        "header": "a,b,label\n1,2,0\n3.5,-4e3,1\n",
        "noheader": "1,2,3\n4,5,6\n",
        "quoted": '"x","y"\n"1","2"\n"3",4\n',
        "crlf_bom": "\ufeffa;b\r\n1;2\r\n",
        "blank": "\n\na\n1\n\n2\n",
        "nan": "a,b\nnan,inf\n-inf,1e308\n",
        "missing": "a,b,c\n1,,3\n",
        "tabs": "1\t2\n3\t4\n",
    }
    for k, t in tables.items():
        write(outdir, k + ".csv", t.encode("utf-8"))


def main():
    args = sys.argv[1:]
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "conformance", "onnx-1.12")
    if "--conformance" in args:
        i = args.index("--conformance")
        root = args[i + 1]
        del args[i:i + 2]
    internal_only = "--internal-only" in args
    if internal_only:
        args.remove("--internal-only")
    target, outdir = args
    os.makedirs(outdir, exist_ok=True)
    if target in ("model",):
        seeds_model(root, outdir)
    elif target == "structured":
        seeds_structured(root, outdir, internal_only)
    elif target == "gradient":
        seeds_gradient(root, outdir)
    elif target in ("npy", "npz", "csv"):
        {"npy": seeds_npy, "npz": seeds_npz, "csv": seeds_csv}[target](outdir)
    else:
        sys.exit(f"make_seeds.py: no seeds for target '{target}' (checkpoint seeds come from the binary)")
    print(f"[fuzz] {len(os.listdir(outdir))} seeds for {target} in {outdir}")


if __name__ == "__main__":
    main()
