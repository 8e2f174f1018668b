// Gradient rules of BatchNormalization, InstanceNormalization, LayerNormalization, LRN and
// Dropout: finite-difference checks (float64), the com.onnxtrain.BatchNormalizationGrad and
// LayerNormalizationGrad kernels against naive double-precision references, and Dropout's
// training-mode gradient against the mask of the same run.
#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>

#include <cmath>

#include "autodiff/builder.h"
#include "ir/onnx_io.h"
#include "ir/proto.h"
#include "grad_check.h"
#include "runtime/executor.h"
#include "test_grad_util.h"

using namespace ot_test;
using onnxtrain::shape_numel;
using onnxtrain::shape_to_string;

namespace {

constexpr DType kF64 = DType::kFloat64, kF32 = DType::kFloat32;

// ---------------------------------------------------------------- BatchNormalization
struct BnCase {
  int64_t opset;
  Shape shape;
  bool training;
  bool spatial = true;
};

GradCheck bn_case(const BnCase& bc, uint32_t seed) {
  std::mt19937 rng(seed);
  const Shape ps = bc.spatial ? Shape{bc.shape[1]} : Shape(bc.shape.begin() + 1, bc.shape.end());
  GradCheck g;
  g.op = "BatchNormalization";
  g.opset = bc.opset;
  g.seed = seed;
  g.inputs = {random_tensor(kF64, bc.shape, rng, -2, 2), random_tensor(kF64, ps, rng, -2, 2),
              random_tensor(kF64, ps, rng, -2, 2), random_tensor(kF64, ps, rng, -1, 1),
              random_tensor(kF64, ps, rng, 0.5, 2)};
  g.attrs = {attr_float("epsilon", 1e-3f), attr_float("momentum", 0.7f)};
  if (bc.opset >= 14) g.attrs.push_back(attr_int("training_mode", bc.training));
  if (bc.opset < 9) g.attrs.push_back(attr_int("spatial", bc.spatial));
  // Before opset 14 naming the statistics outputs selects training mode.
  g.num_outputs = bc.opset < 14 ? (bc.training ? 5 : 1) : (bc.training ? 3 : 1);
  return g;
}

const std::vector<BnCase> kBnCases = {
    {9, {3, 2, 4}, true},         {9, {4, 3}, true},          {9, {2, 3, 2, 2}, false}, {9, {5, 2}, false},
    {14, {3, 2, 4}, true},        {14, {4, 3}, false},        {15, {2, 3, 2, 2}, true}, {15, {3, 2, 3}, false},
    {7, {3, 2, 2}, true, false},  {7, {3, 2, 2}, false, false}, {7, {4, 3, 2}, true},
};

}  // namespace

GRAD_COVERS(GradNorm, BatchNormalization, "BatchNormalization");
TEST(GradNorm, BatchNormalization) {
  uint32_t seed = 1000;
  for (const auto& bc : kBnCases) {
    GradCheck g = bn_case(bc, ++seed);
    const std::string what = "opset " + std::to_string(bc.opset) + " " + shape_to_string(bc.shape) +
                             (bc.training ? " training" : " inference") + (bc.spatial ? "" : " spatial=0");
    EXPECT_TRUE(check_gradient(g)) << what;
    g.portable = true;
    EXPECT_TRUE(check_gradient(g)) << what << " (portable)";
  }
  GradCheck g = bn_case({15, {3, 2, 4}, true}, 1100);
  g.symbolic_shapes = true;
  EXPECT_TRUE(check_gradient(g)) << "symbolic shapes";
  // Opset 15: float32 scale, B, mean, var (T1, T2) with a float64 X; X differentiated.
  for (bool training : {true, false})
    for (bool portable : {false, true}) {
      g = bn_case({15, {3, 2, 4}, training}, 1101);
      for (size_t i = 1; i < 5; ++i) g.inputs[i] = from_double(kF32, g.inputs[i].shape(), to_double(g.inputs[i]));
      g.wrt = {0};
      g.portable = portable;
      EXPECT_TRUE(check_gradient(g)) << "mixed types, training " << training << (portable ? " (portable)" : "");
    }
}

