// Finite-difference checks of the elementwise gradient rules (float64, central differences).
#include "grad_check.h"

using namespace ot_test;

namespace {
GradCheck unary_case(const std::string& op, double lo, double hi, uint32_t seed, std::vector<ir::Attribute> attrs = {}) {
  std::mt19937 rng(seed);
  GradCheck g;
  g.op = op;
  g.inputs = {random_tensor(DType::kFloat64, {3, 4}, rng, lo, hi)};
  g.attrs = std::move(attrs);
  g.seed = seed;
  return g;
}
GradCheck binary_case(const std::string& op, Shape a, Shape b, double lo, double hi, uint32_t seed) {
  std::mt19937 rng(seed);
  GradCheck g;
  g.op = op;
  g.inputs = {random_tensor(DType::kFloat64, a, rng, lo, hi), random_tensor(DType::kFloat64, b, rng, lo, hi)};
  g.seed = seed;
  return g;
}
}  // namespace

TEST(GradElementwise, Add) {
  EXPECT_TRUE(check_gradient(binary_case("Add", {2, 3, 4}, {3, 1}, -1, 1, 1)));
  auto sym = binary_case("Add", {2, 3, 4}, {3, 1}, -1, 1, 2);
  sym.symbolic_shapes = true;  // broadcast reduced at run time (SumToShape)
  EXPECT_TRUE(check_gradient(sym));
  sym.portable = true;  // standard-ONNX reduction
  EXPECT_TRUE(check_gradient(sym));
}
TEST(GradElementwise, Sub) { EXPECT_TRUE(check_gradient(binary_case("Sub", {4, 1}, {3}, -1, 1, 3))); }
TEST(GradElementwise, Mul) { EXPECT_TRUE(check_gradient(binary_case("Mul", {2, 3}, {2, 3}, -1, 1, 4))); }
TEST(GradElementwise, Div) { EXPECT_TRUE(check_gradient(binary_case("Div", {2, 3}, {3}, 0.5, 2, 5))); }
TEST(GradElementwise, Pow) { EXPECT_TRUE(check_gradient(binary_case("Pow", {2, 3}, {1, 3}, 0.5, 2, 6))); }
TEST(GradElementwise, Relu) { EXPECT_TRUE(check_gradient(unary_case("Relu", -1, 1, 7))); }
TEST(GradElementwise, Tanh) { EXPECT_TRUE(check_gradient(unary_case("Tanh", -2, 2, 8))); }
TEST(GradElementwise, Exp) { EXPECT_TRUE(check_gradient(unary_case("Exp", -2, 2, 9))); }
TEST(GradElementwise, Neg) { EXPECT_TRUE(check_gradient(unary_case("Neg", -2, 2, 10))); }
