// TEMPORARY: the com.onnxtrain optimizer kernels against the host-side optimizer classes of
// src/train/optimizer.cpp, bit for bit (same float operations in the same order), gradient
// clipping included. Delete this file together with those classes.
#include <cstring>
#include <map>

#include "test_util.h"
#include "train/optimizer.h"

using namespace ot_test;
namespace train = onnxtrain::train;

namespace {

struct HostCase {
  std::string name;
  std::map<std::string, float> f;
  std::map<std::string, int64_t> i;
};

std::vector<ir::Attribute> node_attrs(const HostCase& c) {
  std::vector<ir::Attribute> a;
  for (const auto& [k, v] : c.f) a.push_back(attr_float(k, v));
  for (const auto& [k, v] : c.i) a.push_back(attr_int(k, v));
  return a;
}

size_t states_of(const std::string& name) {
  return name == "SGDOptimizer" ? 0 : name == "MomentumOptimizer" || name == "AdagradOptimizer" ? 1 : 2;
}

// Scales gradients as train::clip_grad_norm does once it has its coefficient.
void scale_like_host(Tensor& g, double coef) {
  if (g.dtype() == DType::kFloat32) {
    float* p = g.data<float>();
    const float c32 = float(coef);
    for (int64_t j = 0; j < g.numel(); ++j) p[j] *= c32;
  } else {
    double* p = g.data<double>();
    for (int64_t j = 0; j < g.numel(); ++j) p[j] *= coef;
  }
}

// Largest distance in units in the last place between two float64 tensors.
int64_t max_ulps(const Tensor& a, const Tensor& b) {
  int64_t worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    int64_t x, y;
    std::memcpy(&x, a.data<double>() + i, 8);
    std::memcpy(&y, b.data<double>() + i, 8);
    worst = std::max<int64_t>(worst, x > y ? x - y : y - x);
  }
  return worst;
}

}  // namespace