// BatchNormalizationGrad against the formulas evaluated naively in double.
TEST(GradNorm, BatchNormGradKernel) {
  std::mt19937 rng(1200);
  for (int trial = 0; trial < 24; ++trial) {
    Shape s(size_t(std::uniform_int_distribution<int>(2, 4)(rng)));
    for (auto& d : s) d = std::uniform_int_distribution<int>(1, 6)(rng);
    if (trial % 4 == 1) s = {int64_t(7 + trial), int64_t(600 + trial)};  // [N, C]: channel blocks
    const bool training = trial % 2 == 0, spatial = trial % 5 != 3;
    const int64_t N = s[0], C = spatial ? s[1] : shape_numel(s) / s[0], S = shape_numel(s) / N / C;
    const DType dt = trial % 6 == 5 ? kF64 : kF32;
    const Tensor x = random_tensor(dt, s, rng, -2, 3), dy = random_tensor(dt, s, rng, -1, 1);
    const Tensor scale = random_tensor(kF32, {C}, rng, -2, 2), mean = random_tensor(kF32, {C}, rng, -1, 1),
                 var = random_tensor(kF32, {C}, rng, 0.2, 2);
    const double eps = 1e-3;
    auto xv = to_double(x), gv = to_double(dy), sv = to_double(scale), mv = to_double(mean), vv = to_double(var);
    std::vector<double> dx(xv.size()), dscale(static_cast<size_t>(C)), db(static_cast<size_t>(C)), dmean(static_cast<size_t>(C)), dvar(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      auto at = [&](int64_t n, int64_t j) { return size_t((n * C + c) * S + j); };
      double mu = mv[size_t(c)], v = vv[size_t(c)], M = double(N * S);
      if (training) {
        mu = v = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t j = 0; j < S; ++j) mu += xv[at(n, j)] / M;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t j = 0; j < S; ++j) v += (xv[at(n, j)] - mu) * (xv[at(n, j)] - mu) / M;
      }
      const double inv = 1 / std::sqrt(v + eps);
      double sg = 0, sgx = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < S; ++j) {
          sg += gv[at(n, j)];
          sgx += gv[at(n, j)] * (xv[at(n, j)] - mu) * inv;
        }
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < S; ++j) {
          const double xh = (xv[at(n, j)] - mu) * inv, g = gv[at(n, j)];
          dx[at(n, j)] = sv[size_t(c)] * inv * (training ? g - sg / M - xh * sgx / M : g);
        }
      dscale[size_t(c)] = sgx;
      db[size_t(c)] = sg;
      dmean[size_t(c)] = -sv[size_t(c)] * inv * sg;
      dvar[size_t(c)] = -0.5 * sv[size_t(c)] * inv * inv * sgx;
    }
    RunOptions ro;
    ro.domain = "com.onnxtrain";
    ro.num_outputs = training ? 3 : 5;
    ro.threads = 1 + trial % 2;
    auto out = run_node("BatchNormalizationGrad", {dy, x, scale, mean, var},
                        {attr_float("epsilon", float(eps)), attr_int("training_mode", training), attr_int("spatial", spatial)}, ro);
    const double tol = dt == kF64 ? 1e-9 : 2e-4;
    const std::string what = "trial " + std::to_string(trial) + " " + shape_to_string(s) + (training ? " training" : "") +
                             (spatial ? "" : " spatial=0") + " (seed 1200)";
    EXPECT_TRUE(all_close(out[0], s, dx, tol, tol)) << "dX " << what;
    const double ptol = 2e-4 * std::sqrt(double(N * S));  // float32 parameter gradients (sums of N S terms)
    EXPECT_TRUE(all_close(out[1], {C}, dscale, 1e-5, ptol)) << "dscale " << what;
    EXPECT_TRUE(all_close(out[2], {C}, db, 1e-5, ptol)) << "dB " << what;
    if (!training) {
      EXPECT_TRUE(all_close(out[3], {C}, dmean, 1e-5, ptol)) << "dmean " << what;
      EXPECT_TRUE(all_close(out[4], {C}, dvar, 1e-5, ptol)) << "dvar " << what;
    }
  }
}

