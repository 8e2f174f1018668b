// ir::Emitter: output types derived from operator schemas (ONNX's registry, the com.onnxtrain
// table), errors for undeterminable types, scalar constants of the four float types, opset-aware
// idioms, nested scopes, and a graph it builds run by the executor against a naive reference.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>

#include "grad_check.h"
#include "ir/emitter.h"
#include "kernels/kernel.h"
#include "ops/onnxtrain_ops.h"
#include "runtime/executor.h"
#include "test_grad_util.h"
#include "test_util.h"

using namespace ot_test;
using onnxtrain::bfloat16;
using onnxtrain::float16;
using onnxtrain::ir::Emitter;
namespace ops = onnxtrain::ops;

namespace {

constexpr DType kF32 = DType::kFloat32, kF64 = DType::kFloat64;

// A model whose graph declares typed inputs: a, b float [2, 3], c bool [2, 3], d double [2, 3],
// i int64 [2], h float16 [3], u (no type).
struct Fixture {
  ir::Model m;
  Fixture(int64_t opset = 17) {
    m.opsets = {{"", opset}};
    m.graph = std::make_shared<ir::Graph>();
    m.graph->name = "emitter_test";
    auto in = [&](const char* n, DType dt, Shape s) {
      m.graph->inputs.push_back({n, ir::TypeInfo::tensor(dt, s), ""});
    };
    in("a", kF32, {2, 3});
    in("b", kF32, {2, 3});
    in("c", DType::kBool, {2, 3});
    in("d", kF64, {2, 3});
    in("i", DType::kInt64, {2});
    in("h", DType::kFloat16, {3});
    m.graph->inputs.push_back({"u", ir::TypeInfo(), ""});
  }
};

// The message of the E that f throws ("" when it throws nothing; other exceptions propagate).
template <class E>
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

std::string type_str(const Emitter& e, const std::string& v) {
  const ir::TypeInfo* t = e.type(v);
  return t ? t->to_string() : "unknown";
}

}  // namespace

TEST(Emitter, OutputTypesFromOnnxSchemas) {
  Fixture f;
  Emitter e(f.m, *f.m.graph);
  // Where: the type of inputs 1 and 2 (type parameter T), not of the boolean condition.
  EXPECT_EQ(type_str(e, e.add("Where", {"c", "a", "b"})), "tensor(float)");
  EXPECT_EQ(type_str(e, e.add("Where", {"c", "d", "d"})), "tensor(double)");
  // Greater: T1 allows only bool.
  EXPECT_EQ(type_str(e, e.add("Greater", {"a", "b"})), "tensor(bool)");
  // Shape: int64, and its length when the input's rank is known.
  EXPECT_EQ(type_str(e, e.add("Shape", {"a"})), "tensor(int64)[2]");
  EXPECT_EQ(type_str(e, e.add("Shape", {"a"}, {Emitter::int_attr("start", -1)})), "tensor(int64)[1]");
  EXPECT_EQ(type_str(e, e.add("Size", {"a"})), "tensor(int64)[]");
  // Cast: the 'to' attribute; the shape is the input's.
  EXPECT_EQ(type_str(e, e.cast("a", kF64)), "tensor(double)[2, 3]");
  EXPECT_EQ(type_str(e, e.cast("h", DType::kBFloat16)), "tensor(bfloat16)[3]");
  // ConstantOfShape: the value attribute's element type, float by default.
  EXPECT_EQ(type_str(e, e.add("ConstantOfShape", {"i"}, {Emitter::tensor_attr("value", Tensor::scalar<int32_t>(7))})),
            "tensor(int32)");
  EXPECT_EQ(type_str(e, e.add("ConstantOfShape", {"i"})), "tensor(float)");
  // Constant: its value attribute.
  EXPECT_EQ(type_str(e, e.add("Constant", {}, {Emitter::ints_attr("value_ints", {1, 2, 3})})), "tensor(int64)[3]");
  EXPECT_EQ(type_str(e, e.add("Constant", {}, {Emitter::tensor_attr("value", Tensor::scalar<double>(1))})),
            "tensor(double)[]");
  // EyeLike / RandomNormalLike: dtype when given, else the input's type.
  EXPECT_EQ(type_str(e, e.add("EyeLike", {"a"}, {Emitter::int_attr("dtype", int64_t(DType::kInt32))})),
            "tensor(int32)");
  EXPECT_EQ(type_str(e, e.add("RandomNormalLike", {"d"})), "tensor(double)");
  // Multiple outputs with different parameters: TopK values (T) and indices (int64).
  const auto topk = e.add_n("TopK", {"a", e.ints({2})}, 2);
  EXPECT_EQ(type_str(e, topk[0]), "tensor(float)");
  EXPECT_EQ(type_str(e, topk[1]), "tensor(int64)");
  // Dropout (opset 12+): the mask is bool.
  const auto dr = e.add_n("Dropout", {"d"}, 2);
  EXPECT_EQ(type_str(e, dr[0]), "tensor(double)");
  EXPECT_EQ(type_str(e, dr[1]), "tensor(bool)");
  // LayerNormalization: Mean and InvStdDev in the stash type.
  const auto ln = e.add_n("LayerNormalization", {"h", "h"}, 3);
  EXPECT_EQ(type_str(e, ln[0]), "tensor(float16)");
  EXPECT_EQ(type_str(e, ln[1]), "tensor(float)");
  // Inputs of unknown type bound to the output's parameter: unknown, not guessed.
  EXPECT_EQ(e.type(e.add("Add", {"u", "u"})), nullptr);
  EXPECT_EQ(type_str(e, e.add("Add", {"u", "a"})), "tensor(float)");
}

