// The update operators against their formulas in double precision: the com.onnxtrain optimizers,
// AccumulateGradients and GlobalNormClip (several steps, float32 and float64 tensors in one node,
// grad_scale present and absent, outputs aliased to their inputs and not, 1 and 2 threads), and
// the ai.onnx.preview.training Adagrad / Momentum / Adam.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "ops/optimizers.h"
#include "test_util.h"

namespace ot_test {
std::string thrown_by(const std::function<void()>& f);  // test_reduce.cpp
}

using namespace ot_test;
using onnxtrain::shape_to_string;
namespace ok = onnxtrain::ops;

namespace {

ot_test::RunOptions preview(size_t outputs) {
  ot_test::RunOptions o;
  o.domain = "ai.onnx.preview.training";
  o.num_outputs = outputs;
  return o;
}

ot_test::RunOptions training(size_t outputs, int threads = 1) {
  ot_test::RunOptions o;
  o.domain = "com.onnxtrain";
  o.num_outputs = outputs;
  o.threads = threads;
  return o;
}

using Vec = std::vector<double>;

// ---------------------------------------------------------------- double references
// Hyper-parameters as the kernel sees them (float attributes rounded to float), with the
// documented defaults.
struct Hyper {
  std::map<std::string, double> f;
  std::map<std::string, int64_t> i;
};

Hyper contract_defaults(const std::string& opt) {
  const double inf = INFINITY;
  if (opt == "SGDOptimizer") return {{{"lambda", 0}}, {}};
  if (opt == "MomentumOptimizer") return {{{"momentum", double(0.9f)}, {"lambda", 0}}, {{"nesterov", 0}}};
  if (opt == "AdamOptimizer" || opt == "AdamWOptimizer")
    return {{{"alpha", double(0.9f)},
             {"beta", double(0.999f)},
             {"lambda", opt == "AdamWOptimizer" ? double(0.01f) : 0.0},
             {"epsilon", double(1e-8f)}},
            {{"do_bias_correction", 1}}};
  if (opt == "LambOptimizer")
    return {{{"alpha", double(0.9f)},
             {"beta", double(0.999f)},
             {"lambda", 0},
             {"epsilon", double(1e-6f)},
             {"ratio_min", -inf},
             {"ratio_max", inf}},
            {{"do_bias_correction", 0}}};
  return {{{"lr_decay", 0}, {"lambda", 0}, {"epsilon", double(1e-10f)}}, {}};  // AdagradOptimizer
}

// Weights and states of n tensors.
struct RefState {
  std::vector<Vec> w, s0, s1;
};

// One update of every tensor by optimizer `opt`, in double: the formulas of torch.optim (LAMB:
// You et al.), written independently of the kernels' order of operations.
void reference_step(const std::string& opt, const Hyper& h, double lr, int64_t t, double scale, RefState& st,
                    const std::vector<Vec>& grads) {
  auto F = [&](const char* n) { return h.f.at(n); };
  for (size_t k = 0; k < st.w.size(); ++k) {
    Vec& w = st.w[k];
    Vec& a = st.s0[k];
    Vec& b = st.s1[k];
    Vec g = grads[k];
    for (double& x : g) x *= scale;
    const double wd = F("lambda");
    if (opt == "SGDOptimizer") {
      for (size_t i = 0; i < w.size(); ++i) w[i] -= lr * (g[i] + wd * w[i]);
    } else if (opt == "MomentumOptimizer") {
      const double mu = F("momentum");
      const bool nesterov = h.i.at("nesterov") != 0;
      for (size_t i = 0; i < w.size(); ++i) {
        const double d = g[i] + wd * w[i];
        a[i] = t == 1 ? d : mu * a[i] + d;
        w[i] -= lr * (nesterov ? d + mu * a[i] : a[i]);
      }
    } else if (opt == "AdamOptimizer" || opt == "AdamWOptimizer" || opt == "LambOptimizer") {
      const double b1 = F("alpha"), b2 = F("beta"), eps = F("epsilon");
      const bool bias = h.i.at("do_bias_correction") != 0;
      const double bc1 = bias ? 1 - std::pow(b1, double(t)) : 1, bc2 = bias ? 1 - std::pow(b2, double(t)) : 1;
      Vec r(w.size());
      for (size_t i = 0; i < w.size(); ++i) {
        if (opt == "AdamWOptimizer") w[i] -= lr * wd * w[i];
        const double gi = opt == "AdamOptimizer" ? g[i] + wd * w[i] : g[i];
        a[i] = b1 * a[i] + (1 - b1) * gi;
        b[i] = b2 * b[i] + (1 - b2) * gi * gi;
        const double mhat = a[i] / bc1, vhat = b[i] / bc2;
        if (opt == "LambOptimizer") r[i] = mhat / (std::sqrt(vhat) + eps) + wd * w[i];
        else w[i] -= lr * mhat / (std::sqrt(vhat) + eps);
      }
      if (opt == "LambOptimizer") {
        double wn = 0, rn = 0;
        for (size_t i = 0; i < w.size(); ++i) wn += w[i] * w[i], rn += r[i] * r[i];
        wn = std::sqrt(wn);
        rn = std::sqrt(rn);
        const double ratio = std::clamp(wn > 0 && rn > 0 ? wn / rn : 1.0, F("ratio_min"), F("ratio_max"));
        for (size_t i = 0; i < w.size(); ++i) w[i] -= lr * ratio * r[i];
      }
    } else {  // AdagradOptimizer
      const double clr = lr / (1 + double(t - 1) * F("lr_decay"));
      for (size_t i = 0; i < w.size(); ++i) {
        const double gi = g[i] + wd * w[i];
        a[i] += gi * gi;
        w[i] -= clr * gi / (std::sqrt(a[i]) + F("epsilon"));
      }
    }
  }
}

size_t num_states(const std::string& opt) {
  if (opt == "SGDOptimizer") return 0;
  if (opt == "MomentumOptimizer" || opt == "AdagradOptimizer") return 1;
  return 2;
}

struct TensorDesc {
  DType dt;
  Shape shape;
};

// Mixed float32 / float64 tensors, a scalar, and two large enough to split across threads (and,
// for LAMB and GlobalNormClip, over several norm blocks).
const std::vector<TensorDesc>& mixed_tensors() {
  static const std::vector<TensorDesc> t = {{DType::kFloat32, {3, 5}},
                                            {DType::kFloat64, {7}},
                                            {DType::kFloat32, {}},
                                            {DType::kFloat32, {20000}},
                                            {DType::kFloat64, {2, 4500}}};
  return t;
}

struct Trajectory {
  std::vector<Tensor> w, s;  // final weights; final states, group-major
};

// `steps` updates of `opt` through run_kernel; checks every step against the double reference.
Trajectory run_optimizer(const std::string& opt, const std::vector<ir::Attribute>& attrs, const Hyper& h, bool scaled,
                  InPlace mode, int threads, const std::string& what) {
  const uint32_t seed = 4242;
  std::mt19937 rng(seed);
  const auto& descs = mixed_tensors();
  const size_t n = descs.size(), S = num_states(opt);
  std::vector<Tensor> w, s;
  RefState ref;
  for (const auto& d : descs) {
    w.push_back(random_tensor(d.dt, d.shape, rng));
    ref.w.push_back(to_double(w.back()));
  }
  for (size_t g = 0; g < S; ++g)
    for (const auto& d : descs) {
      // second moments and Adagrad sums are non-negative
      const bool positive = g == 1 || opt == "AdagradOptimizer";
      s.push_back(random_tensor(d.dt, d.shape, rng, positive ? 0.0 : -0.5, 0.5));
    }
  for (size_t k = 0; k < n; ++k) {
    ref.s0.push_back(S > 0 ? to_double(s[k]) : Vec(size_t(w[k].numel())));
    ref.s1.push_back(S > 1 ? to_double(s[n + k]) : Vec(size_t(w[k].numel())));
  }
  for (int64_t t = 1; t <= 4; ++t) {
    std::vector<Tensor> grads;
    std::vector<Vec> gref;
    for (const auto& d : descs) {
      grads.push_back(random_tensor(d.dt, d.shape, rng));
      gref.push_back(to_double(grads.back()));
    }
    const float lr = 0.05f * float(1 + t);
    const double scale = scaled ? 0.375 + 0.125 * double(t) : 1.0;
    std::vector<Tensor> ins = {t % 2 ? Tensor::scalar<float>(lr) : Tensor::from_vector<float>({1}, {lr}),
                               Tensor::scalar<int64_t>(t), scaled ? Tensor::from_vector<double>({1}, {scale}) : Tensor()};
    ins.insert(ins.end(), w.begin(), w.end());
    ins.insert(ins.end(), grads.begin(), grads.end());
    ins.insert(ins.end(), s.begin(), s.end());
    auto r = run_kernel(opt, ins, attrs, training(n * (1 + S), threads), mode);
    for (size_t k = 0; k < r.inplace_of.size(); ++k)
      EXPECT_EQ(r.inplace_of[k], int(k < n ? 3 + k : 3 + n + k)) << what << ": output " << k << " not in place";
    std::copy(r.outputs.begin(), r.outputs.begin() + long(n), w.begin());
    std::copy(r.outputs.begin() + long(n), r.outputs.end(), s.begin());
    reference_step(opt, h, double(lr), t, scale, ref, gref);
    for (size_t k = 0; k < n; ++k) {
      const bool f32 = descs[k].dt == DType::kFloat32;
      const double rtol = f32 ? 2e-5 : 1e-11, atol = f32 ? 2e-6 : 1e-12;
      const std::string where = what + " step " + std::to_string(t) + " tensor " + std::to_string(k) + " " +
                                shape_to_string(descs[k].shape) + " seed " + std::to_string(seed);
      EXPECT_TRUE(all_close(w[k], descs[k].shape, ref.w[k], rtol, atol)) << where << " (weight)";
      if (S > 0) {
        EXPECT_TRUE(all_close(s[k], descs[k].shape, ref.s0[k], rtol, atol)) << where << " (state 0)";
      }
      if (S > 1) {
        EXPECT_TRUE(all_close(s[n + k], descs[k].shape, ref.s1[k], rtol, atol)) << where << " (state 1)";
      }
    }
  }
  return {w, s};
}

struct OptCase {
  std::string opt;
  std::vector<ir::Attribute> attrs;
};

std::vector<OptCase> optimizer_cases() {
  return {
      {"SGDOptimizer", {}},
      {"SGDOptimizer", {attr_float("lambda", 0.1f)}},
      {"MomentumOptimizer", {}},
      {"MomentumOptimizer", {attr_float("momentum", 0.8f), attr_int("nesterov", 1), attr_float("lambda", 0.05f)}},
      {"AdamOptimizer", {}},
      {"AdamOptimizer",
       {attr_float("alpha", 0.85f), attr_float("beta", 0.99f), attr_float("epsilon", 1e-7f), attr_float("lambda", 0.1f)}},
      {"AdamOptimizer", {attr_int("do_bias_correction", 0)}},
      {"AdamWOptimizer", {}},
      {"AdamWOptimizer", {attr_float("lambda", 0.1f), attr_int("do_bias_correction", 0)}},
      {"LambOptimizer", {}},
      {"LambOptimizer", {attr_float("lambda", 0.01f), attr_int("do_bias_correction", 1)}},
      {"LambOptimizer", {attr_float("ratio_max", 0.25f)}},
      {"LambOptimizer", {attr_float("ratio_min", 2.0f)}},
      {"AdagradOptimizer", {}},
      {"AdagradOptimizer", {attr_float("lr_decay", 0.1f), attr_float("lambda", 0.1f), attr_float("epsilon", 1e-6f)}},
  };
}

Hyper hyper_of(const OptCase& c) {
  Hyper h = contract_defaults(c.opt);
  for (const auto& a : c.attrs) {
    if (a.type == ir::AttrType::kFloat) h.f[a.name] = double(a.f);
    else h.i[a.name] = a.i;
  }
  return h;
}

}  // namespace

