// com.microsoft FusedConv (Y = activation(Conv(X, W, B) + Z)) against a naive double-precision
// reference, and the inference sessions' Conv [+ Add] + Relu / Clip rewrite (src/runtime/
// conv_fusion.cpp) against the unfused session and the same reference, with the cases it must skip.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "ir/onnx_io.h"
#include "onnxtrain/session.h"
#include "ops/onnxtrain_ops.h"
#include "test_util.h"

namespace ot_test {
std::string thrown_by(const std::function<void()>& f);  // test_reduce.cpp
}

using namespace ot_test;
using onnxtrain::GraphOptimizationLevel;
using onnxtrain::InferenceSession;
using onnxtrain::SessionOptions;

namespace {

// A 2-D convolution: X [N, C, H, W], W [M, C/G, K, K], square stride s and pads p on every side.
struct Geom {
  int64_t N, C, M, G, H, K, s, p;
  int64_t out() const { return (H + 2 * p - K) / s + 1; }
  Shape xs() const { return {N, C, H, H}; }
  Shape ws() const { return {M, C / G, K, K}; }
  Shape ys() const { return {N, M, out(), out()}; }
  std::vector<ir::Attribute> attrs() const {
    return {attr_ints("strides", {s, s}), attr_ints("pads", {p, p, p, p}), attr_int("group", G)};
  }
};

// Conv in double: y[n, m, i, j] = b[m] + sum_{c, u, v} x[n, g*Cg + c, i*s - p + u, j*s - p + v] w[m, c, u, v].
std::vector<double> ref_conv(const Geom& g, const std::vector<double>& x, const std::vector<double>& w,
                             const std::vector<double>& b) {
  const int64_t O = g.out(), Cg = g.C / g.G, Mg = g.M / g.G;
  std::vector<double> y(size_t(g.N * g.M * O * O), 0.0);
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t m = 0; m < g.M; ++m)
      for (int64_t i = 0; i < O; ++i)
        for (int64_t j = 0; j < O; ++j) {
          double acc = b.empty() ? 0.0 : b[size_t(m)];
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t u = 0; u < g.K; ++u)
              for (int64_t v = 0; v < g.K; ++v) {
                const int64_t r = i * g.s - g.p + u, q = j * g.s - g.p + v;
                if (r < 0 || r >= g.H || q < 0 || q >= g.H) continue;
                const int64_t ci = (m / Mg) * Cg + c;
                acc += x[size_t(((n * g.C + ci) * g.H + r) * g.H + q)] * w[size_t(((m * Cg + c) * g.K + u) * g.K + v)];
              }
          y[size_t(((n * g.M + m) * O + i) * O + j)] = acc;
        }
  return y;
}

// The activations of FusedConv in double.
double act(const std::string& name, const std::vector<float>& p, double v) {
  if (name == "Relu") return std::max(v, 0.0);
  if (name == "LeakyRelu") return v < 0 ? double(p[0]) * v : v;
  if (name == "Clip") return std::min(std::max(v, double(p[0])), double(p[1]));
  if (name == "Sigmoid") return 1.0 / (1.0 + std::exp(-v));
  if (name == "Tanh") return std::tanh(v);
  if (name == "HardSigmoid") return std::max(0.0, std::min(1.0, double(p[0]) * v + double(p[1])));
  return v;
}

RunOptions microsoft(bool constants, int threads) {
  RunOptions o;
  o.domain = onnxtrain::ops::kMicrosoftDomain;
  o.inputs_as_constants = constants;
  o.threads = threads;
  return o;
}

}  // namespace