TEST(Emitter, ControlFlowAndTrainingOps) {
  Fixture f;
  Emitter e(f.m, *f.m.graph);
  // If: the branches' declared output types.
  auto branch = [](DType dt) {
    auto g = std::make_shared<ir::Graph>();
    g->nodes.push_back(make_node("Identity", {"a"}, {"o"}));
    g->outputs.push_back({"o", ir::TypeInfo::tensor(dt, {2, 3}), ""});
    return g;
  };
  const auto out =
      e.add_n("If", {"c"}, 1,
              {Emitter::graph_attr("then_branch", branch(kF32)), Emitter::graph_attr("else_branch", branch(kF32))});
  EXPECT_EQ(type_str(e, out[0]), "tensor(float)[2, 3]");
  // ai.onnx.preview.training Adagrad(R, T, X.., G.., H..) -> X_new.., H_new..: outputs follow
  // their own inputs (here X float, H double), and the domain gets imported.
  const std::string R = e.scalar(kF32, 0.1), T = e.ints({1});
  const auto ada = e.add_n("Adagrad", {R, T, "a", "b", "d"}, 2, {}, ir::kPreviewTrainingDomain);
  EXPECT_EQ(type_str(e, ada[0]), "tensor(float)");
  EXPECT_EQ(type_str(e, ada[1]), "tensor(double)");
  EXPECT_EQ(f.m.opset(ir::kPreviewTrainingDomain), 1);
}

TEST(Emitter, OnnxtrainOpsFromTheTable) {
  Fixture f;
  Emitter e(f.m, *f.m.graph);
  EXPECT_EQ(type_str(e, e.add_n("SumToShape", {"d", "i"}, 1, {}, ir::kOnnxtrainDomain)[0]), "tensor(double)");
  // GatherGrad(shape(X), indices, dY): dX has dY's type.
  EXPECT_EQ(type_str(e, e.add_n("GatherGrad", {"i", "i", "h"}, 1, {}, ir::kOnnxtrainDomain)[0]), "tensor(float16)");
  // BatchNormalizationGrad(dY, X, scale, mean, var): dX like X, dscale and dB like scale.
  const auto bn = e.add_n("BatchNormalizationGrad", {"h", "h", "a", "a", "a"}, 3, {}, ir::kOnnxtrainDomain);
  EXPECT_EQ(type_str(e, bn[0]), "tensor(float16)");
  EXPECT_EQ(type_str(e, bn[1]), "tensor(float)");
  EXPECT_EQ(type_str(e, bn[2]), "tensor(float)");
  EXPECT_EQ(f.m.opset(ir::kOnnxtrainDomain), 1);
}