// ---------------------------------------------------------------- com.onnxtrain optimizers
TEST(OptimizerOps, OptimizersMatchFormulasAliasedOrNot) {
  for (const OptCase& c : optimizer_cases()) {
    const Hyper h = hyper_of(c);
    for (bool scaled : {false, true}) {
      std::string what = c.opt;
      for (const auto& a : c.attrs) what += " " + a.name;
      what += scaled ? " grad_scale" : "";
      const Trajectory a = run_optimizer(c.opt, c.attrs, h, scaled, InPlace::kAliased, 1, what + " aliased 1 thread");
      const Trajectory b = run_optimizer(c.opt, c.attrs, h, scaled, InPlace::kSeparate, 2, what + " separate 2 threads");
      // Neither aliasing nor the thread count changes a bit.
      for (size_t k = 0; k < a.w.size(); ++k) EXPECT_TRUE(same_bits(a.w[k], b.w[k])) << what << " weight " << k;
      for (size_t k = 0; k < a.s.size(); ++k) EXPECT_TRUE(same_bits(a.s[k], b.s[k])) << what << " state " << k;
    }
  }
}

TEST(OptimizerOps, SpecTableHasTheContractNamesAndDefaults) {
  const std::vector<std::string> names = {"SGDOptimizer",   "MomentumOptimizer", "AdamOptimizer",
                                          "AdamWOptimizer", "LambOptimizer",     "AdagradOptimizer"};
  ASSERT_EQ(ok::optimizer_specs().size(), names.size());
  for (const auto& name : names) {
    const ok::OptimizerSpec* s = ok::find_optimizer_spec(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_EQ(s->states.size(), num_states(name)) << name;
    const Hyper h = contract_defaults(name);
    EXPECT_EQ(s->float_attrs.size(), h.f.size()) << name;
    EXPECT_EQ(s->int_attrs.size(), h.i.size()) << name;
    for (const auto& [attr, v] : h.f) EXPECT_EQ(double(s->float_default(attr)), v) << name << " " << attr;
    for (const auto& [attr, v] : h.i) EXPECT_EQ(s->int_default(attr), v) << name << " " << attr;
  }
  EXPECT_EQ(ok::find_optimizer_spec("AdamOptimizer")->states, (std::vector<std::string>{"Moment_1", "Moment_2"}));
  EXPECT_EQ(ok::find_optimizer_spec("MomentumOptimizer")->states, (std::vector<std::string>{"Momentum"}));
  EXPECT_EQ(ok::find_optimizer_spec("AdagradOptimizer")->states, (std::vector<std::string>{"Sum"}));
  ASSERT_EQ(ok::find_optimizer_spec("AdagradOptimizer")->state_init_attrs.size(), 1u);
  EXPECT_EQ(ok::find_optimizer_spec("AdagradOptimizer")->state_init_attrs[0].name, "initial_accumulator_value");
  EXPECT_EQ(ok::find_optimizer_spec("Adam"), nullptr);
  EXPECT_NE(thrown_by([] { ok::find_optimizer_spec("SGDOptimizer")->float_default("momentum"); }).find("lambda"),
            std::string::npos);
}

TEST(OptimizerOps, AdamThroughTheExecutor) {
  std::mt19937 rng(77);
  Tensor w = random_tensor(DType::kFloat64, {2, 3}, rng), g = random_tensor(DType::kFloat64, {2, 3}, rng);
  Tensor m = random_tensor(DType::kFloat64, {2, 3}, rng), v = random_tensor(DType::kFloat64, {2, 3}, rng, 0, 1);
  auto out = run_node("AdamOptimizer", {Tensor::scalar<float>(0.125f), Tensor::scalar<int64_t>(3), Tensor(), w, g, m, v},
                      {attr_float("lambda", 0.25f)}, training(3));
  RefState st{{to_double(w)}, {to_double(m)}, {to_double(v)}};
  Hyper h = contract_defaults("AdamOptimizer");
  h.f["lambda"] = 0.25;
  reference_step("AdamOptimizer", h, 0.125, 3, 1.0, st, {to_double(g)});
  EXPECT_TRUE(all_close(out[0], {2, 3}, st.w[0], 1e-12, 1e-12)) << "seed 77";
  EXPECT_TRUE(all_close(out[1], {2, 3}, st.s0[0], 1e-12, 1e-12)) << "seed 77";
  EXPECT_TRUE(all_close(out[2], {2, 3}, st.s1[0], 1e-12, 1e-12)) << "seed 77";
}

namespace {
void expect_error(const std::function<void()>& f, const std::string& kind, const std::string& node,
                  const std::string& what) {
  const std::string m = thrown_by(f);
  EXPECT_EQ(m.rfind(kind + ": ", 0), 0u) << "expected " << kind << ", got '" << m << "'";
  EXPECT_NE(m.find(node), std::string::npos) << m;
  EXPECT_NE(m.find(what), std::string::npos) << "expected '" << what << "' in: " << m;
}
}  // namespace

TEST(OptimizerOps, OptimizerErrorsNameTheNode) {
  const Tensor w = Tensor::zeros(DType::kFloat32, {3}), w64 = Tensor::zeros(DType::kFloat64, {3});
  const Tensor lr = Tensor::scalar<float>(0.1f), t1 = Tensor::scalar<int64_t>(1);
  auto adam = [&](std::vector<Tensor> ins, std::vector<ir::Attribute> attrs = {}, size_t outs = 3,
                  std::vector<size_t> unnamed = {}) {
    return [=] { run_kernel("AdamOptimizer", ins, attrs, training(outs), InPlace::kAliased, unnamed); };
  };
  const std::string node = "node_AdamOptimizer";
  expect_error(adam({lr, t1, Tensor(), w, w, w}), "InvalidArgument", node, "expects lr, step, grad_scale");
  expect_error(adam({Tensor::scalar<double>(0.1), t1, Tensor(), w, w, w, w}), "InvalidArgument", node,
               "lr (input 0) must be float of shape [] or [1], got double[]");
  expect_error(adam({Tensor::from_vector<float>({2}, {0.1f, 0.1f}), t1, Tensor(), w, w, w, w}), "InvalidArgument", node,
               "lr (input 0)");
  expect_error(adam({lr, Tensor::scalar<int32_t>(1), Tensor(), w, w, w, w}), "InvalidArgument", node,
               "step (input 1) must be int64 of shape [] or [1], got int32[]");
  expect_error(adam({lr, t1, Tensor::scalar<float>(1.f), w, w, w, w}), "InvalidArgument", node,
               "grad_scale (input 2) must be double of shape [] or [1], got float[]");
  expect_error(adam({lr, t1, Tensor(), w, w64, w, w}), "InvalidArgument", node, "gradient 1 (input 4) is double[3], weight 1 is float[3]");
  expect_error(adam({lr, t1, Tensor(), w, w, w, Tensor::zeros(DType::kFloat32, {4})}), "InvalidArgument", node,
               "Moment_2 1 (input 6) is float[4], weight 1 is float[3]");
  const Tensor wi = Tensor::zeros(DType::kInt64, {3});
  expect_error(adam({lr, t1, Tensor(), wi, wi, wi, wi}), "InvalidArgument", node,
               "weight 1 (input 3) must be float or double, got int64");
  expect_error(adam({lr, t1, Tensor(), w, w, w, w}, {}, 2), "InvalidArgument", node, "expects 3 outputs, got 2");
  expect_error(adam({lr, t1, Tensor(), w, w, w, w}, {}, 3, {1}), "InvalidArgument", node, "output 1 must be named");
  expect_error(adam({lr, Tensor::scalar<int64_t>(0), Tensor(), w, w, w, w}), "InvalidArgument", node,
               "step must be >= 1");
  expect_error(adam({Tensor::scalar<float>(NAN), t1, Tensor(), w, w, w, w}), "InvalidArgument", node, "not finite");
  expect_error(adam({lr, t1, Tensor(), w, w, w, w}, {attr_float("momentum", 0.5f)}), "InvalidModel", node,
               "AdamOptimizer has no attribute 'momentum' (it has: alpha, beta, lambda, epsilon, do_bias_correction, update_signal)");
  expect_error(adam({lr, t1, Tensor(), w, w, w, w}, {attr_int("alpha", 1)}), "InvalidModel", node,
               "attribute 'alpha' has type");
  expect_error(adam({lr, t1, Tensor(), w, w, w, w}, {attr_int("do_bias_correction", 2)}), "InvalidModel", node,
               "'do_bias_correction' must be 0 or 1");
  expect_error([&] { run_kernel("SGDOptimizer", {lr, t1, Tensor(), w, w}, {attr_int("nesterov", 1)}, training(1), InPlace::kAliased); },
               "InvalidModel", "node_SGDOptimizer", "has no attribute 'nesterov'");
}

// ---------------------------------------------------------------- AccumulateGradients
TEST(OptimizerOps, AccumulateGradientsResetsOrAdds) {
  const uint32_t seed = 31;
  std::mt19937 rng(seed);
  const auto& descs = mixed_tensors();
  const size_t n = descs.size();
  for (bool reset : {false, true}) {
    std::vector<Tensor> acc, grads;
    for (const auto& d : descs) acc.push_back(random_tensor(d.dt, d.shape, rng));
    for (const auto& d : descs) grads.push_back(random_tensor(d.dt, d.shape, rng));
    std::vector<Tensor> ins = {Tensor::scalar<bool>(reset)};
    ins.insert(ins.end(), acc.begin(), acc.end());
    ins.insert(ins.end(), grads.begin(), grads.end());
    const auto a = run_kernel("AccumulateGradients", ins, {}, training(n, 1), InPlace::kAliased);
    const auto b = run_kernel("AccumulateGradients", ins, {}, training(n, 2), InPlace::kSeparate);
    for (size_t k = 0; k < n; ++k) {
      EXPECT_EQ(a.inplace_of[k], int(1 + k));
      const Vec A = to_double(acc[k]), G = to_double(grads[k]);
      Vec e(A.size());
      for (size_t i = 0; i < e.size(); ++i) e[i] = reset ? G[i] : A[i] + G[i];
      const double tol = descs[k].dt == DType::kFloat32 ? 1e-6 : 1e-14;
      const std::string what = "reset " + std::to_string(reset) + " tensor " + std::to_string(k) + " seed 31";
      EXPECT_TRUE(all_close(a.outputs[k], descs[k].shape, e, tol, tol)) << what;
      EXPECT_TRUE(same_bits(a.outputs[k], b.outputs[k])) << what;
    }
  }
  const Tensor w = Tensor::zeros(DType::kFloat32, {3});
  expect_error([&] { run_kernel("AccumulateGradients", {Tensor::scalar<float>(1.f), w, w}, {}, training(1), InPlace::kAliased); },
               "InvalidArgument", "node_AccumulateGradients", "reset (input 0) must be bool");
  expect_error([&] { run_kernel("AccumulateGradients", {Tensor::scalar<bool>(true), w, w, w}, {}, training(1), InPlace::kAliased); },
               "InvalidArgument", "node_AccumulateGradients", "expects reset and 2 groups");
  expect_error([&] {
    run_kernel("AccumulateGradients", {Tensor::scalar<bool>(true), w, Tensor::zeros(DType::kFloat32, {2})}, {}, training(1),
               InPlace::kAliased);
  }, "InvalidArgument", "node_AccumulateGradients", "gradient 1 (input 2) is float[2], accumulator 1 is float[3]");
}

// ---------------------------------------------------------------- GlobalNormClip
TEST(OptimizerOps, GlobalNormClipMatchesTorchClipGradNorm) {
  const uint32_t seed = 32;
  std::mt19937 rng(seed);
  std::vector<Tensor> grads;
  double ss = 0;
  for (const auto& d : mixed_tensors()) {
    grads.push_back(random_tensor(d.dt, d.shape, rng));
    for (double x : to_double(grads.back())) ss += x * x;
  }
  const double norm = std::sqrt(ss);
  for (float max_norm : {1.0f, 1e6f}) {
    const double coef = double(max_norm) / (norm + 1e-6);
    const double scale = coef < 1 ? coef : 1.0;
    const auto a = run_kernel("GlobalNormClip", grads, {attr_float("max_norm", max_norm)}, training(2, 1), InPlace::kAliased);
    const auto b = run_kernel("GlobalNormClip", grads, {attr_float("max_norm", max_norm)}, training(2, 2), InPlace::kSeparate);
    EXPECT_TRUE(all_close(a.outputs[0], {1}, {scale}, 1e-13, 0)) << "max_norm " << max_norm << " seed 32";
    EXPECT_TRUE(all_close(a.outputs[1], {1}, {norm}, 1e-13, 0)) << "seed 32";
    EXPECT_TRUE(same_bits(a.outputs[0], b.outputs[0]) && same_bits(a.outputs[1], b.outputs[1])) << "thread count changed bits";
    EXPECT_EQ(a.inplace_of, (std::vector<int>{-1, -1}));
  }
  // norm optional; zero gradients: nothing to clip
  const auto z = run_kernel("GlobalNormClip", {Tensor::zeros(DType::kFloat32, {4})}, {attr_float("max_norm", 0.5f)},
                            training(1), InPlace::kAliased);
  EXPECT_TRUE(all_close(z.outputs[0], {1}, {1.0}, 0, 0));
  const Tensor g = Tensor::zeros(DType::kFloat32, {3});
  const std::string node = "node_GlobalNormClip";
  expect_error([&] { run_kernel("GlobalNormClip", {g}, {}, training(1), InPlace::kAliased); }, "InvalidModel", node,
               "required attribute 'max_norm'");
  expect_error([&] { run_kernel("GlobalNormClip", {g}, {attr_float("max_norm", -1.f)}, training(1), InPlace::kAliased); },
               "InvalidModel", node, "max_norm must be finite and > 0");
  expect_error([&] {
    run_kernel("GlobalNormClip", {Tensor::zeros(DType::kInt32, {3})}, {attr_float("max_norm", 1.f)}, training(1),
               InPlace::kAliased);
  }, "InvalidArgument", node, "gradient 1 (input 0) must be float or double, got int32");
  expect_error([&] { run_kernel("GlobalNormClip", {g}, {attr_float("max_norm", 1.f)}, training(2), InPlace::kAliased, {0}); },
               "InvalidArgument", node, "output 0 (scale) must be named");
}

// ---------------------------------------------------------------- loss scaling (float16)
TEST(OptimizerOps, LossScaleCheckUnscalesClipsAndFlagsNonFinite) {
  const uint32_t seed = 77;
  std::mt19937 rng(seed);
  std::vector<Tensor> grads;
  double ss = 0;
  for (const auto& d : mixed_tensors()) {
    grads.push_back(random_tensor(d.dt, d.shape, rng, -300.0, 300.0));  // gradients of a scaled loss
    for (double x : to_double(grads.back())) ss += x * x;
  }
  const float ls = 1024.f;
  const double unscaled_norm = std::sqrt(ss) / double(ls);
  for (float max_norm : {0.f, 0.5f, 1e6f}) {
    double scale = 1.0 / double(ls);
    if (max_norm > 0) scale *= std::min(1.0, double(max_norm) / (unscaled_norm + 1e-6));
    std::vector<Tensor> ins = {Tensor::from_vector<float>({1}, {ls})};
    ins.insert(ins.end(), grads.begin(), grads.end());
    const auto a = run_kernel("LossScaleCheck", ins, {attr_float("max_norm", max_norm)}, training(2, 1), InPlace::kAliased);
    const auto b = run_kernel("LossScaleCheck", ins, {attr_float("max_norm", max_norm)}, training(2, 2), InPlace::kSeparate);
    EXPECT_TRUE(all_close(a.outputs[0], {1}, {scale}, 1e-13, 0)) << "max_norm " << max_norm << " seed " << seed;
    EXPECT_TRUE(a.outputs[1].data<bool>()[0]) << "finite gradients flagged non-finite";
    EXPECT_TRUE(same_bits(a.outputs[0], b.outputs[0])) << "thread count changed bits";
  }
  // One infinity or NaN anywhere, in either type: not finite, scale 0.
  for (double bad : {double(INFINITY), -double(INFINITY), double(NAN)})
    for (size_t k = 0; k < grads.size(); ++k) {
      std::vector<Tensor> ins = {Tensor::from_vector<float>({1}, {ls})};
      for (size_t j = 0; j < grads.size(); ++j) {
        Tensor g = grads[j].clone();
        if (j == k) {
          if (g.dtype() == DType::kFloat32) g.data<float>()[g.numel() - 1] = float(bad);
          else g.data<double>()[g.numel() / 2] = bad;
        }
        ins.push_back(g);
      }
      const auto r = run_kernel("LossScaleCheck", ins, {}, training(2, 2), InPlace::kSeparate);
      EXPECT_FALSE(r.outputs[1].data<bool>()[0]) << bad << " in gradient " << k << " not detected";
      EXPECT_EQ(r.outputs[0].data<double>()[0], 0.0);
    }
  const std::string node = "node_LossScaleCheck";
  const Tensor g = Tensor::zeros(DType::kFloat32, {3});
  expect_error([&] { run_kernel("LossScaleCheck", {Tensor::from_vector<float>({1}, {0.f}), g}, {}, training(2), InPlace::kAliased); },
               "InvalidArgument", node, "loss_scale 0 must be finite and > 0");
  expect_error([&] { run_kernel("LossScaleCheck", {Tensor::from_vector<double>({1}, {2.0}), g}, {}, training(2), InPlace::kAliased); },
               "InvalidArgument", node, "loss_scale (input 0) must be float of shape [] or [1], got double[1]");
  expect_error([&] { run_kernel("LossScaleCheck", {Tensor::from_vector<float>({1}, {2.f}), g}, {attr_float("max_norm", -1.f)},
                                training(2), InPlace::kAliased); },
               "InvalidModel", node, "max_norm must be finite and >= 0");
}

TEST(OptimizerOps, UpdateSignalFalseLeavesWeightsAndStates) {
  // update_signal = 1: input 3 decides. True: the same update as without the attribute; false:
  // every output equals its input, aliased or not.
  for (const OptCase& c : optimizer_cases()) {
    std::mt19937 rng(5);
    const size_t S = num_states(c.opt);
    std::vector<Tensor> w, g, s;
    for (const auto& d : mixed_tensors()) {
      w.push_back(random_tensor(d.dt, d.shape, rng));
      g.push_back(random_tensor(d.dt, d.shape, rng));
    }
    for (size_t k = 0; k < S; ++k)
      for (const auto& d : mixed_tensors()) s.push_back(random_tensor(d.dt, d.shape, rng, 0.0, 0.5));
    const size_t n = w.size();
    auto inputs = [&](int gate) {
      std::vector<Tensor> ins = {Tensor::scalar<float>(0.1f), Tensor::scalar<int64_t>(2), Tensor::from_vector<double>({1}, {0.5})};
      if (gate >= 0) ins.push_back(Tensor::from_vector<bool>({1}, {gate == 1}));
      for (const auto* set : {&w, &g, &s})
        for (const auto& t : *set) ins.push_back(t.clone());
      return ins;
    };
    std::vector<ir::Attribute> gated = c.attrs;
    gated.push_back(attr_int("update_signal", 1));
    const auto plain = run_kernel(c.opt, inputs(-1), c.attrs, training(n * (1 + S)), InPlace::kSeparate);
    const auto on = run_kernel(c.opt, inputs(1), gated, training(n * (1 + S), 2), InPlace::kAliased);
    for (size_t k = 0; k < plain.outputs.size(); ++k)
      EXPECT_TRUE(same_bits(plain.outputs[k], on.outputs[k])) << c.opt << " output " << k << " with update_signal true";
    for (InPlace mode : {InPlace::kAliased, InPlace::kSeparate}) {
      const auto off = run_kernel(c.opt, inputs(0), gated, training(n * (1 + S)), mode);
      for (size_t k = 0; k < n; ++k) EXPECT_TRUE(same_bits(off.outputs[k], w[k])) << c.opt << " weight " << k << " changed";
      for (size_t k = 0; k < s.size(); ++k)
        EXPECT_TRUE(same_bits(off.outputs[n + k], s[k])) << c.opt << " state " << k << " changed";
      for (size_t k = 0; k < off.inplace_of.size(); ++k)
        EXPECT_EQ(off.inplace_of[k], int(k < n ? 4 + k : 4 + n + k)) << c.opt << ": output " << k << " not in place";
    }
  }
  const std::string node = "node_SGDOptimizer";
  const Tensor w = Tensor::zeros(DType::kFloat32, {3});
  expect_error([&] {
    run_kernel("SGDOptimizer", {Tensor::scalar<float>(0.1f), Tensor::scalar<int64_t>(1), Tensor(),
                                Tensor::from_vector<float>({1}, {1.f}), w, w},
               {attr_int("update_signal", 1)}, training(1), InPlace::kAliased);
  }, "InvalidArgument", node, "update_signal (input 3) must be bool");
  expect_error([&] {
    run_kernel("SGDOptimizer", {Tensor::scalar<float>(0.1f), Tensor::scalar<int64_t>(1), Tensor(), w, w},
               {attr_int("update_signal", 2)}, training(1), InPlace::kAliased);
  }, "InvalidModel", node, "'update_signal' must be 0 or 1");
}

// ---------------------------------------------------------------- ai.onnx.preview.training
TEST(OptimizerOps, AdamMatchesFormula) {
  const uint32_t seed = 11;
  std::mt19937 rng(seed);
  Tensor x = random_tensor(DType::kFloat64, {5}, rng), g = random_tensor(DType::kFloat64, {5}, rng);
  Tensor v = random_tensor(DType::kFloat64, {5}, rng), h = random_tensor(DType::kFloat64, {5}, rng, 0.1, 1);
  const double R = 0.05, a = 0.8, b = 0.9, eps = 1e-3, nc = 0.01, post = 0.02;
  const int64_t T = 3;
  auto out = run_node("Adam", {Tensor::scalar<double>(R), Tensor::scalar<int64_t>(T), x, g, v, h},
                      {attr_float("alpha", float(a)), attr_float("beta", float(b)), attr_float("epsilon", float(eps)),
                       attr_float("norm_coefficient", float(nc)), attr_float("norm_coefficient_post", float(post))},
                      preview(3));
  auto X = to_double(x), G = to_double(g), V = to_double(v), H = to_double(h);
  std::vector<double> ex, ev, eh;
  const double fa = float(a), fb = float(b), fe = float(eps), fn = float(nc), fp = float(post);
  const double r = R * std::sqrt(1 - std::pow(fb, T)) / (1 - std::pow(fa, T));
  for (size_t i = 0; i < 5; ++i) {
    const double gr = fn * X[i] + G[i];
    const double vn = fa * V[i] + (1 - fa) * gr, hn = fb * H[i] + (1 - fb) * gr * gr;
    ev.push_back(vn);
    eh.push_back(hn);
    ex.push_back((1 - fp) * (X[i] - r * vn / (std::sqrt(hn) + fe)));
  }
  EXPECT_TRUE(all_close(out[0], {5}, ex, 1e-12, 1e-12)) << "seed " << seed;
  EXPECT_TRUE(all_close(out[1], {5}, ev, 1e-12, 1e-12)) << "seed " << seed;
  EXPECT_TRUE(all_close(out[2], {5}, eh, 1e-12, 1e-12)) << "seed " << seed;
}

TEST(OptimizerOps, MomentumAndAdagradMatchFormulas) {
  const uint32_t seed = 12;
  std::mt19937 rng(seed);
  Tensor x = random_tensor(DType::kFloat64, {4}, rng), g = random_tensor(DType::kFloat64, {4}, rng);
  Tensor v = random_tensor(DType::kFloat64, {4}, rng), h = random_tensor(DType::kFloat64, {4}, rng, 0.1, 1);
  auto X = to_double(x), G = to_double(g), V = to_double(v), H = to_double(h);
  for (const char* mode : {"standard", "nesterov"}) {
    auto out = run_node("Momentum", {Tensor::scalar<double>(0.1), Tensor::scalar<int64_t>(0), x, g, v},
                        {attr_float("alpha", 0.5f), attr_float("beta", 0.25f), attr_string("mode", mode),
                         attr_float("norm_coefficient", 0.125f)},
                        preview(2));
    std::vector<double> ex, ev;
    for (size_t i = 0; i < 4; ++i) {
      const double gr = 0.125 * X[i] + G[i], vn = 0.5 * V[i] + 1.0 * gr;  // T = 0: beta replaced by 1
      ev.push_back(vn);
      ex.push_back(std::string(mode) == "nesterov" ? X[i] - 0.1 * (gr + 0.5 * vn) : X[i] - 0.1 * vn);
    }
    EXPECT_TRUE(all_close(out[0], {4}, ex, 1e-12, 1e-12)) << mode;
    EXPECT_TRUE(all_close(out[1], {4}, ev, 1e-12, 1e-12)) << mode;
  }
  auto out = run_node("Adagrad", {Tensor::scalar<double>(0.2), Tensor::scalar<int64_t>(4), x, g, h},
                      {attr_float("decay_factor", 0.5f), attr_float("epsilon", 0.25f)}, preview(2));
  std::vector<double> ex, eh;
  for (size_t i = 0; i < 4; ++i) {
    const double hn = H[i] + G[i] * G[i];
    eh.push_back(hn);
    ex.push_back(X[i] - (0.2 / 3.0) * G[i] / (std::sqrt(hn) + 0.25));
  }
  EXPECT_TRUE(all_close(out[0], {4}, ex, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(out[1], {4}, eh, 1e-12, 1e-12));
}

// Several tensors of both types, T > 0, every output aliased to its input or not; an output the
// node does not name leaves its input untouched.
TEST(OptimizerOps, PreviewOptimizersAliasedMixedAndUnnamedOutputs) {
  const uint32_t seed = 13;
  std::mt19937 rng(seed);
  const std::vector<TensorDesc> descs = {{DType::kFloat32, {20000}}, {DType::kFloat64, {3, 2}}};
  const double R = double(0.05f);  // fed as float32
  const int64_t T = 2;
  const float alpha = 0.85f, beta = 0.95f, eps = 1e-3f, nc = 0.01f, post = 0.02f, decay = 0.25f;
  struct Op {
    std::string name;
    size_t states;
    std::vector<ir::Attribute> attrs;
  };
  const std::vector<Op> ops = {
      {"Adagrad", 1, {attr_float("decay_factor", decay), attr_float("epsilon", eps), attr_float("norm_coefficient", nc)}},
      {"Momentum", 1, {attr_float("alpha", alpha), attr_float("beta", beta), attr_string("mode", "nesterov"),
                       attr_float("norm_coefficient", nc)}},
      {"Adam", 2, {attr_float("alpha", alpha), attr_float("beta", beta), attr_float("epsilon", eps),
                   attr_float("norm_coefficient", nc), attr_float("norm_coefficient_post", post)}},
  };
  for (const Op& op : ops) {
    const size_t n = descs.size(), groups = 2 + op.states;
    std::vector<Tensor> ins = {Tensor::scalar<float>(0.05f), Tensor::scalar<int64_t>(T)};
    for (size_t gi = 0; gi < groups; ++gi)
      for (const auto& d : descs) ins.push_back(random_tensor(d.dt, d.shape, rng, gi >= 2 ? 0.0 : -1.0, 1.0));
    // expected, in double from the ONNX formulas
    std::vector<std::vector<Vec>> e(1 + op.states);
    const double fa = alpha, fb = beta, fe = eps, fn = nc, fp = post, fd = decay;
    for (size_t k = 0; k < n; ++k) {
      const Vec X = to_double(ins[2 + k]), G = to_double(ins[2 + n + k]), S0 = to_double(ins[2 + 2 * n + k]);
      const Vec S1 = op.states > 1 ? to_double(ins[2 + 3 * n + k]) : Vec();
      Vec x(X.size()), s0(X.size()), s1(X.size());
      for (size_t i = 0; i < X.size(); ++i) {
        const double g = fn * X[i] + G[i];
        if (op.name == "Adagrad") {
          s0[i] = S0[i] + g * g;
          x[i] = X[i] - R / (1 + double(T) * fd) * g / (std::sqrt(s0[i]) + fe);
        } else if (op.name == "Momentum") {
          s0[i] = fa * S0[i] + fb * g;
          x[i] = X[i] - R * (g + fa * s0[i]);
        } else {
          s0[i] = fa * S0[i] + (1 - fa) * g;
          s1[i] = fb * S1[i] + (1 - fb) * g * g;
          const double r = R * std::sqrt(1 - std::pow(fb, double(T))) / (1 - std::pow(fa, double(T)));
          x[i] = (1 - fp) * (X[i] - r * s0[i] / (std::sqrt(s1[i]) + fe));
        }
      }
      e[0].push_back(x);
      e[1].push_back(s0);
      if (op.states > 1) e[2].push_back(s1);
    }
    for (InPlace mode : {InPlace::kAliased, InPlace::kSeparate}) {
      for (bool unnamed : {false, true}) {
        // Unnamed: the first state output of tensor 1 (its input must stay as it was).
        const size_t skip = n;
        std::vector<Tensor> before;
        for (const Tensor& t : ins) before.push_back(t.defined() ? t.clone() : t);
        RunOptions o = preview(n * (1 + op.states));
        o.threads = 2;
        auto r = run_kernel(op.name, ins, op.attrs, o, mode, unnamed ? std::vector<size_t>{skip} : std::vector<size_t>{});
        const std::string what = op.name + (mode == InPlace::kAliased ? " aliased" : " separate") +
                                 (unnamed ? " unnamed" : "") + " seed 13";
        for (size_t gi = 0; gi <= op.states; ++gi)
          for (size_t k = 0; k < n; ++k) {
            const size_t out = gi * n + k;
            if (unnamed && out == skip) {
              EXPECT_FALSE(r.outputs[out].defined());
              continue;
            }
            const bool f32 = descs[k].dt == DType::kFloat32;
            EXPECT_EQ(r.inplace_of[out], int(2 + (gi == 0 ? 0 : gi + 1) * n + k)) << what;
            EXPECT_TRUE(all_close(r.outputs[out], descs[k].shape, e[gi][k], f32 ? 1e-5 : 1e-12, f32 ? 1e-6 : 1e-13))
                << what << " output " << out;
          }
        for (size_t i = 0; i < ins.size(); ++i) EXPECT_TRUE(same_bits(ins[i], before[i])) << what << ": input " << i << " changed";
      }
    }
  }
}

TEST(OptimizerOps, MismatchedGroupsNameTheNode) {
  Tensor x = Tensor::zeros(DType::kFloat32, {3});
  try {
    run_node("Momentum", {Tensor::scalar<float>(0.1f), Tensor::scalar<int64_t>(0), x, x, Tensor::zeros(DType::kFloat32, {4})},
             {attr_float("alpha", 0.5f), attr_float("beta", 0.5f), attr_string("mode", "standard")}, preview(2));
    FAIL();
  } catch (const onnxtrain::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("node_Momentum"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("V1 (input 4) is float[4]"), std::string::npos) << e.what();
  }
}