// Every activation, with and without Z and bias, on the oneDNN blocked path (16-channel multiples),
// the plain path (few channels), the depthwise kernel (float32, G = C) and the im2col path (float64,
// float16): against the reference in double.
TEST(FusedConv, MatchesReference) {
  std::mt19937 rng(35);
  const std::vector<std::pair<std::string, std::vector<float>>> acts = {
      {"", {}},        {"Relu", {}},        {"LeakyRelu", {0.1f}}, {"Clip", {-0.5f, 0.75f}},
      {"Sigmoid", {}}, {"Tanh", {}},        {"HardSigmoid", {0.3f, 0.4f}}};
  const std::vector<Geom> geoms = {{2, 16, 32, 1, 9, 3, 1, 1}, {1, 3, 5, 1, 8, 3, 2, 0}, {2, 8, 8, 8, 7, 3, 1, 1},
                                   {1, 4, 6, 2, 6, 1, 1, 0}};
  int trial = 0;
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16})
    for (const Geom& g : geoms)
      for (const auto& [name, params] : acts)
        for (int with_z = 0; with_z < 2; ++with_z, ++trial) {
          const bool bias = trial % 3 != 1;
          Tensor x = random_tensor(dt, g.xs(), rng), w = random_tensor(dt, g.ws(), rng);
          Tensor b = bias ? random_tensor(dt, {g.M}, rng) : Tensor(), z = with_z ? random_tensor(dt, g.ys(), rng) : Tensor();
          auto attrs = g.attrs();
          if (!name.empty()) attrs.push_back(attr_string("activation", name));
          if (!params.empty()) attrs.push_back(attr_floats("activation_params", params));
          std::vector<Tensor> in = {x, w, b};
          if (with_z) in.push_back(z);
          const Tensor z_before = with_z ? z.clone() : Tensor();
          auto y = run_node("FusedConv", in, attrs, microsoft(trial % 4 == 0, 1 + trial % 2));
          auto e = ref_conv(g, to_double(x), to_double(w), bias ? to_double(b) : std::vector<double>{});
          const auto zd = with_z ? to_double(z) : std::vector<double>{};
          for (size_t i = 0; i < e.size(); ++i) e[i] = act(name, params, e[i] + (with_z ? zd[i] : 0.0));
          const double tol = dt == DType::kFloat64 ? 1e-10 : dt == DType::kFloat32 ? 1e-5 : 3e-3;
          EXPECT_TRUE(all_close(y[0], g.ys(), e, tol, tol)) << onnxtrain::dtype_name(dt) << " C=" << g.C << " G=" << g.G
                                                            << " " << name << " z=" << with_z;
          if (with_z) {
            EXPECT_TRUE(same_bits(z, z_before)) << "the caller's Z was written";
          }
        }
}

TEST(FusedConv, RefusesBadAttributesAndZ) {
  std::mt19937 rng(7);
  const Geom g{1, 4, 4, 1, 5, 3, 1, 1};
  Tensor x = random_tensor(DType::kFloat32, g.xs(), rng), w = random_tensor(DType::kFloat32, g.ws(), rng);
  auto with = [&](std::vector<ir::Attribute> extra, std::vector<Tensor> more = {}) {
    auto attrs = g.attrs();
    attrs.insert(attrs.end(), extra.begin(), extra.end());
    std::vector<Tensor> in = {x, w};
    in.insert(in.end(), more.begin(), more.end());
    return thrown_by([&] { run_node("FusedConv", in, attrs, microsoft(false, 1)); });
  };
  EXPECT_NE(with({attr_string("activation", "Gelu")}).find("activation 'Gelu' is not implemented"), std::string::npos);
  EXPECT_NE(with({attr_string("activation", "Clip"), attr_floats("activation_params", {0.f})})
                .find("activation 'Clip' takes 2 activation_params, got 1"),
            std::string::npos);
  EXPECT_NE(with({attr_string("activation", "Clip"), attr_floats("activation_params", {2.f, 1.f})}).find("min 2 > max 1"),
            std::string::npos);
  const std::string bad_z =
      with({attr_string("activation", "Relu")}, {Tensor(), random_tensor(DType::kFloat32, {1, 4, 5, 1}, rng)});
  EXPECT_NE(bad_z.find("Z must be float [1, 4, 5, 5]"), std::string::npos) << bad_z;
  EXPECT_NE(bad_z.find("FusedConv"), std::string::npos) << bad_z;
}

namespace {

// A model built node by node: float32 values, initializers from the reference's doubles.
struct ModelBuilder {
  ir::Model m;
  std::map<std::string, std::vector<double>> values;  // initializers, for the reference
  std::mt19937 rng{11};

