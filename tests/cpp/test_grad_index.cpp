// Finite-difference tests of the gradient rules of the indexing and image operators (Gather,
// GatherElements, GatherND, ScatterND, ScatterElements, OneHot, Where, Resize), and of the
// GatherGrad / GatherElementsGrad / GatherNDGrad / ResizeGrad kernels against a naive reference.
#include "grad_test_util.h"

using namespace ot_test;

namespace {

Tensor f32s(const Shape& s, const std::vector<float>& v) { return Tensor::from_vector<float>(s, v); }

}  // namespace

// ---------------------------------------------------------------- gathers
GRAD_COVERS(GradIndex, Gather, "Gather");
TEST(GradIndex, Gather) {
  std::mt19937 rng(21);
  const Tensor x = f64({5, 3, 4}, rng);
  const Tensor dup = i64s({2, 3}, {0, -1, 4, 4, 2, 0});  // repeated and negative indices accumulate
  for (int64_t opset : {11, 13, 16}) {
    for (int64_t axis : {0, 1, -1}) {
      const Tensor idx = axis == 0 ? dup : i64s({2, 2}, {1, -1, 1, 0});
      GradCheck s = spec("Gather", {x, idx}, {attr_int("axis", axis)}, opset, 21);
      if (opset >= 16) expect_gradient_both(s, true);  // portable: ScatterElements with reduction add
      else expect_gradient(s, true);
    }
  }
  expect_gradient_both(spec("Gather", {x, Tensor::scalar<int64_t>(-2)}, {attr_int("axis", 1)}, 16, 21), true);  // scalar index
  expect_gradient(spec("Gather", {x, Tensor::from_vector<int32_t>({3}, {3, 3, 0})}, {}, 13, 21));             // int32 indices
  // Before opset 16 the portable form falls back to GatherGrad (no scatter reduction).
  GradCheck old = spec("Gather", {x, dup}, {}, 13, 21);
  old.portable = true;
  EXPECT_EQ(custom_ops(old), std::vector<std::string>{"GatherGrad"});
}

GRAD_COVERS(GradIndex, GatherElements, "GatherElements");
TEST(GradIndex, GatherElements) {
  std::mt19937 rng(22);
  const Tensor x = f64({3, 4}, rng);
  for (int64_t opset : {13, 16}) {  // GatherElementsGrad, then ScatterElements with reduction add
    expect_gradient(spec("GatherElements", {x, i64s({2, 4}, {0, 2, 2, -1, 0, 0, 1, 2})}, {attr_int("axis", 0)}, opset, 22), true);
    expect_gradient(spec("GatherElements", {x, i64s({3, 2}, {3, 3, 0, -4, 1, 2})}, {attr_int("axis", -1)}, opset, 22), true);
  }
  GradCheck p = spec("GatherElements", {x, i64s({1, 3}, {0, 0, 1})}, {attr_int("axis", 1)}, 16, 22);
  expect_gradient_both(p, true);
}

GRAD_COVERS(GradIndex, GatherND, "GatherND");
TEST(GradIndex, GatherND) {
  std::mt19937 rng(23);
  const Tensor x = f64({3, 4, 2}, rng);
  for (int64_t opset : {13, 16}) {
    expect_gradient(spec("GatherND", {x, i64s({3, 2}, {0, 1, 2, -1, 0, 1})}, {}, opset, 23), true);  // repeated tuple
    expect_gradient(spec("GatherND", {x, i64s({2, 1}, {2, 2})}, {}, opset, 23), true);
    // batch_dims = 1: tuples address X[b]; no standard scatter does batches (GatherNDGrad).
    expect_gradient(spec("GatherND", {x, i64s({3, 2, 1}, {0, 3, 1, 1, 2, -1})}, {attr_int("batch_dims", 1)}, opset, 23),
                    true);
  }
  expect_gradient_both(spec("GatherND", {x, i64s({2, 2}, {0, 1, 0, 1})}, {}, 16, 23), true);
}

