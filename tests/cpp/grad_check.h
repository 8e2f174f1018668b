// Finite-difference checks of gradient rules: the gradient graph built by the autodiff builder
// is compared with central differences of the forward graph, in float64 where the operator allows.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace ot_test {

struct GradCheck {
  std::string op;
  std::vector<Tensor> inputs;         ///< undefined Tensor = omitted optional input
  std::vector<ir::Attribute> attrs;
  int64_t opset = 17;
  std::string domain;
  size_t num_outputs = 1;
  std::vector<size_t> outputs_in_loss{0};  ///< outputs combined into the scalar loss
  std::vector<size_t> wrt;            ///< differentiated inputs (others become constants); empty = all float inputs
  double eps = 1e-6;                  ///< central-difference step
  double rtol = 1e-5, atol = 1e-7;
  uint32_t seed = 0;                  ///< printed on failure (the caller's data seed)
  bool portable = false;
  bool symbolic_shapes = false;       ///< declare inputs with symbolic dims (exercises run-time unbroadcasting)
};

/// The model check_gradient differentiates: the node, inputs `wrt` as graph inputs (the others as
/// initializers), loss = sum_k sum(y_k * weights_k) over spec.outputs_in_loss.
ir::Model forward_model(const GradCheck& spec, const std::vector<size_t>& wrt, const std::vector<Tensor>& weights);

/// Checks d loss / d input against central differences, once with all `wrt` inputs requiring
/// gradients together and once for each alone. loss = sum_k sum(y_k * r_k), r_k random.
::testing::AssertionResult check_gradient(const GradCheck& spec);

}  // namespace ot_test