// ---------------------------------------------------------------- InstanceNormalization
GRAD_COVERS(GradNorm, InstanceNormalization, "InstanceNormalization");
TEST(GradNorm, InstanceNormalization) {
  uint32_t seed = 1300;
  for (const Shape& s : {Shape{2, 3, 4}, Shape{2, 2, 2, 3}, Shape{3, 2}, Shape{1, 3, 5}}) {
    std::mt19937 rng(++seed);
    GradCheck g;
    g.op = "InstanceNormalization";
    g.seed = seed;
    g.inputs = {random_tensor(kF64, s, rng, -2, 2), random_tensor(kF64, {s[1]}, rng, -2, 2),
                random_tensor(kF64, {s[1]}, rng, -2, 2)};
    g.attrs = {attr_float("epsilon", 1e-3f)};
    EXPECT_TRUE(check_gradient(g)) << shape_to_string(s);
    g.portable = true;
    g.symbolic_shapes = seed % 2;
    EXPECT_TRUE(check_gradient(g)) << shape_to_string(s) << " (portable)";
  }
}

// ---------------------------------------------------------------- LayerNormalization
GRAD_COVERS(GradNorm, LayerNormalization, "LayerNormalization");
TEST(GradNorm, LayerNormalization) {
  struct Case {
    Shape x;
    int64_t axis;
    Shape scale;  // empty: the normalized shape
    bool bias;
    int64_t stash;
    size_t outputs;  // 1: Mean and InvStdDev named by the gradient
  };
  const std::vector<Case> cases = {
      {{3, 4}, -1, {}, true, 11, 1},   {{2, 3, 4}, 1, {}, true, 1, 3}, {{2, 3, 4}, 1, {4}, true, 11, 1},
      {{2, 3, 4}, -1, {}, false, 11, 2}, {{3, 5}, 0, {}, true, 11, 1}, {{2, 3, 4}, 1, {1, 4}, false, 1, 1},
      {{6}, 0, {}, true, 11, 1}};
  uint32_t seed = 1400;
  for (const auto& cs : cases) {
    std::mt19937 rng(++seed);
    const int64_t a = cs.axis < 0 ? cs.axis + int64_t(cs.x.size()) : cs.axis;
    const Shape ns = cs.scale.empty() ? Shape(cs.x.begin() + a, cs.x.end()) : cs.scale;
    GradCheck g;
    g.op = "LayerNormalization";
    g.seed = seed;
    g.inputs = {random_tensor(kF64, cs.x, rng, -2, 2), random_tensor(kF64, ns, rng, -2, 2)};
    if (cs.bias) g.inputs.push_back(random_tensor(kF64, ns, rng, -2, 2));
    g.attrs = {attr_int("axis", cs.axis), attr_float("epsilon", 1e-3f), attr_int("stash_type", cs.stash)};
    g.num_outputs = cs.outputs;
    if (cs.stash == 1) g.rtol = 1e-4;  // Mean and InvStdDev rounded to float32
    const std::string what = shape_to_string(cs.x) + " axis " + std::to_string(cs.axis);
    EXPECT_TRUE(check_gradient(g)) << what;
    g.portable = true;
    EXPECT_TRUE(check_gradient(g)) << what << " (portable)";
    g.portable = seed % 2;
    g.symbolic_shapes = true;
    EXPECT_TRUE(check_gradient(g)) << what << " (symbolic shapes)";
  }
}

