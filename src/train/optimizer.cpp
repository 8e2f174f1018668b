// Fused optimizer updates. The float32 arithmetic follows torch.optim's order of operations
// (scalars computed in double, then rounded to float) so trajectories track PyTorch closely.
#include "train/optimizer.h"

#include <cmath>
#include <set>

#include "core/parallel.h"

namespace onnxtrain::train {

namespace {

constexpr int64_t kGrain = 16384;

// Applies f(i) over the elements of a float32 or float64 weight.
template <class F>
void for_each_elem(int64_t n, F&& f) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  });
}

template <class T>
T* buf(std::vector<Tensor>& b, size_t k) {
  return b[k].data<T>();
}

class Sgd final : public Optimizer {
 public:
  Sgd() : Optimizer("SGDOptimizer", {}) { defaults_f_ = {{"lambda", 0.f}}; }
  void update(Slot& s, float lr, Tensor& w, const Tensor& g, int64_t) override {
    dispatch_fp(w, [&]<class T>() {
      T* W = w.data<T>();
      const T* G = g.data<T>();
      const T wd = T(s.f["lambda"]), a = T(-double(lr));
      for_each_elem(w.numel(), [&](int64_t i) {
        T d = G[i];
        if (wd != T(0)) d = d + wd * W[i];
        W[i] = W[i] + a * d;
      });
    });
  }
  template <class F>
  static void dispatch_fp(const Tensor& w, F&& f) {
    if (w.dtype() == DType::kFloat32) f.template operator()<float>();
    else if (w.dtype() == DType::kFloat64) f.template operator()<double>();
    else throw_error<NotImplemented>("optimizers update float32 or float64 weights, got ", dtype_name(w.dtype()));
  }
};

template <class F>
void dispatch_fp(const Tensor& w, F&& f) {
  Sgd::dispatch_fp(w, std::forward<F>(f));
}

class Momentum final : public Optimizer {
 public:
  Momentum() : Optimizer("MomentumOptimizer", {"Momentum"}) {
    defaults_f_ = {{"momentum", 0.9f}, {"lambda", 0.f}};
    defaults_i_ = {{"nesterov", 0}};
  }
  void update(Slot& s, float lr, Tensor& w, const Tensor& g, int64_t t) override {
    dispatch_fp(w, [&]<class T>() {
      T* W = w.data<T>();
      const T* G = g.data<T>();
      T* B = buf<T>(s.buffers, 0);
      const T m = T(s.f["momentum"]), wd = T(s.f["lambda"]), a = T(-double(lr));
      const bool nesterov = s.i["nesterov"] != 0, first = t == 1;
      for_each_elem(w.numel(), [&](int64_t i) {
        T d = G[i];
        if (wd != T(0)) d = d + wd * W[i];
        B[i] = first ? d : B[i] * m + d;
        const T u = nesterov ? d + m * B[i] : B[i];
        W[i] = W[i] + a * u;
      });
    });
  }
};

// Hyper-parameters shared by Adam, AdamW and LAMB (attribute names of onnxruntime-training),
// with the bias corrections of step t (1 when do_bias_correction is 0).
struct MomentHyper {
  double b1, b2, wd, eps, bc1, bc2;
  static MomentHyper of(const std::map<std::string, float>& f, const std::map<std::string, int64_t>& i, int64_t t) {
    const double b1 = f.at("alpha"), b2 = f.at("beta");
    const bool bias = i.at("do_bias_correction") != 0;
    return {b1, b2, f.at("lambda"), f.at("epsilon"), bias ? 1.0 - std::pow(b1, double(t)) : 1.0,
            bias ? 1.0 - std::pow(b2, double(t)) : 1.0};
  }
};