// ---------------------------------------------------------------- scatters
GRAD_COVERS(GradIndex, ScatterND, "ScatterND");
TEST(GradIndex, ScatterND) {
  std::mt19937 rng(24);
  const Tensor x = f64({4, 3}, rng);
  const Tensor idx = i64s({2, 1}, {2, 0});
  expect_gradient_both(spec("ScatterND", {x, idx, f64({2, 3}, rng)}, {}, 13, 24), true);
  const Tensor idx2 = i64s({3, 2}, {1, 1, 3, 0, 0, 2});
  expect_gradient_both(spec("ScatterND", {x, idx2, f64({3}, rng)}, {}, 16, 24), true);
  // add: duplicates accumulate; mul: dX = g * (U multiplied in), dU = gather(g Y) / U.
  const Tensor dup = i64s({3, 1}, {1, 3, 1});
  expect_gradient_both(spec("ScatterND", {x, dup, f64({3, 3}, rng)}, {attr_string("reduction", "add")}, 16, 24), true);
  Tensor u = random_tensor(DType::kFloat64, {3, 3}, rng, 0.5, 2.0);
  expect_gradient_both(spec("ScatterND", {x, dup, u}, {attr_string("reduction", "mul")}, 16, 24), true);
}

GRAD_COVERS(GradIndex, ScatterElements, "ScatterElements");
TEST(GradIndex, ScatterElements) {
  std::mt19937 rng(25);
  const Tensor x = f64({3, 4}, rng);
  const Tensor idx = i64s({2, 3}, {1, 0, 2, 0, 2, 1});  // unique per column along axis 0
  expect_gradient_both(spec("ScatterElements", {x, idx, f64({2, 3}, rng)}, {attr_int("axis", 0)}, 13, 25), true);
  const Tensor idx1 = i64s({2, 2}, {-1, 0, 2, 1});
  expect_gradient_both(spec("ScatterElements", {x, idx1, f64({2, 2}, rng)}, {attr_int("axis", -1)}, 11, 25), true);
  const Tensor dup = i64s({2, 3}, {1, 1, 2, 1, 1, 2});
  expect_gradient_both(
      spec("ScatterElements", {x, dup, f64({2, 3}, rng)}, {attr_int("axis", 0), attr_string("reduction", "add")}, 16, 25), true);
  Tensor u = random_tensor(DType::kFloat64, {2, 3}, rng, 0.5, 2.0);
  expect_gradient_both(spec("ScatterElements", {x, dup, u}, {attr_int("axis", 0), attr_string("reduction", "mul")}, 16, 25),
                       true);
}

// ---------------------------------------------------------------- OneHot, Where
GRAD_COVERS(GradIndex, OneHot, "OneHot");
TEST(GradIndex, OneHot) {
  std::mt19937 rng(27);
  const Tensor values = Tensor::from_vector<double>({2}, {-0.5, 2.0});
  // Inference does not know the depth: the harness' loss unbroadcasts at run time, which portable
  // mode expresses from opset 13 only.
  for (int64_t opset : {9, 11, 13}) {
    const Tensor idx = i64s({2, 3}, {0, 3, 1, opset >= 11 ? -1 : 2, 7, 2});  // 7: out of range, all off
    for (int64_t axis : {-1, 0, 1}) {
      const GradCheck s = spec("OneHot", {idx, Tensor::scalar<int64_t>(4), values}, {attr_int("axis", axis)}, opset, 27);
      if (opset >= 13) expect_gradient_both(s, true);
      else expect_gradient(s, true);
    }
  }
}

GRAD_COVERS(GradIndex, Where, "Where");
TEST(GradIndex, Where) {
  std::mt19937 rng(28);
  const Tensor cond = Tensor::from_vector<bool>({2, 1, 3}, {true, false, true, false, false, true});
  expect_gradient_both(spec("Where", {cond, f64({2, 4, 3}, rng), f64({3}, rng)}, {}, 16, 28), true);
  expect_gradient(spec("Where", {cond, f64({1, 3}, rng), f64({2, 4, 1}, rng)}, {}, 9, 28));
}