  ModelBuilder() {
    m.opsets[""] = 17;
    m.graph = std::make_shared<ir::Graph>();
  }
  void input(const std::string& name, const Shape& s) { m.graph->inputs.push_back(value_info(name, DType::kFloat32, s)); }
  void output(const std::string& name) { m.graph->outputs.push_back(value_info(name)); }
  std::string init(const std::string& name, const Shape& s, bool overridable = false) {
    Tensor t = random_tensor(DType::kFloat32, s, rng);
    values[name] = to_double(t);
    m.graph->initializers.emplace_back(name, t);
    if (overridable) input(name, s);
    return name;
  }
  std::string scalar(const std::string& name, float v, bool overridable = false) {
    values[name] = {double(v)};
    m.graph->initializers.emplace_back(name, Tensor::from_vector<float>({}, {v}));
    if (overridable) input(name, {});
    return name;
  }
  void node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
            std::vector<ir::Attribute> attrs = {}) {
    m.graph->nodes.push_back(make_node(op, std::move(in), std::move(out), std::move(attrs)));
  }
  std::string bytes() const { return ir::serialize_model(m); }
};

// Op types of the nodes the session runs, with their counts.
std::map<std::string, int> node_ops(const InferenceSession& s) {
  std::map<std::string, int> ops;
  for (const auto& n : s.node_assignment()) ++ops[n.op_type];
  return ops;
}

InferenceSession session(const std::string& bytes, GraphOptimizationLevel level, int threads = 1) {
  SessionOptions o;
  o.graph_optimization_level = level;
  o.intra_op_num_threads = threads;
  return InferenceSession(bytes.data(), bytes.size(), o);
}

}  // namespace

// Conv -> Relu, Conv -> Add(., x) -> Relu (ResNet's block end) and Conv -> Clip(0, 6) (Relu6)
// become three FusedConv nodes; the outputs equal the unfused session's within 1e-5 (oneDNN may
// pick another kernel, or add the bias after the sum, once post-ops are attached) and the reference
// in double.
TEST(ConvFusion, RewriteMatchesUnfusedAndReference) {
  const Geom g3{1, 16, 16, 1, 10, 3, 1, 1}, g1{1, 16, 32, 1, 10, 1, 1, 0};
  ModelBuilder mb;
  mb.input("x", g3.xs());
  mb.node("Conv", {"x", mb.init("w1", g3.ws()), mb.init("b1", {16})}, {"c1"}, g3.attrs());
  mb.node("Relu", {"c1"}, {"r1"});
  mb.node("Conv", {"r1", mb.init("w2", g3.ws()), mb.init("b2", {16})}, {"c2"}, g3.attrs());
  mb.node("Add", {"x", "c2"}, {"a2"});
  mb.node("Relu", {"a2"}, {"r2"});
  mb.node("Conv", {"r2", mb.init("w3", g1.ws())}, {"c3"}, g1.attrs());
  mb.node("Clip", {"c3", mb.scalar("lo", 0.f), mb.scalar("hi", 0.5f)}, {"y"});
  mb.output("y");
  const std::string bytes = mb.bytes();
  std::mt19937 rng(3);
  const Tensor x = random_tensor(DType::kFloat32, g3.xs(), rng);
  for (int threads : {1, 2}) {
    InferenceSession fused = session(bytes, GraphOptimizationLevel::kEnableExtended, threads);
    InferenceSession plain = session(bytes, GraphOptimizationLevel::kEnableBasic, threads);
    EXPECT_EQ(node_ops(fused), (std::map<std::string, int>{{"FusedConv", 3}}));
    EXPECT_EQ(node_ops(plain), (std::map<std::string, int>{{"Add", 1}, {"Clip", 1}, {"Conv", 3}, {"Relu", 2}}));
    const Tensor yf = fused.run({}, {{"x", x}})[0], yp = plain.run({}, {{"x", x}})[0];
    EXPECT_TRUE(all_close(yf, yp.shape(), to_double(yp), 1e-5, 1e-6)) << threads << " threads";
    // The reference.
    const auto xd = to_double(x);
    auto r1 = ref_conv(g3, xd, mb.values["w1"], mb.values["b1"]);
    for (double& v : r1) v = std::max(v, 0.0);
    auto r2 = ref_conv(g3, r1, mb.values["w2"], mb.values["b2"]);
    for (size_t i = 0; i < r2.size(); ++i) r2[i] = std::max(r2[i] + xd[i], 0.0);
    auto y = ref_conv(g1, r2, mb.values["w3"], {});
    for (double& v : y) v = std::min(std::max(v, 0.0), 0.5);
    EXPECT_TRUE(all_close(yf, g1.ys(), y, 1e-5, 1e-5));
  }
}