// LayerNormalizationGrad against the formulas evaluated naively in double.
TEST(GradNorm, LayerNormGradKernel) {
  std::mt19937 rng(1500);
  for (int trial = 0; trial < 16; ++trial) {
    const int64_t R = std::uniform_int_distribution<int64_t>(1, trial % 3 ? 9 : 200)(rng);
    const int64_t D = std::uniform_int_distribution<int64_t>(1, trial % 2 ? 20 : 300)(rng);
    const DType dt = trial % 4 == 3 ? kF64 : kF32;
    const Shape s{R, D};
    const Tensor x = random_tensor(dt, s, rng, -2, 3), dy = random_tensor(dt, s, rng, -1, 1);
    const Tensor w = random_tensor(dt, {D}, rng, -2, 2);
    auto xv = to_double(x), gv = to_double(dy), wv = to_double(w);
    std::vector<double> mean(static_cast<size_t>(R)), inv(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      double m = 0, v = 0;
      for (int64_t j = 0; j < D; ++j) m += xv[size_t(r * D + j)] / double(D);
      for (int64_t j = 0; j < D; ++j) v += std::pow(xv[size_t(r * D + j)] - m, 2) / double(D);
      mean[size_t(r)] = m;
      inv[size_t(r)] = 1 / std::sqrt(v + 1e-5);
    }
    const Tensor mt = from_double(dt, {R, 1}, mean), it = from_double(dt, {R, 1}, inv);
    mean = to_double(mt);
    inv = to_double(it);
    std::vector<double> dx(xv.size()), dw(static_cast<size_t>(D)), db(static_cast<size_t>(D));
    for (int64_t r = 0; r < R; ++r) {
      double s1 = 0, s2 = 0;
      auto xh = [&](int64_t j) { return (xv[size_t(r * D + j)] - mean[size_t(r)]) * inv[size_t(r)]; };
      for (int64_t j = 0; j < D; ++j) {
        s1 += gv[size_t(r * D + j)] * wv[size_t(j)] / double(D);
        s2 += gv[size_t(r * D + j)] * wv[size_t(j)] * xh(j) / double(D);
      }
      for (int64_t j = 0; j < D; ++j) {
        const double gj = gv[size_t(r * D + j)];
        dx[size_t(r * D + j)] = inv[size_t(r)] * (gj * wv[size_t(j)] - s1 - xh(j) * s2);
        dw[size_t(j)] += gj * xh(j);
        db[size_t(j)] += gj;
      }
    }
    RunOptions ro;
    ro.domain = "com.onnxtrain";
    ro.num_outputs = 3;
    ro.threads = 1 + trial % 2;
    auto out = run_node("LayerNormalizationGrad", {dy, x, w, mt, it}, {attr_int("axis", 1)}, ro);
    const double tol = dt == kF64 ? 1e-10 : 1e-4;
    const std::string what = "trial " + std::to_string(trial) + " " + shape_to_string(s) + " (seed 1500)";
    EXPECT_TRUE(all_close(out[0], s, dx, tol, tol)) << "dX " << what;
    EXPECT_TRUE(all_close(out[1], {D}, dw, tol, tol * std::sqrt(double(R)))) << "dScale " << what;
    EXPECT_TRUE(all_close(out[2], {D}, db, tol, tol * std::sqrt(double(R)))) << "dB " << what;
  }
}

// ---------------------------------------------------------------- LRN
GRAD_COVERS(GradNorm, LRN, "LRN");
TEST(GradNorm, LRN) {
  uint32_t seed = 1600;
  for (int64_t size : {1, 2, 3, 5})
    for (const Shape& s : {Shape{2, 5, 3}, Shape{1, 4, 2, 2}}) {
      std::mt19937 rng(++seed);
      GradCheck g;
      g.op = "LRN";
      g.opset = seed % 2 ? 13 : 9;
      g.seed = seed;
      g.inputs = {random_tensor(kF64, s, rng, -2, 2)};
      g.attrs = {attr_int("size", size), attr_float("alpha", 0.5f), attr_float("beta", 0.75f), attr_float("bias", 1.5f)};
      const std::string what = "size " + std::to_string(size) + " " + shape_to_string(s);
      EXPECT_TRUE(check_gradient(g)) << what;
      g.portable = true;
      EXPECT_TRUE(check_gradient(g)) << what << " (portable)";
    }
}