// ---------------------------------------------------------------- Resize
namespace {
struct ResizeCase {
  std::vector<ir::Attribute> attrs;
  Shape x;
  std::vector<float> scales;    // empty: sizes
  std::vector<int64_t> sizes;
  std::vector<float> roi;       // tf_crop_and_resize
};

std::vector<ResizeCase> resize_cases() {
  auto S = [](const char* k, const char* v) { return attr_string(k, v); };
  return {
      {{S("mode", "nearest")}, {1, 2, 3, 4}, {1, 1, 2, 1.5f}, {}, {}},
      {{S("mode", "nearest"), S("coordinate_transformation_mode", "asymmetric"), S("nearest_mode", "floor")},
       {1, 1, 5, 4}, {1, 1, 0.6f, 2}, {}, {}},
      {{S("mode", "nearest"), S("nearest_mode", "ceil"), S("coordinate_transformation_mode", "tf_half_pixel_for_nn")},
       {2, 3, 3}, {}, {2, 3, 5}, {}},
      {{S("mode", "linear")}, {1, 2, 3, 4}, {1, 1, 2, 0.75f}, {}, {}},
      {{S("mode", "linear"), S("coordinate_transformation_mode", "align_corners")}, {1, 1, 4, 3}, {}, {1, 1, 7, 5}, {}},
      {{S("mode", "linear"), S("coordinate_transformation_mode", "pytorch_half_pixel")}, {2, 5}, {1, 2.5f}, {}, {}},
      {{S("mode", "cubic")}, {1, 1, 4, 5}, {1, 1, 1.5f, 0.8f}, {}, {}},
      {{S("mode", "cubic"), attr_int("exclude_outside", 1), attr_float("cubic_coeff_a", -0.5f),
        S("coordinate_transformation_mode", "asymmetric")},
       {1, 1, 3, 4}, {1, 1, 2, 2}, {}, {}},
      {{S("mode", "linear"), S("coordinate_transformation_mode", "tf_crop_and_resize"), attr_float("extrapolation_value", 3)},
       {1, 1, 4, 4}, {}, {1, 1, 5, 3}, {0, 0, -0.2f, 0.3f, 1, 1, 0.9f, 1.4f}},
  };
}

// Default mode (and symbolic shapes); portable mode: interpolation matrices (standard operators)
// except for nearest tf_half_pixel_for_nn rounding up, and shapes unknown: ResizeGrad.
void expect_resize_gradient(GradCheck s) {
  expect_gradient(s, true);
  s.portable = true;
  const std::string mode = s.attrs[0].s, rounding = s.attrs.size() > 1 ? s.attrs[1].s : "";
  const bool expressible = rounding != "ceil";
  if (expressible) expect_gradient(s);
  EXPECT_EQ(custom_ops(s), expressible ? std::vector<std::string>{} : std::vector<std::string>{"ResizeGrad"}) << mode;
  s.symbolic_shapes = true;
  EXPECT_EQ(custom_ops(s), std::vector<std::string>{"ResizeGrad"});
}
}  // namespace

GRAD_COVERS(GradIndex, Resize, "Resize");
TEST(GradIndex, Resize) {
  std::mt19937 rng(29);
  for (int64_t opset : {11, 13}) {
    for (const ResizeCase& k : resize_cases()) {
      const Tensor roi = k.roi.empty() ? (opset < 13 ? f32s({0}, {}) : Tensor()) : f32s({int64_t(k.roi.size())}, k.roi);
      const Tensor scales = k.scales.empty() ? (opset < 13 || !k.sizes.empty() ? f32s({0}, {}) : Tensor())
                                             : f32s({int64_t(k.scales.size())}, k.scales);
      std::vector<Tensor> in{f64(k.x, rng), roi, scales};
      if (!k.sizes.empty()) in.push_back(i64(k.sizes));
      expect_resize_gradient(spec("Resize", in, k.attrs, opset, 29, {0}));
    }
  }
  // Resize-10: X, scales; asymmetric coordinates.
  for (const char* mode : {"nearest", "linear"})
    expect_resize_gradient(
        spec("Resize", {f64({1, 2, 3, 3}, rng), f32s({4}, {1, 1, 2, 0.7f})}, {attr_string("mode", mode)}, 10, 29, {0}));
}