// A residual sum without activation (MobileNet-v2's, EfficientNet's): Conv -> Add(x, .) becomes a
// FusedConv with Z and no activation attribute even though the sum is read twice (the next Conv and a
// graph output); the next Conv -> Relu fuses as before, and an Add of two convolutions takes the
// second as Z. Outputs equal the unfused session's and the double reference.
TEST(ConvFusion, ResidualAddWithoutActivation) {
  const Geom g{1, 16, 16, 1, 9, 3, 1, 1};
  ModelBuilder mb;
  mb.input("x", g.xs());
  mb.node("Conv", {"x", mb.init("w1", g.ws()), mb.init("b1", {16})}, {"c1"}, g.attrs());
  mb.node("Add", {"x", "c1"}, {"a"});
  mb.node("Conv", {"a", mb.init("w2", g.ws())}, {"c2"}, g.attrs());
  mb.node("Relu", {"c2"}, {"r"});
  mb.node("Conv", {"r", mb.init("w3", g.ws())}, {"c3"}, g.attrs());
  mb.node("Conv", {"r", mb.init("w4", g.ws())}, {"c4"}, g.attrs());
  mb.node("Add", {"c3", "c4"}, {"y"});
  mb.output("a"), mb.output("y");
  const std::string bytes = mb.bytes();
  std::mt19937 rng(7);
  const Tensor x = random_tensor(DType::kFloat32, g.xs(), rng);
  const auto xd = to_double(x);
  auto a = ref_conv(g, xd, mb.values["w1"], mb.values["b1"]);
  for (size_t i = 0; i < a.size(); ++i) a[i] += xd[i];
  auto r = ref_conv(g, a, mb.values["w2"], {});
  for (double& v : r) v = std::max(v, 0.0);
  auto y = ref_conv(g, r, mb.values["w3"], {});
  const auto c4 = ref_conv(g, r, mb.values["w4"], {});
  for (size_t i = 0; i < y.size(); ++i) y[i] += c4[i];
  for (int threads : {1, 2}) {
    InferenceSession fused = session(bytes, GraphOptimizationLevel::kEnableExtended, threads);
    InferenceSession plain = session(bytes, GraphOptimizationLevel::kEnableBasic, threads);
    EXPECT_EQ(node_ops(fused), (std::map<std::string, int>{{"Conv", 1}, {"FusedConv", 3}}));
    const auto yf = fused.run({}, {{"x", x}}), yp = plain.run({}, {{"x", x}});
    for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(all_close(yf[i], yp[i].shape(), to_double(yp[i]), 1e-5, 1e-6)) << i;
    EXPECT_TRUE(all_close(yf[0], g.ys(), a, 1e-5, 1e-5));
    // y: float32 through three 144-term convolutions and a sum of two (both sessions agree to 1e-5).
    EXPECT_TRUE(all_close(yf[1], g.ys(), y, 1e-4, 1e-4));
  }
}