// ---------------------------------------------------------------- Dropout
// Inference mode (and training with ratio 0): the identity, checked by finite differences.
TEST(GradNorm, DropoutInferenceIsIdentity) {
  std::mt19937 rng(1700);
  const Tensor x = random_tensor(kF64, {3, 4}, rng, -2, 2);
  const Tensor ratio = Tensor::scalar<double>(0.4);
  struct Case {
    int64_t opset;
    std::vector<Tensor> inputs;
    std::vector<ir::Attribute> attrs;
    size_t outputs;
  };
  const std::vector<Case> cases = {
      {13, {x}, {}, 1},
      {13, {x, ratio}, {}, 2},
      {12, {x, ratio, Tensor::scalar<bool>(false)}, {}, 1},
      {13, {x, Tensor::scalar<double>(0.0), Tensor::scalar<bool>(true)}, {}, 1},  // training, nothing dropped
      {10, {x}, {attr_float("ratio", 0.3f)}, 1},                                   // the session is not training
      {7, {x}, {attr_float("ratio", 0.3f)}, 2}};
  for (size_t i = 0; i < cases.size(); ++i)
    for (bool portable : {false, true}) {
      if (portable && cases[i].opset < 12 && cases[i].opset >= 7) continue;  // needs the session's mode
      GradCheck g;
      g.op = "Dropout";
      g.opset = cases[i].opset;
      g.inputs = cases[i].inputs;
      g.attrs = cases[i].attrs;
      g.num_outputs = cases[i].outputs;
      g.wrt = {0};
      g.portable = portable;
      EXPECT_TRUE(check_gradient(g)) << "case " << i << (portable ? " (portable)" : "");
    }
}

// Training mode: the mask is random per run, so the gradient is checked against the run's own
// output: dx = r * mask / (1 - ratio) = r * y / x.
GRAD_COVERS(GradNorm, DropoutTrainingUsesTheForwardMask, "Dropout");
TEST(GradNorm, DropoutTrainingUsesTheForwardMask) {
  std::mt19937 rng(1800);
  auto v = to_double(random_tensor(kF64, {40, 50}, rng, 0.5, 2));
  for (size_t i = 0; i < v.size(); i += 2) v[i] = -v[i];
  const Tensor x = from_double(kF64, {40, 50}, v);
  const Tensor r = random_tensor(kF64, {40, 50}, rng, -1, 1);
  const double ratio = 0.3;
  struct Case {
    int64_t opset;
    bool runtime_mode, portable, session_training;
    size_t outputs;
  };
  const std::vector<Case> cases = {{13, false, false, false, 1}, {13, true, false, false, 1}, {12, false, true, false, 1},
                                   {13, true, true, false, 2},   {10, false, false, true, 1}, {7, false, false, true, 2}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& cs = cases[i];
    std::vector<Tensor> inputs{x};
    std::vector<ir::Attribute> attrs;
    std::vector<size_t> fed;
    if (cs.opset >= 12) {
      inputs.push_back(Tensor::scalar<float>(float(ratio)));
      inputs.push_back(Tensor::scalar<bool>(true));
      if (cs.runtime_mode) fed = {2};
    } else {
      attrs.push_back(attr_float("ratio", float(ratio)));
    }
    auto out = run_gradient("Dropout", inputs, attrs, cs.opset, cs.outputs, r, {0}, cs.portable, cs.session_training, fed);
    const auto y = to_double(out[0]), rv = to_double(r), dx = to_double(out.back());
    size_t dropped = 0, bad = 0;
    for (size_t k = 0; k < y.size(); ++k) {
      dropped += y[k] == 0;
      bad += std::fabs(dx[k] - rv[k] * y[k] / v[k]) > 1e-12;
    }
    EXPECT_EQ(bad, 0u) << "case " << i;
    EXPECT_GT(dropped, y.size() / 5) << "case " << i << ": the forward did not run in training mode";
    EXPECT_LT(dropped, y.size() * 2 / 5) << "case " << i;
    if (cs.outputs == 2) {  // the model's own mask output is the one the gradient used
      const auto mask = to_double(out[1]);
      for (size_t k = 0; k < y.size(); ++k) ASSERT_EQ(mask[k] != 0, y[k] != 0) << "case " << i;
    }
  }
  // Portable gradients before opset 12 cannot know the session's mode.
  const std::string m = thrown_by([&] {
    run_gradient("Dropout", {x}, {attr_float("ratio", 0.3f)}, 10, 1, r, {0}, true, true);
  });
  EXPECT_EQ(m.rfind("NotImplemented: ", 0), 0u) << m;
  EXPECT_NE(m.find("node_Dropout"), std::string::npos) << m;
}