// ---------------------------------------------------------------- backward kernels
// GatherGrad against the adjoint of the forward Gather: random axes, repeated and negative
// indices, float32 and float64, 1 and 2 threads (wide rows split into column chunks).
TEST(GradIndex, GatherGradKernel) {
  const uint32_t seed = 30;
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 30; ++trial) {
    const Shape xs = trial < 4 ? Shape{6, 300} : random_shape(rng, 1, 3, 1, 5);
    const int64_t r = int64_t(xs.size());
    const int64_t axis = int64_t(rng() % size_t(r)) - (trial % 2 ? r : 0);
    const int64_t d = xs[size_t(axis < 0 ? axis + r : axis)];
    const Shape is = random_shape(rng, 0, 2, 1, 4);
    std::vector<int64_t> iv(size_t(onnxtrain::shape_numel(is)));
    std::uniform_int_distribution<int64_t> pick(-d, d - 1);
    for (auto& v : iv) v = pick(rng);
    const Tensor idx = i64s(is, iv);
    const std::vector<ir::Attribute> attrs{attr_int("axis", axis)};
    const Shape ys = run_node("Gather", {f64(xs, rng), idx}, attrs)[0].shape();
    for (DType dt : {DType::kFloat64, DType::kFloat32}) {
      const Tensor dy = random_tensor(dt, ys, rng);
      const Tensor dx = run_grad_kernel("GatherGrad", {i64(xs), idx, dy}, attrs, trial % 2 ? 2 : 1);
      EXPECT_TRUE(all_close(dx, xs, adjoint_reference("Gather", xs, {Tensor(), idx}, attrs, dy), 1e-6, 1e-6))
          << seed_msg(seed, trial) << " x " << onnxtrain::shape_to_string(xs) << " axis " << axis;
    }
  }
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_grad_kernel("GatherGrad", {i64({3, 2}), i64({3}), random_tensor(DType::kFloat32, {1, 2}, rng)}); },
      "GatherGrad", "index 3 is out of range");
}

TEST(GradIndex, GatherElementsNDGradKernels) {
  const uint32_t seed = 31;
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    const Shape xs = random_shape(rng, 2, 3, 2, 4);
    const int64_t r = int64_t(xs.size());
    // GatherElements: indices of X's rank, dims within X's.
    const int64_t axis = int64_t(rng() % size_t(r));
    Shape is = xs;
    is[0] = 1 + int64_t(rng() % size_t(xs[0]));
    is[size_t(axis)] = 1 + int64_t(rng() % 5);
    std::vector<int64_t> iv(size_t(onnxtrain::shape_numel(is)));
    for (auto& v : iv) v = int64_t(rng() % size_t(2 * xs[size_t(axis)])) - xs[size_t(axis)];
    const Tensor idx = i64s(is, iv);
    const std::vector<ir::Attribute> ea{attr_int("axis", axis)};
    const Tensor dy = random_tensor(DType::kFloat64, is, rng);
    EXPECT_TRUE(all_close(run_grad_kernel("GatherElementsGrad", {i64(xs), idx, dy}, ea),
                          xs, adjoint_reference("GatherElements", xs, {Tensor(), idx}, ea, dy), 1e-9, 1e-9))
        << seed_msg(seed, trial) << " GatherElements x " << onnxtrain::shape_to_string(xs) << " axis " << axis;
    // GatherND with batch_dims 0 or 1.
    const int64_t b = trial % 2;
    const int64_t k = 1 + int64_t(rng() % size_t(r - b));
    Shape ns(xs.begin(), xs.begin() + b);
    ns.push_back(1 + int64_t(rng() % 3));
    ns.push_back(k);
    std::vector<int64_t> nv(size_t(onnxtrain::shape_numel(ns)));
    for (size_t t = 0; t < nv.size(); ++t) nv[t] = int64_t(rng() % size_t(xs[size_t(b) + t % size_t(k)]));
    const Tensor nidx = i64s(ns, nv);
    const std::vector<ir::Attribute> na{attr_int("batch_dims", b)};
    const Shape ys = run_node("GatherND", {f64(xs, rng), nidx}, na)[0].shape();
    const Tensor ndy = random_tensor(DType::kFloat32, ys, rng);
    EXPECT_TRUE(all_close(run_grad_kernel("GatherNDGrad", {i64(xs), nidx, ndy}, na, 2), xs,
                          adjoint_reference("GatherND", xs, {Tensor(), nidx}, na, ndy), 1e-6, 1e-6))
        << seed_msg(seed, trial) << " GatherND x " << onnxtrain::shape_to_string(xs) << " batch_dims " << b;
  }
}