// What the rewrite must leave alone: a Conv output also read by another node or also a graph
// output, an Add that broadcasts, a Clip whose bound a feed may override; a graph input as Z is
// fused and the caller's tensor is not written.
TEST(ConvFusion, SkipsWhereItMust) {
  const Geom g{1, 16, 16, 1, 6, 3, 1, 1};
  std::mt19937 rng(5);
  const Tensor x = random_tensor(DType::kFloat32, g.xs(), rng);
  auto ops_and_check = [&](ModelBuilder& mb, std::vector<std::pair<std::string, Tensor>> feeds) {
    const std::string bytes = mb.bytes();
    InferenceSession fused = session(bytes, GraphOptimizationLevel::kEnableExtended);
    InferenceSession plain = session(bytes, GraphOptimizationLevel::kEnableBasic);
    std::vector<Tensor> before;
    for (const auto& f : feeds) before.push_back(f.second.clone());
    const auto yf = fused.run({}, feeds), yp = plain.run({}, feeds);
    for (size_t i = 0; i < yf.size(); ++i) EXPECT_TRUE(all_close(yf[i], yp[i].shape(), to_double(yp[i]), 1e-5, 1e-6)) << i;
    for (size_t i = 0; i < feeds.size(); ++i) EXPECT_TRUE(same_bits(feeds[i].second, before[i])) << feeds[i].first;
    return node_ops(fused);
  };
  {  // the Conv output read twice
    ModelBuilder mb;
    mb.input("x", g.xs());
    mb.node("Conv", {"x", mb.init("w", g.ws())}, {"c"}, g.attrs());
    mb.node("Relu", {"c"}, {"r"});
    mb.node("Sigmoid", {"c"}, {"s"});
    mb.output("r"), mb.output("s");
    EXPECT_EQ(ops_and_check(mb, {{"x", x}}), (std::map<std::string, int>{{"Conv", 1}, {"Relu", 1}, {"Sigmoid", 1}}));
  }
  {  // the Conv output a graph output
    ModelBuilder mb;
    mb.input("x", g.xs());
    mb.node("Conv", {"x", mb.init("w", g.ws())}, {"c"}, g.attrs());
    mb.node("Relu", {"c"}, {"r"});
    mb.output("r"), mb.output("c");
    EXPECT_EQ(ops_and_check(mb, {{"x", x}}), (std::map<std::string, int>{{"Conv", 1}, {"Relu", 1}}));
  }
  {  // Add broadcasting a [16, 1, 1] operand: not a sum into the output
    ModelBuilder mb;
    mb.input("x", g.xs());
    mb.node("Conv", {"x", mb.init("w", g.ws())}, {"c"}, g.attrs());
    mb.node("Add", {"c", mb.init("z", {16, 1, 1})}, {"a"});
    mb.node("Relu", {"a"}, {"r"});
    mb.output("r");
    EXPECT_EQ(ops_and_check(mb, {{"x", x}}), (std::map<std::string, int>{{"Add", 1}, {"Conv", 1}, {"Relu", 1}}));
  }
  {  // Clip's max an overridable initializer; then a Relu after an Add of a fed Z
    ModelBuilder mb;
    mb.input("x", g.xs());
    mb.input("z", g.ys());
    mb.node("Conv", {"x", mb.init("w", g.ws())}, {"c"}, g.attrs());
    mb.node("Clip", {"c", "", mb.scalar("hi", 0.25f, true)}, {"k"});
    mb.node("Conv", {"k", mb.init("w2", g.ws())}, {"c2"}, g.attrs());
    mb.node("Add", {"c2", "z"}, {"a"});
    mb.node("Relu", {"a"}, {"r"});
    mb.output("r");
    const Tensor z = random_tensor(DType::kFloat32, g.ys(), rng);
    EXPECT_EQ(ops_and_check(mb, {{"x", x}, {"z", z}}), (std::map<std::string, int>{{"Clip", 1}, {"Conv", 1}, {"FusedConv", 1}}));
  }
  {  // Z a constant initializer: fused, and the initializer is not overwritten (two runs agree)
    ModelBuilder mb;
    mb.input("x", g.xs());
    mb.node("Conv", {"x", mb.init("w", g.ws())}, {"c"}, g.attrs());
    mb.node("Add", {mb.init("z", g.ys()), "c"}, {"a"});
    mb.node("Relu", {"a"}, {"r"});
    mb.output("r");
    InferenceSession fused = session(mb.bytes(), GraphOptimizationLevel::kEnableExtended);
    const Tensor first = fused.run({}, {{"x", x}})[0].clone();
    EXPECT_TRUE(same_bits(fused.run({}, {{"x", x}})[0], first));
    EXPECT_EQ(ops_and_check(mb, {{"x", x}}), (std::map<std::string, int>{{"FusedConv", 1}}));
  }
}