class Adam final : public Optimizer {
 public:
  explicit Adam(bool decoupled)
      : Optimizer(decoupled ? "AdamWOptimizer" : "AdamOptimizer", {"Moment_1", "Moment_2"}), decoupled_(decoupled) {
    defaults_f_ = {{"alpha", 0.9f}, {"beta", 0.999f}, {"lambda", decoupled ? 0.01f : 0.f}, {"epsilon", 1e-8f}};
    defaults_i_ = {{"do_bias_correction", 1}};
  }
  void update(Slot& s, float lr, Tensor& w, const Tensor& g, int64_t t) override {
    dispatch_fp(w, [&]<class T>() {
      T* W = w.data<T>();
      const T* G = g.data<T>();
      T* M = buf<T>(s.buffers, 0);
      T* V = buf<T>(s.buffers, 1);
      const auto [b1, b2, wd, eps, bc1, bc2] = MomentHyper::of(s.f, s.i, t);
      const T step_size = T(-(double(lr) / bc1)), bc2_sqrt = T(std::sqrt(bc2));
      const T tb1 = T(b1), tb2 = T(b2), one_b1 = T(1.0 - b1), one_b2 = T(1.0 - b2), teps = T(eps);
      const T decay = T(1.0 - double(lr) * wd), l2 = T(wd);
      const bool decoupled = decoupled_;
      for_each_elem(w.numel(), [&](int64_t i) {
        T gi = G[i];
        if (decoupled) {
          if (wd != 0.0) W[i] = W[i] * decay;
        } else if (wd != 0.0) {
          gi = gi + l2 * W[i];
        }
        M[i] = M[i] * tb1 + one_b1 * gi;
        V[i] = V[i] * tb2 + one_b2 * gi * gi;
        const T denom = std::sqrt(V[i]) / bc2_sqrt + teps;
        W[i] = W[i] + step_size * M[i] / denom;
      });
    });
  }

 private:
  bool decoupled_;
};

class Lamb final : public Optimizer {
 public:
  Lamb() : Optimizer("LambOptimizer", {"Moment_1", "Moment_2"}) {
    defaults_f_ = {{"alpha", 0.9f}, {"beta", 0.999f}, {"lambda", 0.f}, {"epsilon", 1e-6f},
                   {"ratio_min", -INFINITY}, {"ratio_max", INFINITY}};
    defaults_i_ = {{"do_bias_correction", 0}};
  }
  void update(Slot& s, float lr, Tensor& w, const Tensor& g, int64_t t) override {
    dispatch_fp(w, [&]<class T>() {
      T* W = w.data<T>();
      const T* G = g.data<T>();
      T* M = buf<T>(s.buffers, 0);
      T* V = buf<T>(s.buffers, 1);
      const auto [b1, b2, wd, eps, bc1, bc2] = MomentHyper::of(s.f, s.i, t);
      const int64_t n = w.numel();
      std::vector<T> r(static_cast<size_t>(n));
      double wn = 0, rn = 0;
      for (int64_t i = 0; i < n; ++i) {
        M[i] = M[i] * T(b1) + T(1.0 - b1) * G[i];
        V[i] = V[i] * T(b2) + T(1.0 - b2) * G[i] * G[i];
        const T ri = T((double(M[i]) / bc1) / (std::sqrt(double(V[i]) / bc2) + eps) + wd * double(W[i]));
        r[size_t(i)] = ri;
        wn += double(W[i]) * double(W[i]);
        rn += double(ri) * double(ri);
      }
      wn = std::sqrt(wn);
      rn = std::sqrt(rn);
      double ratio = (wn > 0 && rn > 0) ? wn / rn : 1.0;
      ratio = std::min<double>(std::max<double>(ratio, s.f["ratio_min"]), s.f["ratio_max"]);
      const T a = T(-double(lr) * ratio);
      for_each_elem(n, [&](int64_t i) { W[i] = W[i] + a * r[size_t(i)]; });
    });
  }
};

