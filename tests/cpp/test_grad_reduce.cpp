// Gradient rules of the reductions, CumSum, TopK and the softmax family: finite-difference checks
// (float64, central differences, several axes/keepdims/opsets, portable and symbolic-shape
// variants), tie handling, and the com.onnxtrain.SoftmaxGrad / LogSoftmaxGrad kernels against a
// naive double-precision reference.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "autodiff/builder.h"
#include "grad_check.h"
#include "grad_linalg_util.h"
#include "test_grad_util.h"
#include "ir/onnx_io.h"
#include "runtime/executor.h"

namespace ot_test {

using namespace onnxtrain;

std::vector<Tensor> run_gradient(const std::string& op, const std::vector<Tensor>& inputs,
                                 const std::vector<ir::Attribute>& attrs, int64_t opset, size_t num_outputs,
                                 const Tensor& r, const std::vector<size_t>& wrt, bool portable, bool training,
                                 const std::vector<size_t>& fed) {
  ir::Model m;
  m.ir_version = 8;
  m.opsets[""] = opset;
  m.graph = std::make_shared<ir::Graph>();
  ir::Graph& g = *m.graph;
  g.name = "grad_" + op;
  ir::Node n;
  n.op_type = op;
  n.name = "node_" + op;
  n.attrs = attrs;
  std::vector<std::string> xs;
  std::vector<Value> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = inputs[i].defined() ? "x" + std::to_string(i) : "";
    n.inputs.push_back(name);
    if (name.empty()) continue;
    const bool x = std::count(wrt.begin(), wrt.end(), i) > 0;
    if (x || std::count(fed.begin(), fed.end(), i)) {
      g.inputs.push_back(ir::ValueInfo{name, ir::TypeInfo::tensor(inputs[i].dtype(), inputs[i].shape()), ""});
      if (x) xs.push_back(name);
      feeds.push_back(Value::of(inputs[i]));
    } else {
      g.initializers.emplace_back(name, inputs[i]);
    }
  }
  std::vector<std::string> ys;
  for (size_t k = 0; k < num_outputs; ++k) ys.push_back("y" + std::to_string(k));
  n.outputs = ys;
  g.nodes.push_back(n);
  g.initializers.emplace_back("r", r);
  ir::Node mul;
  mul.op_type = "Mul";
  mul.name = "loss_mul";
  mul.inputs = {"y0", "r"};
  mul.outputs = {"p"};
  ir::Node red;
  red.op_type = "ReduceSum";
  red.name = "loss_sum";
  red.inputs = {"p"};
  red.outputs = {"loss"};
  red.attrs = {attr_int("keepdims", 0)};
  g.nodes.push_back(mul);
  g.nodes.push_back(red);
  g.outputs.push_back(ir::ValueInfo{"loss", {}, ""});
  autodiff::BuildOptions bo;
  bo.portable = portable;
  ir::Model gm = autodiff::build_gradient_model(m, ys, xs, "loss", bo);
  const std::string bytes = ir::serialize_model(gm);
  gm = ir::load_model_bytes(bytes.data(), bytes.size());
  ExecOptions eo;
  eo.num_threads = 1;
  eo.training = training;
  runtime::GraphExecutor ex(gm.graph, gm.opsets, eo);
  std::vector<const Value*> ptrs;
  for (auto& v : feeds) ptrs.push_back(&v);
  std::vector<Tensor> out;
  for (auto& v : ex.run(ptrs)) out.push_back(v.tensor);
  return out;
}

// Values spaced at least `gap` apart in random order, scaled into [lo, hi): no ties.
Tensor distinct_tensor(DType dt, const Shape& s, std::mt19937& rng, double lo, double hi) {
  const int64_t n = shape_numel(s);
  std::vector<double> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0);
  std::shuffle(v.begin(), v.end(), rng);
  std::uniform_real_distribution<double> jitter(-0.2, 0.2);
  for (auto& x : v) x = lo + (hi - lo) * (x + 0.5 + jitter(rng)) / double(std::max<int64_t>(n, 1));
  return from_double(dt, s, v);
}

}  // namespace ot_test