TEST(OptimizerOpsHostBitwise, KernelsMatchHostOptimizerClasses) {
  const std::vector<HostCase> cases = {
      {"SGDOptimizer", {}, {}},
      {"SGDOptimizer", {{"lambda", 0.1f}}, {}},
      {"MomentumOptimizer", {}, {}},
      {"MomentumOptimizer", {{"momentum", 0.8f}, {"lambda", 0.05f}}, {{"nesterov", 1}}},
      {"AdamOptimizer", {}, {}},
      {"AdamOptimizer", {{"alpha", 0.85f}, {"beta", 0.99f}, {"epsilon", 1e-7f}, {"lambda", 0.1f}}, {}},
      {"AdamOptimizer", {}, {{"do_bias_correction", 0}}},
      {"AdamWOptimizer", {}, {}},
      {"AdamWOptimizer", {{"lambda", 0.1f}}, {{"do_bias_correction", 0}}},
      {"LambOptimizer", {}, {}},
      {"LambOptimizer", {{"lambda", 0.01f}}, {{"do_bias_correction", 1}}},
      {"LambOptimizer", {{"ratio_max", 0.25f}}, {}},
      {"AdagradOptimizer", {}, {}},
      {"AdagradOptimizer", {{"lr_decay", 0.1f}, {"lambda", 0.1f}, {"epsilon", 1e-6f}}, {}},
  };
  for (const HostCase& c : cases) {
    // LAMB's per-tensor norms are sequential sums only up to one norm block (8192 elements).
    std::vector<std::pair<DType, Shape>> descs = {
        {DType::kFloat32, {3, 5}}, {DType::kFloat64, {7}}, {DType::kFloat32, {}}, {DType::kFloat32, {8192}}};
    if (c.name != "LambOptimizer") descs.push_back({DType::kFloat64, {2, 20000}});
    const size_t n = descs.size(), S = states_of(c.name);
    std::mt19937 rng(99);
    std::vector<Tensor> host_w, kern_w, kern_s;
    std::vector<std::string> names;
    for (size_t k = 0; k < n; ++k) {
      host_w.push_back(random_tensor(descs[k].first, descs[k].second, rng));
      kern_w.push_back(host_w.back().clone());
      names.push_back("W" + std::to_string(k));
    }
    for (size_t s = 0; s < S; ++s)
      for (size_t k = 0; k < n; ++k) kern_s.push_back(Tensor::zeros(descs[k].first, descs[k].second));
    train::OptimizerConfig cfg;
    cfg.name = c.name;
    cfg.attrs = c.f;
    cfg.int_attrs = c.i;
    std::vector<const Tensor*> cw;
    for (auto& t : host_w) cw.push_back(&t);
    auto host = train::make_optimizer(cfg, names, cw);
    for (int64_t t = 1; t <= 4; ++t) {
      std::vector<Tensor> grads;
      for (size_t k = 0; k < n; ++k) grads.push_back(random_tensor(descs[k].first, descs[k].second, rng));
      const float lr = 0.01f * float(t);
      const bool clip = t % 2 == 0;
      const double coef = 0.6180339887;
      // host: clip_grad_norm scales the gradients, then step
      std::vector<Tensor> hg;
      for (const auto& g : grads) hg.push_back(g.clone());
      if (clip)
        for (auto& g : hg) scale_like_host(g, coef);
      std::vector<Tensor*> wp;
      std::vector<const Tensor*> gp;
      for (size_t k = 0; k < n; ++k) wp.push_back(&host_w[k]), gp.push_back(&hg[k]);
      host->step(lr, wp, gp);
      // kernel: the unscaled gradients and grad_scale
      std::vector<Tensor> ins = {Tensor::scalar<float>(lr), Tensor::scalar<int64_t>(t),
                                 clip ? Tensor::scalar<double>(coef) : Tensor()};
      ins.insert(ins.end(), kern_w.begin(), kern_w.end());
      ins.insert(ins.end(), grads.begin(), grads.end());
      ins.insert(ins.end(), kern_s.begin(), kern_s.end());
      RunOptions o;
      o.domain = "com.onnxtrain";
      o.num_outputs = n * (1 + S);
      o.threads = 2;
      auto r = run_kernel(c.name, ins, node_attrs(c), o, InPlace::kAliased);
      std::copy(r.outputs.begin(), r.outputs.begin() + long(n), kern_w.begin());
      std::copy(r.outputs.begin() + long(n), r.outputs.end(), kern_s.begin());
    }
    std::map<std::string, Tensor> host_state;
    for (auto& [k, v] : host->state()) host_state[k] = v;
    const std::vector<std::string>& bufs = S == 0 ? std::vector<std::string>{}
                                          : c.name == "MomentumOptimizer" ? std::vector<std::string>{"Momentum"}
                                          : c.name == "AdagradOptimizer"  ? std::vector<std::string>{"Sum"}
                                                                          : std::vector<std::string>{"Moment_1", "Moment_2"};
    std::string what = c.name;
    for (const auto& [k, v] : c.f) what += " " + k;
    for (const auto& [k, v] : c.i) what += " " + k;
    for (size_t k = 0; k < n; ++k) {
      if (c.name == "LambOptimizer" && descs[k].first == DType::kFloat64) {
        // The host's float64 LAMB norm loop is vectorized by GCC as an in-order reduction whose
        // vector part multiplies and adds separately while its scalar tail fuses them: its
        // trust ratio can differ from the kernel's (always fused) by an ulp, hence its weights.
        EXPECT_LE(max_ulps(kern_w[k], host_w[k]), 4) << what << ": weight " << k;
      } else {
        EXPECT_TRUE(same_bits(kern_w[k], host_w[k])) << what << ": weight " << k;
      }
      for (size_t s = 0; s < S; ++s)
        EXPECT_TRUE(same_bits(kern_s[s * n + k], host_state.at(bufs[s] + "_" + names[k]))) << what << ": " << bufs[s] << " " << k;
    }
  }
}

TEST(OptimizerOpsHostBitwise, GlobalNormClipMatchesHostGlobalNorm) {
  std::mt19937 rng(98);
  // Up to one norm block (8192 elements in all), the sum is train::global_norm's sequential one.
  std::vector<Tensor> grads = {random_tensor(DType::kFloat32, {3, 5}, rng), random_tensor(DType::kFloat64, {7}, rng),
                               random_tensor(DType::kFloat32, {8000}, rng)};
  std::vector<const Tensor*> gp;
  for (const auto& g : grads) gp.push_back(&g);
  const double norm = train::global_norm(gp);
  RunOptions o;
  o.domain = "com.onnxtrain";
  o.num_outputs = 2;
  auto r = run_kernel("GlobalNormClip", grads, {attr_float("max_norm", 2.f)}, o, InPlace::kAliased);
  EXPECT_EQ(std::memcmp(r.outputs[1].data<double>(), &norm, sizeof(double)), 0) << r.outputs[1].data<double>()[0] << " vs " << norm;
  const double coef = double(2.f) / (norm + 1e-6);
  EXPECT_EQ(r.outputs[0].data<double>()[0], coef < 1.0 ? coef : 1.0);
}