class Adagrad final : public Optimizer {
 public:
  Adagrad() : Optimizer("AdagradOptimizer", {"Sum"}) {
    defaults_f_ = {{"lr_decay", 0.f}, {"lambda", 0.f}, {"epsilon", 1e-10f}, {"initial_accumulator_value", 0.f}};
  }
  void update(Slot& s, float lr, Tensor& w, const Tensor& g, int64_t t) override {
    dispatch_fp(w, [&]<class T>() {
      T* W = w.data<T>();
      const T* G = g.data<T>();
      T* S = buf<T>(s.buffers, 0);
      if (t == 1 && s.f["initial_accumulator_value"] != 0.f)
        for (int64_t i = 0; i < w.numel(); ++i) S[i] = T(s.f["initial_accumulator_value"]);
      const double clr = double(lr) / (1.0 + double(t - 1) * s.f["lr_decay"]);
      const T a = T(-clr), eps = T(s.f["epsilon"]), wd = T(s.f["lambda"]);
      for_each_elem(w.numel(), [&](int64_t i) {
        T gi = G[i];
        if (wd != T(0)) gi = gi + wd * W[i];
        S[i] = S[i] + gi * gi;
        const T std_ = std::sqrt(S[i]) + eps;
        W[i] = W[i] + a * gi / std_;
      });
    });
  }
};

}  // namespace

const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> n = {"SGDOptimizer",  "MomentumOptimizer", "AdamOptimizer",
                                             "AdamWOptimizer", "LambOptimizer",     "AdagradOptimizer"};
  return n;
}

void Optimizer::init(const std::vector<std::string>& names, const std::vector<const Tensor*>& weights,
                     const OptimizerConfig& cfg) {
  auto check_known = [&](const std::string& key, bool is_int, const std::string& where) {
    const bool known = is_int ? defaults_i_.count(key) > 0 : defaults_f_.count(key) > 0;
    if (!known) {
      std::string all;
      for (const auto& [k, v] : is_int ? std::map<std::string, float>() : defaults_f_) all += (all.empty() ? "" : ", ") + k;
      for (const auto& [k, v] : is_int ? defaults_i_ : std::map<std::string, int64_t>()) all += (all.empty() ? "" : ", ") + k;
      throw_error<InvalidArgument>(where, ": ", name_, " has no ", is_int ? "integer" : "float", " attribute '", key,
                                   "' (it has: ", all.empty() ? "none" : all, ")");
    }
  };
  for (const auto& [k, v] : cfg.attrs) check_known(k, false, "optimizer_attributes");
  for (const auto& [k, v] : cfg.int_attrs) check_known(k, true, "optimizer_int_attributes");
  std::set<std::string> known(names.begin(), names.end());
  for (const auto& [wname, m] : cfg.weight_attrs) {
    if (!known.count(wname))
      throw_error<InvalidArgument>("optimizer_attributes_map: '", wname, "' is not a trained weight");
    for (const auto& [k, v] : m) check_known(k, false, "optimizer_attributes_map['" + wname + "']");
  }
  for (const auto& [wname, m] : cfg.weight_int_attrs) {
    if (!known.count(wname))
      throw_error<InvalidArgument>("optimizer_int_attributes_map: '", wname, "' is not a trained weight");
    for (const auto& [k, v] : m) check_known(k, true, "optimizer_int_attributes_map['" + wname + "']");
  }
  slots_.clear();
  for (size_t i = 0; i < names.size(); ++i) {
    Slot s;
    s.name = names[i];
    s.f = defaults_f_;
    s.i = defaults_i_;
    for (const auto& [k, v] : cfg.attrs) s.f[k] = v;
    for (const auto& [k, v] : cfg.int_attrs) s.i[k] = v;
    if (auto it = cfg.weight_attrs.find(names[i]); it != cfg.weight_attrs.end())
      for (const auto& [k, v] : it->second) s.f[k] = v;
    if (auto it = cfg.weight_int_attrs.find(names[i]); it != cfg.weight_int_attrs.end())
      for (const auto& [k, v] : it->second) s.i[k] = v;
    const Tensor& w = *weights[i];
    if (w.dtype() != DType::kFloat32 && w.dtype() != DType::kFloat64)
      throw_error<NotImplemented>("weight '", names[i], "' has element type ", dtype_name(w.dtype()),
                                  "; optimizers update float32 or float64 master weights");
    for (size_t b = 0; b < buffer_names_.size(); ++b) s.buffers.push_back(Tensor::zeros(w.dtype(), w.shape()));
    slots_.push_back(std::move(s));
  }
}