// A Gradient node (ai.onnx.preview.training) over a Dropout whose mask the model leaves unnamed:
// lowering names the mask on the forward node and the gradient reads it.
TEST(GradNorm, DropoutMaskThroughGradientOperator) {
  using namespace onnxtrain;
  std::mt19937 rng(1900);
  auto v = to_double(random_tensor(kF64, {20, 30}, rng, 0.5, 2));
  const Tensor x = from_double(kF64, {20, 30}, v), r = random_tensor(kF64, {20, 30}, rng, -1, 1);
  ir::Model m;
  m.ir_version = 8;
  m.opsets = {{"", 13}, {"ai.onnx.preview.training", 1}};
  m.graph = std::make_shared<ir::Graph>();
  ir::Graph& g = *m.graph;
  g.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(kF64, {20, 30}), ""});
  g.initializers = {{"ratio", Tensor::scalar<double>(0.25)}, {"train", Tensor::scalar<bool>(true)}, {"r", r}};
  auto node = [](const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
    ir::Node n;
    n.op_type = op;
    n.name = op + "_" + out[0];
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    return n;
  };
  g.nodes.push_back(node("Dropout", {"x", "ratio", "train"}, {"y"}));
  g.nodes.push_back(node("Mul", {"y", "r"}, {"p"}));
  g.nodes.push_back(node("ReduceSum", {"p"}, {"loss"}));
  g.nodes.back().attrs = {attr_int("keepdims", 0)};
  ir::Node grad = node("Gradient", {"x"}, {"dx"});
  grad.domain = "ai.onnx.preview.training";
  ir::Attribute xs;
  xs.name = "xs";
  xs.type = ir::AttrType::kStrings;
  xs.strings = {"x"};
  ir::Attribute y;
  y.name = "y";
  y.type = ir::AttrType::kString;
  y.s = "loss";
  grad.attrs = {xs, y};
  g.nodes.push_back(grad);
  g.outputs = {ir::ValueInfo{"y", {}, ""}, ir::ValueInfo{"dx", {}, ""}};
  autodiff::lower_gradient_ops(m);
  ASSERT_EQ(m.graph->nodes[0].op_type, "Dropout");
  ASSERT_EQ(m.graph->nodes[0].outputs.size(), 2u) << "the mask was not named on the forward node";
  auto out = run_model(m, {x});
  const auto yv = to_double(out[0]), dx = to_double(out[1]), rv = to_double(r);
  size_t dropped = 0;
  for (size_t k = 0; k < yv.size(); ++k) {
    dropped += yv[k] == 0;
    ASSERT_NEAR(dx[k], rv[k] * yv[k] / v[k], 1e-12) << k;
  }
  EXPECT_GT(dropped, 60u);
}

// Gradients flowing into BatchNormalization's running statistics are refused, naming the node.
TEST(GradNorm, BatchNormRunningStatisticsGradientIsRefused) {
  GradCheck g = bn_case({14, {3, 2, 4}, true}, 1950);
  g.outputs_in_loss = {0, 1};
  const ::testing::AssertionResult r = check_gradient(g);
  ASSERT_FALSE(r);
  const std::string m = r.message();
  EXPECT_NE(m.find("node_BatchNormalization"), std::string::npos) << m;
  EXPECT_NE(m.find("running or saved statistics"), std::string::npos) << m;
}