using namespace ot_test;
using onnxtrain::shape_numel;

namespace {

constexpr DType kF64 = DType::kFloat64;

Tensor i64(const std::vector<int64_t>& v) { return Tensor::from_vector<int64_t>({int64_t(v.size())}, v); }
Tensor scalar_i64(int64_t v) { return Tensor::scalar<int64_t>(v); }

// Reduce* node attributes/inputs for one configuration: axes as attribute (axes_input false) or
// as input 1 (omitted when axes is empty).
GradCheck reduce_case(const std::string& op, Tensor x, const std::vector<int64_t>& axes, int keepdims, int64_t opset,
                      bool axes_input, uint32_t seed) {
  GradCheck g;
  g.op = op;
  g.opset = opset;
  g.seed = seed;
  g.inputs = {std::move(x)};
  g.attrs = {attr_int("keepdims", keepdims)};
  if (axes_input) {
    if (!axes.empty()) g.inputs.push_back(i64(axes));
  } else if (!axes.empty()) {
    g.attrs.push_back(attr_ints("axes", axes));
  }
  g.wrt = {0};
  return g;
}

struct AxesCase {
  Shape shape;
  std::vector<int64_t> axes;
};
const std::vector<AxesCase> kAxesCases = {
    {{3, 4}, {1}}, {{3, 4}, {0}}, {{2, 3, 4}, {0, 2}}, {{2, 3, 4}, {-2}}, {{2, 3, 2}, {}}, {{5}, {0}}, {{2, 1, 3}, {1, 2}}};

// Every (axes case, keepdims) of `op` at `opset` on data from make(shape, rng).
template <class Make>
void check_reduce(const std::string& op, int64_t opset, Make make, double rtol = 1e-5) {
  const bool axes_input = opset >= (op == "ReduceSum" ? 13 : 18);
  uint32_t seed = 100;
  for (const auto& ac : kAxesCases)
    for (int keepdims : {0, 1}) {
      std::mt19937 rng(++seed);
      GradCheck g = reduce_case(op, make(ac.shape, rng), ac.axes, keepdims, opset, axes_input, seed);
      g.rtol = rtol;
      EXPECT_TRUE(check_gradient(g)) << op << " axes " << ac.axes.size() << " keepdims " << keepdims;
      g.portable = true;
      EXPECT_TRUE(check_gradient(g)) << op << " (portable)";
    }
  std::mt19937 rng(seed);
  GradCheck g = reduce_case(op, make(Shape{3, 4, 2}, rng), {1}, 0, opset, axes_input, seed);
  g.symbolic_shapes = true;
  EXPECT_TRUE(check_gradient(g)) << op << " (symbolic shapes)";
}

Tensor uniform(const Shape& s, std::mt19937& rng) { return random_tensor(kF64, s, rng, -2, 2); }
Tensor positive(const Shape& s, std::mt19937& rng) { return random_tensor(kF64, s, rng, 0.5, 2); }
Tensor distinct(const Shape& s, std::mt19937& rng) { return distinct_tensor(kF64, s, rng, -2, 2); }
// |x| in [0.5, 2) with random signs: away from the kink of |x|.
Tensor away_from_zero(const Shape& s, std::mt19937& rng) {
  auto v = to_double(random_tensor(kF64, s, rng, 0.5, 2));
  std::bernoulli_distribution sign(0.5);
  for (auto& x : v) x = sign(rng) ? x : -x;
  return from_double(kF64, s, v);
}

}  // namespace

// ---------------------------------------------------------------- ReduceSum, ReduceMean
GRAD_COVERS(GradReduce, SumAndMean, "ReduceSum", "ReduceMean");
TEST(GradReduce, SumAndMean) {
  for (int64_t opset : {11, 13, 17}) {
    check_reduce("ReduceSum", opset, uniform);
    check_reduce("ReduceMean", opset, uniform);
  }
}

TEST(GradReduce, SumNoopWithEmptyAxes) {
  std::mt19937 rng(7);
  for (int noop : {0, 1}) {
    GradCheck g = reduce_case("ReduceSum", uniform({2, 3}, rng), {}, 0, 13, true, 7);
    g.attrs.push_back(attr_int("noop_with_empty_axes", noop));
    EXPECT_TRUE(check_gradient(g)) << "noop " << noop;
    g.portable = true;
    EXPECT_TRUE(check_gradient(g)) << "noop " << noop << " (portable)";
  }
}