// Every com.onnxtrain kernel has a row in the operator table (src/ops/onnxtrain_ops.h), and every row
// a kernel; the emitter types each from its row.
TEST(Emitter, OnnxtrainTableCoversTheKernels) {
  std::set<std::string> kernels;
  for (const auto& [domain, op] : onnxtrain::KernelRegistry::global().ops())
    if (domain == ir::kOnnxtrainDomain) kernels.insert(op);
  ASSERT_GT(kernels.size(), 20u);
  Fixture f;
  for (const auto& op : kernels) {
    // GradientReduceWait takes a token and one gradient per output.
    ir::Node n = op == "GradientReduceWait" ? make_node(op, {"a", "a", "a"}, {"o0", "o1"})
                                            : make_node(op, {"a", "a", "a", "a", "a", "a", "a", "a"}, {"o0", "o1"});
    n.domain = ir::kOnnxtrainDomain;
    std::vector<ir::TypeInfo> t;
    try {
      t = ir::output_types(n, {{"", 17}}, [&](const std::string&) { return &f.m.graph->inputs[0].type; });
    } catch (const std::exception& ex) {
      ADD_FAILURE() << op << ": " << ex.what();
      continue;
    }
    // GlobalNormClip's and LossScaleCheck's scale is float64 whatever the gradients' type (and
    // LossScaleCheck's flag bool); GradientReduceStart's token int64.
    EXPECT_EQ(t.at(0).elem, op == "GlobalNormClip" || op == "LossScaleCheck" ? DType::kFloat64
                            : op == "GradientReduceStart"                    ? DType::kInt64
                                                                             : kF32)
        << op;
    if (op == "LossScaleCheck") {
      EXPECT_EQ(t.at(1).elem, DType::kBool);
    }
  }
  for (const auto& d : ops::onnxtrain_ops()) EXPECT_TRUE(kernels.count(d.name)) << d.name << " has no kernel";
  for (const auto& op : kernels) EXPECT_NE(ops::find_op(op), nullptr) << op << " has a kernel but no row in the table";
  ir::Node unknown = make_node("NoSuchGrad", {"a"}, {"o"});
  unknown.domain = ir::kOnnxtrainDomain;
  const std::string msg = thrown_by([&] { ir::output_types(unknown, {}, [](const std::string&) { return nullptr; }); });
  EXPECT_EQ(msg.rfind("NotImplemented: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("NoSuchGrad"), std::string::npos) << msg;
}

// docs/operators.md is the table's own text: generated by ops::operators_markdown(), compared here.
TEST(OpTable, DocsAreCurrent) {
  const std::string path = std::string(ONNXTRAIN_SOURCE_DIR) + "/docs/operators.md";
  const std::string want = ops::operators_markdown();
  if (std::getenv("ONNXTRAIN_WRITE_DOCS")) std::ofstream(path, std::ios::binary) << want;
  std::ifstream f(path, std::ios::binary);
  const std::string got((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, want) << path << " differs from the operator table: rerun this test with ONNXTRAIN_WRITE_DOCS=1 "
                       << "to rewrite it";
}

// Each row's facts hold together: counts ordered, a type for every output, host inputs among the inputs.
TEST(OpTable, RowsAreConsistent) {
  ASSERT_GT(ops::onnxtrain_ops().size(), 30u);
  std::string prev;
  for (const auto& d : ops::onnxtrain_ops()) {
    EXPECT_LT(prev, d.name) << "sorted by name, no duplicates";
    prev = d.name;
    EXPECT_GE(d.min_inputs, 0) << d.name;
    EXPECT_TRUE(d.max_inputs < 0 || d.max_inputs >= d.min_inputs) << d.name;
    EXPECT_GE(d.min_outputs, 1) << d.name;
    EXPECT_TRUE(d.max_outputs < 0 || d.max_outputs >= d.min_outputs) << d.name;
    if (d.rule == ops::TypeRule::kLikeInputs) {
      ASSERT_FALSE(d.like.empty()) << d.name;
      for (size_t from : d.like) EXPECT_TRUE(d.max_inputs < 0 || int(from) < d.max_inputs) << d.name;
    }
    if (d.rule == ops::TypeRule::kFixed) {
      EXPECT_FALSE(d.fixed.empty()) << d.name;
    }
    for (size_t h : d.host_inputs) EXPECT_TRUE(d.max_inputs < 0 || int(h) < d.max_inputs) << d.name;
    EXPECT_FALSE(d.doc.empty()) << d.name;
    EXPECT_EQ(d.optimizer != nullptr, ops::find_optimizer_spec(d.name) != nullptr) << d.name;
  }
  for (const auto& s : ops::optimizer_specs()) {
    const ops::OpDef* d = ops::find_op(s.name);
    ASSERT_NE(d, nullptr) << s.name;
    EXPECT_EQ(d->optimizer, &s);
  }
}

TEST(Emitter, UndeterminedTypesAreErrorsNamingTheNode) {
  Fixture f;
  Emitter e(f.m, *f.m.graph);
  e.set_origin("test pass");
  auto expect_error = [&](const std::string& m, const std::string& needle) {
    EXPECT_EQ(m.rfind("test pass: ", 0), 0u) << m;
    EXPECT_NE(m.find(needle), std::string::npos) << m;
  };
  using onnxtrain::InvalidGraph;
  using onnxtrain::NotImplemented;
  // Arity against the schema: a missing required input, one input too many.
  expect_error(message_of<NotImplemented>([&] { e.add("Add", {"a"}, {}, "lonely"); }),
               "required input 1 ('B') is missing");
  expect_error(message_of<NotImplemented>([&] { e.add("Relu", {"a", "b"}); }), "it has 2 inputs, opset 14 allows 1");
  // An operator that does not exist at the model's opset.
  expect_error(message_of<NotImplemented>([&] { e.add("Gelu", {"a"}); }), "no ONNX schema for Gelu at opset 17");
  // Unknown operator (no schema) and unknown com.onnxtrain operator.
  expect_error(message_of<NotImplemented>([&] { e.add("NoSuchOp", {"a"}); }), "no ONNX schema for NoSuchOp");
  expect_error(message_of<NotImplemented>([&] { e.add_n("Mystery", {"a"}, 1, {}, ir::kOnnxtrainDomain); }),
               "com.onnxtrain.Mystery node");
  // Cast without 'to'.
  expect_error(message_of<NotImplemented>([&] { e.add("Cast", {"a"}); }), "Cast needs the 'to' attribute");
  // Inputs binding one parameter to different types.
  expect_error(message_of<InvalidGraph>([&] { e.add("Mul", {"a", "d"}); }), "bind type parameter T to different types");
  // A gradient recorded with a type that contradicts the emitted one.
  const std::string s = e.add("Sub", {"a", "b"});
  expect_error(message_of<InvalidGraph>([&] { e.refine_type(s, ir::TypeInfo::tensor(kF64)); }),
               "has element type float");
  e.refine_type(s, ir::TypeInfo::tensor(kF32, {2, 3}));  // adds the shape
  EXPECT_EQ(type_str(e, s), "tensor(float)[2, 3]");
}

// scalar_like: the four float types, values rounded as each type rounds (bit patterns computed by
// hand: 0.1 is 0x3DCCCCCD in float32).
TEST(Emitter, ScalarLikeFourFloatTypes) {
  Fixture f;
  f.m.graph->inputs.push_back({"bf", ir::TypeInfo::tensor(DType::kBFloat16, {4}), ""});
  Emitter e(f.m, *f.m.graph);
  auto value = [&](const std::string& name) {
    const Tensor* t = f.m.graph->initializer(name);
    EXPECT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape(), Shape{}) << name;
    return *t;
  };
  const Tensor t32 = value(e.scalar_like(0.1, "a"));
  ASSERT_EQ(t32.dtype(), kF32);
  EXPECT_EQ(t32.data<float>()[0], 0.1f);
  const Tensor t64 = value(e.scalar_like(0.1, "d"));
  ASSERT_EQ(t64.dtype(), kF64);
  EXPECT_EQ(t64.data<double>()[0], 0.1);
  const Tensor t16 = value(e.scalar_like(0.1, "h"));
  ASSERT_EQ(t16.dtype(), DType::kFloat16);
  EXPECT_EQ(t16.data<float16>()[0].bits, 0x2E66);  // 1.1001100110b * 2^-4 = 0.0999755859375
  const Tensor tbf = value(e.scalar_like(0.1, "bf"));
  ASSERT_EQ(tbf.dtype(), DType::kBFloat16);
  EXPECT_EQ(tbf.data<bfloat16>()[0].bits, 0x3DCD);  // 0x3DCC|CCCD rounds up
  EXPECT_EQ(float(tbf.data<bfloat16>()[0]), 0.10009765625f);
  EXPECT_EQ(type_str(e, e.scalar_like(-2.5, "bf")), "tensor(bfloat16)[]");
  // Not a float type / unknown type: errors naming the value.
  std::string m = thrown_by([&] { e.scalar_like(1.0, "i"); });
  EXPECT_NE(m.find("'i' has non-float element type int64"), std::string::npos) << m;
  m = thrown_by([&] { e.scalar_like(1.0, "u"); });
  EXPECT_NE(m.find("element type of 'u' is unknown"), std::string::npos) << m;
}

// ReduceSum / Squeeze / Unsqueeze / Split take axes as attributes before opset 13, as inputs from 13.
TEST(Emitter, OpsetAwareIdioms) {
  for (int64_t opset : {11, 13}) {
    Fixture f(opset);
    Emitter e(f.m, *f.m.graph);
    const ir::Graph& g = *f.m.graph;
    const size_t inits = g.initializers.size();
    e.reduce_sum("a", {1}, true);
    e.unsqueeze("a", {0});
    e.squeeze("a", {0});
    e.split("a", 1, {1, 2});
    const size_t n = g.nodes.size();
    ASSERT_EQ(n, 4u);
    for (size_t k = 0; k < n; ++k) {
      EXPECT_EQ(g.nodes[k].inputs.size(), opset >= 13 ? 2u : 1u) << g.nodes[k].op_type << " opset " << opset;
      EXPECT_EQ(g.nodes[k].attr(k == 3 ? "split" : "axes") != nullptr, opset < 13) << g.nodes[k].op_type;
    }
    EXPECT_EQ(g.initializers.size() - inits, opset >= 13 ? 4u : 0u);
    // shape_of is emitted once per value.
    EXPECT_EQ(e.shape_of("a"), e.shape_of("a"));
    EXPECT_EQ(g.nodes.size(), n + 1);
  }
}

// Before opset 11 ONNX has no negative axes: attribute axes are counted from the known rank.
TEST(Emitter, NegativeAxesBeforeOpset11) {
  for (int64_t opset : {9, 11}) {
    Fixture f(opset);
    Emitter e(f.m, *f.m.graph);
    const ir::Graph& g = *f.m.graph;
    e.unsqueeze("a", {-1});          // rank 2 -> 3
    e.squeeze("a", {-2});            // rank 2
    e.reduce_sum("h", {-1}, false);  // rank 1
    ASSERT_EQ(g.nodes.size(), 3u);
    const bool old = opset < 11;
    EXPECT_EQ(g.nodes[0].attr("axes")->ints, std::vector<int64_t>{old ? 2 : -1}) << opset;
    EXPECT_EQ(g.nodes[1].attr("axes")->ints, std::vector<int64_t>{old ? 0 : -2}) << opset;
    EXPECT_EQ(g.nodes[2].attr("axes")->ints, std::vector<int64_t>{old ? 0 : -1}) << opset;
    EXPECT_EQ(message_of<onnxtrain::NotImplemented>([&] { e.reshape("a", "i"); }).empty(), true);
    const std::string m = message_of<onnxtrain::NotImplemented>([&] { e.squeeze("u", {-1}); });
    EXPECT_EQ(m.empty(), !old) << m;
    if (old) {
      EXPECT_NE(m.find("Squeeze of 'u' with negative axes at opset 9"), std::string::npos) << m;
    }
  }
}

TEST(Emitter, ReshapeNeedsOpset5) {
  Fixture f(4);
  Emitter e(f.m, *f.m.graph);
  const std::string m = message_of<onnxtrain::NotImplemented>([&] { e.reshape("a", "i"); });
  EXPECT_NE(m.find("Reshape-4 of 'a' takes its shape as an attribute"), std::string::npos) << m;
}

// A nested scope sees the enclosing types, puts constants in the root graph and draws names from
// one pool.
TEST(Emitter, NestedScope) {
  Fixture f;
  Emitter root(f.m, *f.m.graph);
  ir::Graph body;
  Emitter inner(root, body);
  const std::string s = inner.scalar_like(3.0, "d");
  EXPECT_NE(f.m.graph->initializer(s), nullptr);
  const std::string p = inner.add("Mul", {"d", s});
  EXPECT_EQ(type_str(inner, p), "tensor(double)");
  EXPECT_EQ(root.type(p), nullptr) << "types of a nested scope stay in it";
  ASSERT_EQ(body.nodes.size(), 1u);
  EXPECT_NE(root.fresh(p), p) << "names come from the root's pool";
  EXPECT_FALSE(root.reserve("a"));
  EXPECT_TRUE(root.reserve("new_input"));
  EXPECT_THROW(root.add_input({"a", ir::TypeInfo::tensor(kF32), ""}), onnxtrain::InvalidGraph);
}

// A graph built with the emitter on a model runs; y = sum over axis 1 of (x * 2 - 0.5)^2, checked
// against a naive double-precision loop.
TEST(Emitter, BuiltGraphRuns) {
  for (int64_t opset : {11, 17}) {
    ir::Model m;
    m.opsets = {{"", opset}};
    m.graph = std::make_shared<ir::Graph>();
    Emitter e(m, *m.graph);
    e.add_input({"x", ir::TypeInfo::tensor(kF64, {3, 4}), ""});
    const std::string t = e.add("Sub", {e.add("Mul", {"x", e.scalar_like(2.0, "x")}), e.scalar_like(0.5, "x")});
    const std::string y = e.squeeze(e.reduce_sum(e.add("Mul", {t, t}), {1}, true), {1});
    EXPECT_EQ(type_str(e, y), "tensor(double)");
    m.graph->outputs.push_back({y, *e.type(y), ""});
    std::mt19937 rng(7);
    const Tensor x = random_tensor(kF64, {3, 4}, rng);
    const auto out = run_model(m, {x});
    const auto xv = to_double(x);
    std::vector<double> expect(3, 0.0);
    for (size_t r = 0; r < 3; ++r)
      for (size_t c = 0; c < 4; ++c) expect[r] += std::pow(xv[r * 4 + c] * 2 - 0.5, 2);
    EXPECT_TRUE(all_close(out.at(0), {3}, expect, 1e-14, 0)) << "opset " << opset;
  }
}