// Relu -> Dropout whose training_mode is a graph input (known only at run time) -> ReduceSum.
// The portable gradient selects with Where(training_mode, dx, dy): its output has the type of
// dx and dy, not of the boolean condition (the emitter used to type it bool and the Relu rule
// then refused it). dx/dx: ReLU' when training_mode is false, mask * scale * ReLU' when true,
// with the mask of the same run (an output of the model).
TEST(GradNorm, DropoutRuntimeModeAfterRelu) {
  using namespace onnxtrain;
  const Shape s{6, 7};
  const double ratio = 0.3;
  std::mt19937 rng(2000);
  auto v = to_double(random_tensor(kF64, s, rng, 0.2, 2));
  for (size_t i = 0; i < v.size(); i += 3) v[i] = -v[i];  // Relu: away from 0 on both sides
  const Tensor x = from_double(kF64, s, v);
  ir::Model m;
  m.ir_version = 8;
  m.opsets = {{"", 13}};
  m.graph = std::make_shared<ir::Graph>();
  ir::Graph& g = *m.graph;
  g.name = "relu_dropout";
  g.inputs = {ir::ValueInfo{"x", ir::TypeInfo::tensor(kF64, s), ""},
              ir::ValueInfo{"train", ir::TypeInfo::tensor(DType::kBool, Shape{}), ""}};
  g.initializers = {{"ratio", Tensor::scalar<double>(ratio)}};
  g.nodes.push_back(make_node("Relu", {"x"}, {"h"}));
  g.nodes.push_back(make_node("Dropout", {"h", "ratio", "train"}, {"y", "mask"}));
  g.nodes.push_back(make_node("ReduceSum", {"y"}, {"loss"}, {attr_int("keepdims", 0)}));
  g.outputs = {ir::ValueInfo{"loss", {}, ""}};
  for (bool portable : {false, true}) {
    autodiff::BuildOptions bo;
    bo.portable = portable;
    ir::Model gm;
    try {
      gm = autodiff::build_gradient_model(m, {"loss", "mask"}, {"x"}, "loss", bo);
    } catch (const std::exception& e) {
      FAIL() << (portable ? "portable: " : "default: ") << e.what();
    }
    ir::validate_graph(*gm.graph);
    const std::string bytes = ir::serialize_model(gm);
    if (portable) {  // standard ONNX only: ONNX's checker and its type-checking inference accept it
      onnx::ModelProto p;
      ASSERT_TRUE(p.ParseFromString(bytes));
      EXPECT_NO_THROW(onnx::checker::check_model(p));
      onnx::ShapeInferenceOptions strict(/*check_type=*/true, /*error_mode=*/1, /*data_prop=*/false);
      EXPECT_NO_THROW(onnx::shape_inference::InferShapes(p, onnx::OpSchemaRegistry::Instance(), strict));
    }
    gm = ir::load_model_bytes(bytes.data(), bytes.size());
    for (bool train : {false, true}) {
      ExecOptions eo;
      eo.num_threads = 1;
      runtime::GraphExecutor ex(gm.graph, gm.opsets, eo);
      const Value xv = Value::of(x), tv = Value::of(Tensor::scalar<bool>(train));
      const std::vector<Value> out = ex.run({&xv, &tv});
      ASSERT_EQ(out.size(), 3u);
      const auto mask = to_double(out[1].tensor), dx = to_double(out[2].tensor);
      ASSERT_EQ(out[2].tensor.shape(), s);
      size_t dropped = 0;
      for (size_t k = 0; k < v.size(); ++k) {
        const double relu_d = v[k] > 0 ? 1.0 : 0.0;
        const double expect = train ? mask[k] * (1.0 / (1.0 - ratio)) * relu_d : relu_d;
        dropped += mask[k] == 0;
        ASSERT_NEAR(dx[k], expect, 1e-12) << (portable ? "portable" : "default") << ", training_mode " << train
                                          << ", element " << k;
      }
      if (train) EXPECT_GT(dropped, 0u) << "the forward did not drop anything in training mode";
      else EXPECT_EQ(dropped, 0u) << "inference mode: the mask is all true";
    }
  }
}
