// Gradients of ai.onnx opset 18's operators kept in graphs lowered to 17 (ir/opset_lower.h):
// Col2Im (finite differences), ScatterElements / ScatterND with reduction max and min (finite
// differences away from ties; ties split as torch's scatter_reduce amax / amin with include_self),
// Reduce* with axes as input 1 at 17, and the Bitwise operators declared zero-gradient.
#include "grad_test_util.h"

using namespace ot_test;

GRAD_COVERS(GradOpset18, Col2Im, "Col2Im");
TEST(GradOpset18, Col2Im) {
  std::mt19937 rng(1801);
  // [N, C K, L]: 2-D image 4x5, block 2x2, pads, strides, dilations (L = 2 * 2 with these).
  const std::vector<ir::Attribute> at{attr_ints("dilations", {1, 2}), attr_ints("pads", {1, 0, 0, 1}),
                                      attr_ints("strides", {2, 2})};
  expect_gradient_both(
      spec("Col2Im", {f64({2, 3 * 4, 2 * 2}, rng), i64s({2}, {4, 5}), i64s({2}, {2, 2})}, at, 17, 1801));
  // 1-D, overlapping blocks (each image element receives several columns).
  expect_gradient_both(spec("Col2Im", {f64({1, 2 * 3, 4}, rng), i64s({1}, {6}), i64s({1}, {3})}, {}, 17, 1801));
}

GRAD_COVERS(GradOpset18, ScatterMaxMin, "ScatterElements", "ScatterND");
TEST(GradOpset18, ScatterMaxMin) {
  std::mt19937 rng(1802);
  // Distinct values (no ties): the gradient goes to the winner of each position.
  const Tensor x = f64({3, 4}, rng);
  const Tensor dup = i64s({2, 3}, {1, 1, 2, 1, 0, 2});
  for (const char* red : {"max", "min"}) {
    expect_gradient_both(spec("ScatterElements", {x, dup, f64({2, 3}, rng)},
                              {attr_int("axis", 0), attr_string("reduction", red)}, 17, 1802));
    expect_gradient_both(
        spec("ScatterND", {x, i64s({3, 1}, {1, 2, 1}), f64({3, 4}, rng)}, {attr_string("reduction", red)}, 17, 1802));
  }
}

TEST(GradOpset18, ScatterMaxTiesSplitAsTorch) {
  // x = [1, 5], updates [5, 5] both at position 1: Y[1] = 5, tied three ways (x[1] and both
  // updates): each gets 1/3 of the gradient; position 0 passes its gradient to x[0]. (torch:
  // scatter_reduce(0, [1, 1], [5, 5], "amax", include_self=True).)
  ir::Model m;
  m.ir_version = 8;
  m.opsets[""] = 17;
  m.graph = std::make_shared<ir::Graph>();
  m.graph->nodes = {make_node("ScatterElements", {"x", "i", "u"}, {"y"}, {attr_string("reduction", "max")}),
                    make_node("ReduceSum", {"y"}, {"loss"}, {attr_int("keepdims", 0)})};
  m.graph->inputs = {value_info("x", DType::kFloat64, {2}), value_info("u", DType::kFloat64, {2})};
  m.graph->initializers.emplace_back("i", i64s({2}, {1, 1}));
  m.graph->outputs = {value_info("loss", DType::kFloat64)};
  const ir::Model g = onnxtrain::autodiff::build_gradient_model(m, {"loss"}, {"x", "u"}, "loss");
  const std::vector<Tensor> out =
      run_model(g, {Tensor::from_vector<double>({2}, {1, 5}), Tensor::from_vector<double>({2}, {5, 5})});
  size_t k = 0;
  for (const auto& v : g.graph->outputs) {
    if (v.name == "x_grad") {
      EXPECT_TRUE(all_close(out[k], {2}, {1, 1.0 / 3}));
    } else if (v.name == "u_grad") {
      EXPECT_TRUE(all_close(out[k], {2}, {1.0 / 3, 1.0 / 3}));
    }
    ++k;
  }
}

GRAD_COVERS(GradOpset18, ReduceWithAxesInput, "ReduceMax", "ReduceMin", "ReduceProd", "ReduceLogSumExp");
TEST(GradOpset18, ReduceWithAxesInput) {
  std::mt19937 rng(1803);
  // At 17 a Reduce* with input 1 is opset 18's form (constant axes here; computed ones: the Python tests).
  for (const char* op : {"ReduceMax", "ReduceMin", "ReduceProd", "ReduceLogSumExp"})
    for (int64_t keep : {0, 1})
      expect_gradient_both(spec(op, {f64({3, 4, 2}, rng), i64s({2}, {-1, 1})}, {attr_int("keepdims", keep)}, 17, 1803));
}

GRAD_COVERS(GradOpset18, BitwiseAreZeroGradient, "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot");
TEST(GradOpset18, BitwiseAreZeroGradient) {
  // Integer operands: x cast (a path that carries no gradient either).
  const ir::Node to_i32 = make_node("Cast", {"x"}, {"i"}, {attr_int("to", int64_t(DType::kInt32))});
  const std::pair<std::string, Tensor> three{"three", Tensor::scalar<int32_t>(3)};
  uint32_t seed = 1804;
  for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"})
    EXPECT_TRUE(check_zero_gradient({op, {"i", "three"}, {three}, {to_i32}, {}, 17, 1, {3, 4}, true, seed++})) << op;
  EXPECT_TRUE(check_zero_gradient({"BitwiseNot", {"i"}, {}, {to_i32}, {}, 17, 1, {3, 4}, true, seed++}));
}