// ResizeGrad against the adjoint of the forward Resize (every case above, opset 13 and 10).
TEST(GradIndex, ResizeGradKernel) {
  const uint32_t seed = 32;
  std::mt19937 rng(seed);
  int trial = 0;
  for (const ResizeCase& k : resize_cases()) {
    const Tensor roi = f32s({int64_t(k.roi.size())}, k.roi);
    const Tensor scales = f32s({int64_t(k.scales.size())}, k.scales);
    std::vector<Tensor> in{Tensor(), roi, scales};
    if (!k.sizes.empty()) in.push_back(i64(k.sizes));
    in[0] = f64(k.x, rng);
    const Shape ys = run_node("Resize", in, k.attrs, opset_options(13))[0].shape();
    for (DType dt : {DType::kFloat64, DType::kFloat32}) {
      const Tensor dy = random_tensor(dt, ys, rng);
      std::vector<Tensor> gin{dy, roi, scales, k.sizes.empty() ? Tensor() : i64(k.sizes), i64(k.x)};
      std::vector<ir::Attribute> attrs = k.attrs;
      attrs.push_back(attr_int("forward_opset", 13));
      const Tensor dx = run_grad_kernel("ResizeGrad", gin, attrs, trial++ % 2 ? 2 : 1);
      EXPECT_TRUE(all_close(dx, k.x, adjoint_reference("Resize", k.x, in, k.attrs, dy, 13), 1e-5, 1e-5))
          << seed_msg(seed, trial) << " x " << onnxtrain::shape_to_string(k.x);
    }
  }
  // Larger, multi-threaded: bilinear 2x on [2, 3, 6, 7] (inner blocks and last-axis folds).
  const std::vector<ir::Attribute> lin{attr_string("mode", "linear")};
  const Tensor scales = f32s({4}, {1, 1, 2, 2});
  const Tensor dy = random_tensor(DType::kFloat32, {2, 3, 12, 14}, rng);
  std::vector<ir::Attribute> attrs = lin;
  attrs.push_back(attr_int("forward_opset", 13));
  const Tensor dx = run_grad_kernel("ResizeGrad", {dy, Tensor(), scales, Tensor(), i64({2, 3, 6, 7})}, attrs, 2);
  EXPECT_TRUE(all_close(dx, {2, 3, 6, 7}, adjoint_reference("Resize", {2, 3, 6, 7}, {Tensor(), Tensor(), scales}, lin, dy, 13),
                        1e-5, 1e-5));
  // Resize-10 layout: dY, scales, shape(X).
  const std::vector<ir::Attribute> near10{attr_string("mode", "nearest"), attr_int("forward_opset", 10)};
  const Tensor s10 = f32s({2}, {0.6f, 2});
  const Tensor dy10 = random_tensor(DType::kFloat64, {3, 8}, rng);
  EXPECT_TRUE(all_close(run_grad_kernel("ResizeGrad", {dy10, s10, i64({5, 4})}, near10), {5, 4},
                        adjoint_reference("Resize", {5, 4}, {Tensor(), s10}, {attr_string("mode", "nearest")}, dy10, 10),
                        1e-9, 1e-9));
}