// Axes computed at run time (a graph input, as the ReduceMean-18 rewrite of an opset-18 model
// gives): dX is dY broadcast back over the reduced axes, checked element by element against the
// index arithmetic of the reduction; empty axes reduce everything, or nothing with
// noop_with_empty_axes.
TEST(GradReduce, SumAxesComputedAtRunTime) {
  const Shape xs{2, 3, 4};
  std::mt19937 rng(11);
  const Tensor x = uniform(xs, rng);
  struct Case {
    std::vector<int64_t> axes;
    int keepdims, noop;
  };
  for (const Case& c : std::vector<Case>{{{2}, 0, 0}, {{0, -1}, 1, 0}, {{-2}, 0, 0}, {{}, 0, 0}, {{}, 1, 1}})
    for (bool portable : {false, true}) {
      std::vector<bool> reduced(3, c.axes.empty() && !c.noop);
      for (int64_t a : c.axes) reduced[size_t(a < 0 ? a + 3 : a)] = true;
      Shape ys;
      for (size_t d = 0; d < 3; ++d)
        if (!reduced[d]) ys.push_back(xs[d]);
        else if (c.keepdims) ys.push_back(1);
      const Tensor r = uniform(ys, rng);
      auto out = run_gradient("ReduceSum", {x, i64(c.axes)},
                              {attr_int("keepdims", c.keepdims), attr_int("noop_with_empty_axes", c.noop)}, 17, 1, r,
                              {0}, portable, false, {1});
      std::vector<double> want;
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 3; ++j)
          for (int64_t k = 0; k < 4; ++k) {
            const int64_t idx[3] = {i, j, k};
            int64_t flat = 0;  // r's element that x[i, j, k] was summed into
            for (size_t d = 0; d < 3; ++d)
              if (!reduced[d]) flat = flat * xs[d] + idx[d];
            want.push_back(r.data<double>()[flat]);
          }
      EXPECT_TRUE(all_close(out[1], xs, want)) << "axes " << c.axes.size() << " keepdims " << c.keepdims << " noop "
                                               << c.noop << (portable ? " (portable)" : "");
    }
}

