// Optimizers: fused updates over all trained weights (fp32 master weights), with the attribute
// names of onnxruntime-training (alpha = beta1, beta = beta2, lambda = weight decay, ...).
//
//   SGDOptimizer       w -= lr g
//   MomentumOptimizer  b = momentum b + g (b = g at the first step); g' = nesterov ? g + momentum b : b;
//                      w -= lr g'                                 (torch.optim.SGD, dampening 0)
//   AdamOptimizer      g' = g + lambda w; m = alpha m + (1-alpha) g'; v = beta v + (1-beta) g'^2;
//                      w -= lr/(1-alpha^t) m / (sqrt(v)/sqrt(1-beta^t) + eps)   (torch.optim.Adam)
//   AdamWOptimizer     w *= 1 - lr lambda, then the Adam update of g             (torch.optim.AdamW)
//   LambOptimizer      r = m^/(sqrt(v^)+eps) + lambda w; w -= lr (|w|/|r|) r    (LAMB, You et al.)
//   AdagradOptimizer   s += g^2; w -= lr/(1+(t-1) lr_decay) g/(sqrt(s)+eps)      (torch.optim.Adagrad)
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "onnxtrain/tensor.h"

namespace onnxtrain::train {

/// Hyper-parameters: global values plus per-weight overrides (optimizer_attributes_map).
struct OptimizerConfig {
  std::string name = "SGDOptimizer";
  std::map<std::string, float> attrs;
  std::map<std::string, int64_t> int_attrs;
  std::map<std::string, std::map<std::string, float>> weight_attrs;
  std::map<std::string, std::map<std::string, int64_t>> weight_int_attrs;
};

/// Names accepted as OptimizerConfig::name.
const std::vector<std::string>& optimizer_names();

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// One update of every weight from its gradient. `lr` is this step's learning rate.
  void step(float lr, const std::vector<Tensor*>& weights, const std::vector<const Tensor*>& grads);
  /// Optimizer state tensors (moments...) by name, for checkpoints.
  std::vector<std::pair<std::string, Tensor>> state() const;
  /// Restores state saved by state(); throws InvalidArgument naming a missing or mismatched tensor.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state);
  int64_t step_count() const { return step_; }
  void set_step_count(int64_t s) { step_ = s; }
  const std::string& name() const { return name_; }

 protected:
  struct Slot {
    std::string name;
    std::vector<Tensor> buffers;  // per-optimizer state (moments...), same shape as the weight
    std::map<std::string, float> f;
    std::map<std::string, int64_t> i;
  };
  Optimizer(std::string name, std::vector<std::string> buffer_names) : name_(std::move(name)), buffer_names_(std::move(buffer_names)) {}
  /// Updates one weight (float32 or float64).
  virtual void update(Slot& s, float lr, Tensor& w, const Tensor& g, int64_t t) = 0;

 public:
  /// Prepares per-weight state; called once with the weights' names and shapes.
  void init(const std::vector<std::string>& names, const std::vector<const Tensor*>& weights,
            const OptimizerConfig& cfg);

 protected:
  std::string name_;
  std::vector<std::string> buffer_names_;  // e.g. {"Moment_1", "Moment_2"}
  std::vector<Slot> slots_;
  std::map<std::string, float> defaults_f_;
  std::map<std::string, int64_t> defaults_i_;
  int64_t step_ = 0;
};

/// Creates the optimizer; throws InvalidArgument naming an unknown optimizer or attribute.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, const std::vector<std::string>& names,
                                          const std::vector<const Tensor*>& weights);

/// Global L2 norm of the gradients (float64 accumulation).
double global_norm(const std::vector<const Tensor*>& grads);
/// Scales gradients in place by max_norm / norm when norm > max_norm; returns the norm.
double clip_grad_norm(const std::vector<Tensor*>& grads, double max_norm);

}  // namespace onnxtrain::train