void Optimizer::step(float lr, const std::vector<Tensor*>& weights, const std::vector<const Tensor*>& grads) {
  if (weights.size() != slots_.size() || grads.size() != slots_.size())
    throw_error<InvalidArgument>(name_, ": ", weights.size(), " weights and ", grads.size(), " gradients for ",
                                 slots_.size(), " trained weights");
  if (!std::isfinite(lr)) throw_error<InvalidArgument>(name_, ": learning rate ", lr, " is not finite");
  ++step_;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (weights[i]->shape() != grads[i]->shape() || weights[i]->dtype() != grads[i]->dtype())
      throw_error<InvalidArgument>(name_, ": gradient of '", slots_[i].name, "' is ", grads[i]->describe(),
                                   ", the weight is ", weights[i]->describe());
    update(slots_[i], lr, *weights[i], *grads[i], step_);
  }
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, Tensor>> r;
  for (const auto& s : slots_)
    for (size_t b = 0; b < s.buffers.size(); ++b) r.emplace_back(buffer_names_[b] + "_" + s.name, s.buffers[b]);
  return r;
}

void Optimizer::load_state(const std::vector<std::pair<std::string, Tensor>>& state) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [k, v] : state) by_name[k] = &v;
  for (auto& s : slots_)
    for (size_t b = 0; b < s.buffers.size(); ++b) {
      const std::string key = buffer_names_[b] + "_" + s.name;
      auto it = by_name.find(key);
      if (it == by_name.end()) throw_error<InvalidArgument>("optimizer state '", key, "' is missing");
      if (it->second->shape() != s.buffers[b].shape() || it->second->dtype() != s.buffers[b].dtype())
        throw_error<InvalidArgument>("optimizer state '", key, "' is ", it->second->describe(), ", expected ",
                                     s.buffers[b].describe());
      s.buffers[b].copy_from(*it->second);
    }
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, const std::vector<std::string>& names,
                                          const std::vector<const Tensor*>& weights) {
  std::unique_ptr<Optimizer> o;
  if (cfg.name == "SGDOptimizer") o = std::make_unique<Sgd>();
  else if (cfg.name == "MomentumOptimizer") o = std::make_unique<Momentum>();
  else if (cfg.name == "AdamOptimizer") o = std::make_unique<Adam>(false);
  else if (cfg.name == "AdamWOptimizer") o = std::make_unique<Adam>(true);
  else if (cfg.name == "LambOptimizer") o = std::make_unique<Lamb>();
  else if (cfg.name == "AdagradOptimizer") o = std::make_unique<Adagrad>();
  else {
    std::string all;
    for (const auto& n : optimizer_names()) all += (all.empty() ? "" : ", ") + n;
    throw_error<InvalidArgument>("training_optimizer_name: unknown optimizer '", cfg.name, "' (known: ", all, ")");
  }
  o->init(names, weights, cfg);
  return o;
}

double global_norm(const std::vector<const Tensor*>& grads) {
  double total = 0;
  for (const Tensor* g : grads) {
    if (g->dtype() == DType::kFloat32) {
      const float* p = g->data<float>();
      for (int64_t i = 0; i < g->numel(); ++i) total += double(p[i]) * double(p[i]);
    } else if (g->dtype() == DType::kFloat64) {
      const double* p = g->data<double>();
      for (int64_t i = 0; i < g->numel(); ++i) total += p[i] * p[i];
    }
  }
  return std::sqrt(total);
}

double clip_grad_norm(const std::vector<Tensor*>& grads, double max_norm) {
  std::vector<const Tensor*> c(grads.begin(), grads.end());
  const double norm = global_norm(c);
  const double coef = max_norm / (norm + 1e-6);  // torch.nn.utils.clip_grad_norm_
  if (coef < 1.0)
    for (Tensor* g : grads) {
      if (g->dtype() == DType::kFloat32) {
        float* p = g->data<float>();
        const float c32 = float(coef);
        for (int64_t i = 0; i < g->numel(); ++i) p[i] *= c32;
      } else if (g->dtype() == DType::kFloat64) {
        double* p = g->data<double>();
        for (int64_t i = 0; i < g->numel(); ++i) p[i] *= coef;
      }
    }
  return norm;
}

}  // namespace onnxtrain::train
