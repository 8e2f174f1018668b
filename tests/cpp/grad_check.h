// Finite-difference checks of gradient rules: the gradient graph built by the autodiff builder
// is compared with central differences of the forward graph, in float64 where the operator allows.
#pragma once

#include <map>

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

/// Declares, beside a test, that Suite.Name checks the gradients of `ops` ("Op", or "domain.Op"
/// outside the default domain). GradCoverage fails for a rule no declared test covers.
#define GRAD_COVERS(suite, name, ...) \
  [[maybe_unused]] static const bool grad_covers_##suite##_##name = ::ot_test::declare_coverage(#suite "." #name, {__VA_ARGS__})
bool declare_coverage(const std::string& test, std::vector<std::string> ops);
/// Every declaration: test -> the operators it covers.
const std::map<std::string, std::vector<std::string>>& declared_coverage();

/// An operator declared zero-gradient (the rule table's t.zero): a float64 graph input "x" reaches
/// the loss through the node and directly, loss = sum(x) + sum(Cast<double>(y0)).
struct ZeroGradCheck {
  std::string op;
  std::vector<std::string> inputs;                   ///< "x", a name from `consts` or `pre`, "" (omitted)
  std::vector<std::pair<std::string, Tensor>> consts{};  ///< initializers
  std::vector<ir::Node> pre{};                        ///< nodes deriving inputs from x (a mask, a cast, a shape)
  std::vector<ir::Attribute> attrs{};
  int64_t opset = 17;
  size_t num_outputs = 1;
  Shape x_shape{3, 4};
  bool has_kernel = true;  ///< also run the forward node (false: the gradient graph alone, pruned of it)
  uint32_t seed = 0;       ///< data seed, printed on failure
};

/// Checks that the rule table declares `op` zero-gradient, that missing_rules() does not list it,
/// that the gradient graph builds, survives serialization and runs, and that x's gradient is
/// exactly ones: nothing flows back through the node.
::testing::AssertionResult check_zero_gradient(const ZeroGradCheck& spec);

}  // namespace ot_test