// Constant weights are reordered into the primitive's layout once, when the plan is made: the
// outputs of two runs equal those of the same Conv with its weights fed (reordered every run) bit
// for bit, for the blocked (16-channel) and the plain layouts, with and without fusion.
TEST(ConvFusion, ConstantWeightsReorderedOnceMatchFedWeights) {
  std::mt19937 rng(9);
  for (const Geom& g : {Geom{1, 32, 32, 1, 9, 3, 1, 1}, Geom{2, 3, 8, 1, 12, 5, 2, 2}})
    for (bool relu : {false, true}) {
      ModelBuilder constant, fed;
      for (ModelBuilder* mb : {&constant, &fed}) {
        mb->input("x", g.xs());
        if (mb == &fed) mb->input("w", g.ws());
        else mb->init("w", g.ws());
        mb->node("Conv", {"x", "w"}, {relu ? "c" : "y"}, g.attrs());
        if (relu) mb->node("Relu", {"c"}, {"y"});
        mb->output("y");
      }
      const Tensor x = random_tensor(DType::kFloat32, g.xs(), rng);
      const Tensor w = onnxtrain::Tensor(*constant.m.graph->initializer("w"));
      InferenceSession a = session(constant.bytes(), GraphOptimizationLevel::kEnableExtended);
      InferenceSession b = session(fed.bytes(), GraphOptimizationLevel::kEnableExtended);
      const Tensor expected = b.run({}, {{"x", x}, {"w", w}})[0];
      for (int run = 0; run < 2; ++run) EXPECT_TRUE(same_bits(a.run({}, {{"x", x}})[0], expected)) << g.C << " " << relu;
      auto e = ref_conv(g, to_double(x), to_double(w), {});
      if (relu)
        for (double& v : e) v = std::max(v, 0.0);
      EXPECT_TRUE(all_close(expected, g.ys(), e, 1e-5, 1e-5));
    }
}

// Conv + BatchNormalization (+ Relu) folds into one FusedConv whose weights and bias are the
// statistics' affine map applied in double: the output matches the unfused session within 1e-5
// and the reference; a BatchNormalization whose statistic a feed may override, or after a Conv
// output read twice, stays.
TEST(ConvFusion, BatchNormFoldsIntoConv) {
  const Geom g{2, 16, 16, 1, 7, 3, 1, 1};
  std::mt19937 rng(21);
  const Tensor x = random_tensor(DType::kFloat32, g.xs(), rng);
  for (int variant = 0; variant < 3; ++variant) {  // 0: folds; 1: var overridable; 2: Conv output read twice
    ModelBuilder mb;
    mb.input("x", g.xs());
    mb.node("Conv", {"x", mb.init("w", g.ws()), mb.init("b", {16})}, {"c"}, g.attrs());
    mb.init("scale", {16}), mb.init("bias", {16}), mb.init("mean", {16});
    Tensor var = random_tensor(DType::kFloat32, {16}, rng, 0.2, 2.0);
    mb.values["var"] = to_double(var);
    mb.m.graph->initializers.emplace_back("var", var);
    if (variant == 1) mb.input("var", {16});
    mb.node("BatchNormalization", {"c", "scale", "bias", "mean", "var"}, {"n"}, {attr_float("epsilon", 1e-3f)});
    mb.node("Relu", {"n"}, {"y"});
    mb.output("y");
    if (variant == 2) mb.output("c");
    InferenceSession fused = session(mb.bytes(), GraphOptimizationLevel::kEnableExtended);
    InferenceSession plain = session(mb.bytes(), GraphOptimizationLevel::kEnableBasic);
    const auto expected_ops = variant == 0 ? std::map<std::string, int>{{"FusedConv", 1}}
                                           : std::map<std::string, int>{{"BatchNormalization", 1}, {"Conv", 1}, {"Relu", 1}};
    EXPECT_EQ(node_ops(fused), expected_ops) << variant;
    const Tensor yf = fused.run({}, {{"x", x}})[0], yp = plain.run({}, {{"x", x}})[0];
    EXPECT_TRUE(all_close(yf, yp.shape(), to_double(yp), 1e-5, 1e-5)) << variant;
    auto e = ref_conv(g, to_double(x), mb.values["w"], mb.values["b"]);
    const int64_t plane = g.out() * g.out();
    for (size_t i = 0; i < e.size(); ++i) {
      const size_t m = size_t((int64_t(i) / plane) % g.M);
      const double n = (e[i] - mb.values["mean"][m]) / std::sqrt(mb.values["var"][m] + double(1e-3f)) * mb.values["scale"][m] +
                       mb.values["bias"][m];
      e[i] = std::max(n, 0.0);
    }
    EXPECT_TRUE(all_close(yf, g.ys(), e, 1e-4, 1e-5)) << variant;
  }
}