// Axes outside [-rank, rank) get an error naming the node from the rule (the opset < 8 Tile path
// indexed its masks with them: heap-buffer-overflow found by the gradient fuzz target); repeated
// axes reduce once.
TEST(GradReduce, AxesOutOfRange) {
  for (int64_t opset : {6, 11, 13}) {
    for (const std::vector<int64_t>& axes : std::vector<std::vector<int64_t>>{{2}, {-3}, {24958}}) {
      std::vector<ir::Attribute> attrs = {attr_int("keepdims", 0)};
      if (opset < 13) attrs.push_back(attr_ints("axes", axes));
      std::vector<ir::ValueInfo> ins = {ir::ValueInfo{"a", ir::TypeInfo::tensor(DType::kFloat32, {3, 4}), ""}};
      ir::Model m = one_node_model("ReduceSum", ins, attrs, 1, opset);
      if (opset >= 13) {  // axes as a constant input
        m.graph->initializers.emplace_back("axes", Tensor::from_vector<int64_t>({int64_t(axes.size())}, axes));
        m.graph->nodes[0].inputs.push_back("axes");
      }
      m.graph->outputs[0].type = ir::TypeInfo::tensor(DType::kFloat32, {});
      try {
        onnxtrain::autodiff::build_gradient_model(m, {"loss"}, {"a"}, "loss");
        ADD_FAILURE() << "expected an error for axes " << axes[0] << " at opset " << opset;
      } catch (const onnxtrain::Error& e) {
        EXPECT_NE(std::string(e.what()).find("node_ReduceSum"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
      }
    }
  }
}

// ---------------------------------------------------------------- ReduceMax, ReduceMin
GRAD_COVERS(GradReduce, MaxMin, "ReduceMax", "ReduceMin");
TEST(GradReduce, MaxMin) {
  for (const char* op : {"ReduceMax", "ReduceMin"})
    for (int64_t opset : {11, 13}) check_reduce(op, opset, distinct);
}

// Ties share the gradient evenly (torch.amax / torch.amin).
TEST(GradReduce, MaxMinTiesSplitEvenly) {
  const Tensor x = Tensor::from_vector<double>({2, 3}, {1, 3, 3, -2, -2, 0});
  const Tensor r = Tensor::from_vector<double>({2}, {6, 9});  // loss = 6 max(row 0) + 9 max(row 1)
  for (bool portable : {false, true}) {
    auto out = run_gradient("ReduceMax", {x}, {attr_ints("axes", {1}), attr_int("keepdims", 0)}, 13, 1, r, {0}, portable, false);
    EXPECT_TRUE(all_close(out[1], {2, 3}, {0, 3, 3, 0, 0, 9}));
    out = run_gradient("ReduceMin", {x}, {attr_ints("axes", {1}), attr_int("keepdims", 0)}, 13, 1, r, {0}, portable, false);
    EXPECT_TRUE(all_close(out[1], {2, 3}, {6, 0, 0, 4.5, 4.5, 0}));
  }
}

// ---------------------------------------------------------------- ReduceProd (zeros included)
GRAD_COVERS(GradReduce, Prod, "ReduceProd");
TEST(GradReduce, Prod) {
  check_reduce("ReduceProd", 13, uniform);
  // One zero, two zeros, none, per group: the product is multilinear, so central differences are
  // exact at zeros too.
  const Tensor x = Tensor::from_vector<double>({3, 4}, {0.5, 0, 1.5, -2, 0, 0.7, 0, 1.2, 1.1, -0.9, 1.3, 0.8});
  for (int keepdims : {0, 1})
    for (bool portable : {false, true}) {
      GradCheck g = reduce_case("ReduceProd", x, {1}, keepdims, 13, false, 1);
      g.portable = portable;
      EXPECT_TRUE(check_gradient(g)) << "keepdims " << keepdims;
      g = reduce_case("ReduceProd", x, {}, keepdims, 13, false, 2);  // all axes: three zeros
      EXPECT_TRUE(check_gradient(g));
    }
  const Tensor r = Tensor::from_vector<double>({3}, {1, 1, 1});
  auto out = run_gradient("ReduceProd", {x}, {attr_ints("axes", {1}), attr_int("keepdims", 0)}, 13, 1, r, {0}, false, false);
  EXPECT_TRUE(all_close(out[1], {3, 4},
                        {0, 0.5 * 1.5 * -2, 0, 0, 0, 0, 0, 0, -0.9 * 1.3 * 0.8, 1.1 * 1.3 * 0.8, 1.1 * -0.9 * 0.8,
                         1.1 * -0.9 * 1.3}))
      << "row 0: only the zero gets the product of the others; row 1 (two zeros): all zero";
}

// ---------------------------------------------------------------- norms and log-sums
GRAD_COVERS(GradReduce, NormsAndLogSums, "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp");
TEST(GradReduce, NormsAndLogSums) {
  for (int64_t opset : {11, 13}) {
    check_reduce("ReduceL1", opset, away_from_zero);
    check_reduce("ReduceL2", opset, uniform);
    check_reduce("ReduceSumSquare", opset, uniform);
    check_reduce("ReduceLogSum", opset, positive);
    check_reduce("ReduceLogSumExp", opset, uniform);
  }
}

// ---------------------------------------------------------------- CumSum
GRAD_COVERS(GradReduce, CumSum, "CumSum");
TEST(GradReduce, CumSum) {
  uint32_t seed = 300;
  for (int exclusive : {0, 1})
    for (int reverse : {0, 1})
      for (int64_t axis : {0, 1, -1}) {
        std::mt19937 rng(++seed);
        GradCheck g;
        g.op = "CumSum";
        g.opset = 14;
        g.seed = seed;
        g.inputs = {uniform({3, 4, 2}, rng), seed % 2 ? Tensor::scalar<int32_t>(int32_t(axis)) : scalar_i64(axis)};
        g.attrs = {attr_int("exclusive", exclusive), attr_int("reverse", reverse)};
        g.wrt = {0};
        EXPECT_TRUE(check_gradient(g)) << "exclusive " << exclusive << " reverse " << reverse << " axis " << axis;
        g.portable = true;
        g.symbolic_shapes = axis == 1;
        EXPECT_TRUE(check_gradient(g)) << "portable";
      }
}

// ---------------------------------------------------------------- TopK
GRAD_COVERS(GradReduce, TopK, "TopK");
TEST(GradReduce, TopK) {
  uint32_t seed = 400;
  for (int64_t opset : {11, 13})
    for (int largest : {0, 1})
      for (int64_t axis : {-1, 0, 1}) {
        std::mt19937 rng(++seed);
        GradCheck g;
        g.op = "TopK";
        g.opset = opset;
        g.seed = seed;
        g.inputs = {distinct({4, 5, 3}, rng), i64({2})};
        g.attrs = {attr_int("axis", axis), attr_int("largest", largest)};
        g.num_outputs = 2;
        g.wrt = {0};
        EXPECT_TRUE(check_gradient(g)) << "largest " << largest << " axis " << axis;
      }
}

// ---------------------------------------------------------------- Softmax, LogSoftmax, Hardmax
GRAD_COVERS(GradReduce, SoftmaxFamily, "Softmax", "LogSoftmax");
TEST(GradReduce, SoftmaxFamily) {
  struct Case {
    int64_t opset;
    Shape shape;
    int64_t axis;  // -100: attribute absent
  };
  const std::vector<Case> cases = {
      {11, {3, 4}, -100}, {11, {2, 3, 4}, 1},  {11, {2, 3, 4}, 0}, {11, {2, 3, 4}, -1}, {11, {2, 3}, -2},
      {13, {3, 4}, -100}, {13, {2, 3, 4}, 1}, {13, {2, 3, 4}, 0}, {13, {2, 3, 4}, -1}, {13, {5}, 0}};
  uint32_t seed = 500;
  for (const char* op : {"Softmax", "LogSoftmax"})
    for (const auto& cs : cases) {
      std::mt19937 rng(++seed);
      GradCheck g;
      g.op = op;
      g.opset = cs.opset;
      g.seed = seed;
      g.inputs = {random_tensor(kF64, cs.shape, rng, -3, 3)};
      if (cs.axis != -100) g.attrs = {attr_int("axis", cs.axis)};
      const std::string what = std::string(op) + " opset " + std::to_string(cs.opset) + " axis " + std::to_string(cs.axis);
      EXPECT_TRUE(check_gradient(g)) << what;
      g.portable = true;
      EXPECT_TRUE(check_gradient(g)) << what << " (portable)";
      g.portable = seed % 2 && cs.opset >= 13;  // portable run-time unbroadcasting needs 13
      g.symbolic_shapes = true;
      EXPECT_TRUE(check_gradient(g)) << what << " (symbolic shapes)";
    }
}

GRAD_COVERS(GradReduce, ZeroGradientOperators, "Hardmax", "ArgMax", "ArgMin");
TEST(GradReduce, ZeroGradientOperators) {
  std::mt19937 rng(600);
  for (const char* op : {"Hardmax"}) {
    GradCheck g;
    g.op = op;
    g.inputs = {distinct({3, 4}, rng)};
    g.seed = 600;
    EXPECT_TRUE(check_gradient(g)) << op;
  }
  // Declared zero-gradient: the gradient is exactly zero (ArgMax/ArgMin give indices).
  uint32_t seed = 601;
  for (const char* op : {"Hardmax", "ArgMax", "ArgMin"})
    for (int64_t keepdims : {0, 1}) {
      ZeroGradCheck z;
      z.op = op;
      z.inputs = {"x"};
      if (std::string(op) != "Hardmax") z.attrs = {attr_int("axis", 1), attr_int("keepdims", keepdims)};
      z.seed = seed++;
      EXPECT_TRUE(check_zero_gradient(z)) << op;
    }
}

// ---------------------------------------------------------------- SoftmaxGrad kernels vs reference
TEST(GradReduce, SoftmaxGradKernels) {
  std::mt19937 rng(700);
  for (int trial = 0; trial < 24; ++trial) {
    const bool log = trial % 2;
    const bool coerce = trial % 3 == 0;
    Shape s(size_t(std::uniform_int_distribution<int>(1, 4)(rng)));
    for (auto& d : s) d = std::uniform_int_distribution<int>(1, 7)(rng);
    if (trial % 4 == 1) s.back() = 300 + trial;  // long rows: the vectorized path and its tail
    const int64_t rank = int64_t(s.size());
    const int64_t axis = std::uniform_int_distribution<int64_t>(coerce ? 0 : -rank, rank - 1)(rng);
    const DType dt = trial % 5 == 4 ? kF64 : DType::kFloat32;
    // Y: a genuine (log-)softmax output along the axes, so that exp(Y) is well scaled.
    const int64_t a = axis < 0 ? axis + rank : axis;
    auto prod = [&](int64_t b, int64_t e) { return std::accumulate(s.begin() + b, s.begin() + e, int64_t(1), std::multiplies<>()); };
    const int64_t outer = prod(0, a);
    const int64_t n = coerce ? prod(a, rank) : s[size_t(a)];
    const int64_t inner = coerce ? 1 : prod(a + 1, rank);
    auto x = to_double(random_tensor(kF64, s, rng, -4, 4));
    auto dy = to_double(random_tensor(kF64, s, rng, -1, 1));
    std::vector<double> y(x.size()), expect(x.size());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        auto at = [&](int64_t j) { return size_t((o * n + j) * inner + i); };
        double m = -1e300, sum = 0;
        for (int64_t j = 0; j < n; ++j) m = std::max(m, x[at(j)]);
        for (int64_t j = 0; j < n; ++j) sum += std::exp(x[at(j)] - m);
        for (int64_t j = 0; j < n; ++j) y[at(j)] = log ? x[at(j)] - m - std::log(sum) : std::exp(x[at(j)] - m) / sum;
      }
    y = to_double(from_double(dt, s, y));  // what the kernel sees
    dy = to_double(from_double(dt, s, dy));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        auto at = [&](int64_t j) { return size_t((o * n + j) * inner + i); };
        double sdy = 0, sdyy = 0;
        for (int64_t j = 0; j < n; ++j) {
          sdy += dy[at(j)];
          sdyy += dy[at(j)] * y[at(j)];
        }
        for (int64_t j = 0; j < n; ++j)
          expect[at(j)] = log ? dy[at(j)] - std::exp(y[at(j)]) * sdy : y[at(j)] * (dy[at(j)] - sdyy);
      }
    RunOptions ro;
    ro.domain = "com.onnxtrain";
    ro.threads = 1 + trial % 2;
    auto out = run_node(log ? "LogSoftmaxGrad" : "SoftmaxGrad", {from_double(dt, s, dy), from_double(dt, s, y)},
                        {attr_int("axis", axis), attr_int("coerce_2d", coerce)}, ro);
    const double tol = dt == kF64 ? 1e-12 : 2e-5;
    EXPECT_TRUE(all_close(out[0], s, expect, tol, tol))
        << (log ? "LogSoftmaxGrad" : "SoftmaxGrad") << " trial " << trial << " shape " << onnxtrain::shape_to_string(s)
        << " axis " << axis << " coerce " << coerce << " (seed 700)";
  }
}

// ---------------------------------------------------------------- unsupported configurations
TEST(GradReduce, UnsupportedConfigurationsNameTheNode) {
  std::mt19937 rng(800);
  const Tensor x = distinct({2, 5}, rng);
  const std::string m = thrown_by([&] {
    run_gradient("TopK", {x, i64({2})}, {}, 10, 2, Tensor::zeros(kF64, {2, 2}), {0});
  });
  EXPECT_EQ(m.rfind("NotImplemented: ", 0), 0u) << m;
  EXPECT_NE(m.find("node_TopK"), std::string::npos) << m;
  EXPECT_NE(m.find("opset >= 11"), std::string::npos) << m;
}
