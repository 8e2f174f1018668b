#include "ops/optimizers.h"

#include <cmath>

#include "onnxtrain/error.h"

namespace onnxtrain::ops {

const std::vector<OptimizerSpec>& optimizer_specs() {
  using A = OptimizerAlgorithm;
  static const std::vector<OptimizerSpec> specs = {
      {"SGDOptimizer", A::kSgd, {}, {{"lambda", 0.f}}, {}, {}, "d = g + lambda w; w -= lr d"},
      {"MomentumOptimizer", A::kMomentum, {"Momentum"}, {{"momentum", 0.9f}, {"lambda", 0.f}}, {{"nesterov", 0}}, {},
       "d = g + lambda w; b = t == 1 ? d : momentum b + d; w -= lr (nesterov ? d + momentum b : b)"},
      {"AdamOptimizer", A::kAdam,
       {"Moment_1", "Moment_2"},
       {{"alpha", 0.9f}, {"beta", 0.999f}, {"lambda", 0.f}, {"epsilon", 1e-8f}},
       {{"do_bias_correction", 1}},
       {},
       "g += lambda w; m, v: moments (alpha, beta); w -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + epsilon)"},
      {"AdamWOptimizer", A::kAdamW,
       {"Moment_1", "Moment_2"},
       {{"alpha", 0.9f}, {"beta", 0.999f}, {"lambda", 0.01f}, {"epsilon", 1e-8f}},
       {{"do_bias_correction", 1}},
       {},
       "w *= 1 - lr lambda, then Adam's step without the L2 term"},
      {"LambOptimizer", A::kLamb,
       {"Moment_1", "Moment_2"},
       {{"alpha", 0.9f},
        {"beta", 0.999f},
        {"lambda", 0.f},
        {"epsilon", 1e-6f},
        {"ratio_min", -INFINITY},
        {"ratio_max", INFINITY}},
       {{"do_bias_correction", 0}},
       {},
       "m, v as Adam; r = (m / bc1) / (sqrt(v / bc2) + epsilon) + lambda w; w -= lr clamp(|w| / |r|, ratio_min, ratio_max) r"},
      {"AdagradOptimizer", A::kAdagrad,
       {"Sum"},
       {{"lr_decay", 0.f}, {"lambda", 0.f}, {"epsilon", 1e-10f}},
       {},
       {{"initial_accumulator_value", 0.f}},
       "g += lambda w; s += g g; w -= lr / (1 + (t - 1) lr_decay) g / (sqrt(s) + epsilon)"},
  };
  return specs;
}

const OptimizerSpec* find_optimizer_spec(const std::string& name) {
  for (const auto& s : optimizer_specs())
    if (s.name == name) return &s;
  return nullptr;
}

bool OptimizerSpec::has_float(const std::string& attr) const {
  for (const auto& a : float_attrs)
    if (a.name == attr) return true;
  return false;
}

bool OptimizerSpec::has_int(const std::string& attr) const {
  for (const auto& a : int_attrs)
    if (a.name == attr) return true;
  return false;
}

float OptimizerSpec::float_default(const std::string& attr) const {
  for (const auto& a : float_attrs)
    if (a.name == attr) return a.dflt;
  throw_error<InvalidArgument>(name, " has no float attribute '", attr, "' (it has: ", attr_list(), ")");
}

int64_t OptimizerSpec::int_default(const std::string& attr) const {
  for (const auto& a : int_attrs)
    if (a.name == attr) return a.dflt;
  throw_error<InvalidArgument>(name, " has no integer attribute '", attr, "' (it has: ", attr_list(), ")");
}

std::string OptimizerSpec::attr_list() const {
  std::string all;
  auto add = [&](const std::string& n) { all += (all.empty() ? "" : ", ") + n; };
  for (const auto& a : float_attrs) add(a.name);
  for (const auto& a : int_attrs) add(a.name);
  return all.empty() ? "none" : all;
}

}  // namespace onnxtrain::ops
