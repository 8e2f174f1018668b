// Finite-difference tests of the gradient rules of the shape and data-movement operators
// (Reshape family, Transpose, Identity, Expand, Tile, Concat, Split, Slice, Pad, Trilu,
// DepthToSpace, SpaceToDepth, Range) in every opset form, zero-gradient declarations of the shape
// queries and generators, and the SliceGrad / PadGrad kernels against a naive reference.
#include "grad_test_util.h"

using namespace ot_test;

// ---------------------------------------------------------------- reshaping
GRAD_COVERS(GradShape, Reshape, "Reshape");
TEST(GradShape, Reshape) {
  std::mt19937 rng(1);
  // 5+: the shape input (0 copies, -1 infers); 14: allowzero. (Reshape-1..4: ReshapeAttribute.)
  expect_gradient_both(spec("Reshape", {f64({2, 3, 4}, rng), i64({0, -1, 2})}, {}, 13, 1), true);
  expect_gradient(spec("Reshape", {f64({2, 3}, rng), i64({3, 2})}, {attr_int("allowzero", 1)}, 14, 1), true);
}

// Reshape-1..4 take the shape as an attribute. The finite-difference harness needs Mul and Expand
// (opset 8+), so this differentiates loss = Reshape(x [1, 1, 1], shape = [1]) at opset 4: the
// gradient is Reshape-4 with the shape attribute, and 1.
TEST(GradShape, ReshapeAttribute) {
  ir::Model m;
  m.ir_version = 8;
  m.opsets[""] = 4;
  m.graph = std::make_shared<ir::Graph>();
  ir::Graph& g = *m.graph;
  g.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(DType::kFloat64, {1, 1, 1}), ""});
  ir::Node r;
  r.op_type = "Reshape";
  r.name = "reshape";
  r.inputs = {"x"};
  r.outputs = {"loss"};
  r.attrs = {attr_ints("shape", {1})};
  g.nodes = {r};
  g.outputs.push_back(ir::ValueInfo{"loss", ir::TypeInfo::tensor(DType::kFloat64, {1}), ""});  // Reshape-1: no inference
  const ir::Model gm = onnxtrain::autodiff::build_gradient_model(m, {"loss"}, {"x"}, "loss", {});
  bool attribute_form = false;
  for (const auto& n : gm.graph->nodes) attribute_form |= n.op_type == "Reshape" && n.name != "reshape" && n.attr("shape");
  EXPECT_TRUE(attribute_form);
  const auto out = run_model(gm, {Tensor::from_vector<double>({1, 1, 1}, {0.25})});
  EXPECT_TRUE(all_close(out[1], {1, 1, 1}, {1.0}));
}

GRAD_COVERS(GradShape, Flatten, "Flatten");
TEST(GradShape, Flatten) {
  std::mt19937 rng(2);
  for (int64_t axis : {0, 1, 2, 3}) expect_gradient(spec("Flatten", {f64({2, 3, 2}, rng)}, {attr_int("axis", axis)}, 9, 2));
  expect_gradient_both(spec("Flatten", {f64({2, 3, 2}, rng)}, {attr_int("axis", -1)}, 13, 2), true);
}

GRAD_COVERS(GradShape, SqueezeUnsqueeze, "Squeeze", "Unsqueeze");
TEST(GradShape, SqueezeUnsqueeze) {
  std::mt19937 rng(3);
  // opset 11: axes attribute (negative allowed); 13: axes input; no axes: every size-1 axis.
  expect_gradient(spec("Squeeze", {f64({2, 1, 3, 1}, rng)}, {attr_ints("axes", {1, -1})}, 11, 3));
  expect_gradient(spec("Squeeze", {f64({2, 1, 3, 1}, rng)}, {}, 11, 3));
  expect_gradient_both(spec("Squeeze", {f64({2, 1, 3, 1}, rng), i64({-3})}, {}, 13, 3), true);
  expect_gradient(spec("Unsqueeze", {f64({2, 3}, rng)}, {attr_ints("axes", {0, -1})}, 11, 3));
  expect_gradient_both(spec("Unsqueeze", {f64({2, 3}, rng), i64({1, 3})}, {}, 13, 3), true);
}

GRAD_COVERS(GradShape, TransposeIdentity, "Identity", "Transpose");
TEST(GradShape, TransposeIdentity) {
  std::mt19937 rng(4);
  expect_gradient_both(spec("Transpose", {f64({2, 3, 4}, rng)}, {attr_ints("perm", {1, 2, 0})}, 13, 4), true);
  expect_gradient(spec("Transpose", {f64({2, 3, 4}, rng)}, {}, 13, 4));  // reversed axes
  expect_gradient_both(spec("Identity", {f64({3, 2}, rng)}, {}, 13, 4), true);
}

// ---------------------------------------------------------------- broadcasting copies
GRAD_COVERS(GradShape, Expand, "Expand");
TEST(GradShape, Expand) {
  std::mt19937 rng(5);
  expect_gradient(spec("Expand", {f64({3, 1}, rng), i64({2, 3, 4})}, {}, 13, 5), true);
  expect_gradient(spec("Expand", {f64({2, 1, 4}, rng), i64({3, 1})}, {}, 8, 5));  // 1 keeps the input's dim
  expect_gradient(spec("Expand", {f64({4}, rng), i64({4})}, {}, 13, 5));          // no broadcast
  // Portable: static shapes need no custom op; symbolic shapes use the standard-op expansion.
  expect_gradient_both(spec("Expand", {f64({1, 3}, rng), i64({2, 1, 3})}, {}, 13, 5), true);
}

GRAD_COVERS(GradShape, Tile, "Tile");
TEST(GradShape, Tile) {
  std::mt19937 rng(6);
  expect_gradient_both(spec("Tile", {f64({2, 3}, rng), i64({2, 3})}, {}, 13, 6), true);
  expect_gradient(spec("Tile", {f64({2, 1, 3}, rng), i64({1, 4, 2})}, {}, 8, 6), true);
  expect_gradient(spec("Tile", {f64({3}, rng), i64({1})}, {}, 13, 6));
}

// ---------------------------------------------------------------- joining and cutting
GRAD_COVERS(GradMovement, Concat, "Concat");
TEST(GradMovement, Concat) {
  std::mt19937 rng(7);
  for (int64_t opset : {8, 11, 13}) {  // Split with the split attribute (< 13) or input
    for (int64_t axis : {1, -1, 0}) {
      if (axis < 0 && opset < 11) continue;  // negative axes from Concat-11
      Shape a{2, 3, 2}, b{2, 3, 2}, d{2, 3, 2};
      const size_t ax = size_t(axis < 0 ? axis + 3 : axis);
      a[ax] = 1;
      b[ax] = 3;
      expect_gradient(spec("Concat", {f64(a, rng), f64(b, rng), f64(d, rng)}, {attr_int("axis", axis)}, opset, 7),
                      opset >= 11);
    }
  }
  expect_gradient_both(spec("Concat", {f64({2, 2}, rng), f64({1, 2}, rng)}, {attr_int("axis", 0)}, 13, 7), true);
  expect_gradient(spec("Concat", {f64({2, 2}, rng)}, {attr_int("axis", 1)}, 13, 7), true);  // one input
}

GRAD_COVERS(GradMovement, Split, "Split");
TEST(GradMovement, Split) {
  std::mt19937 rng(8);
  for (int64_t opset : {11, 13}) {
    GradCheck s = spec("Split", {f64({2, 6, 2}, rng)}, {attr_int("axis", -2)}, opset, 8);
    if (opset < 13) s.attrs.push_back(attr_ints("split", {1, 3, 2}));
    else s.inputs.push_back(i64({1, 3, 2}));
    s.num_outputs = 3;
    s.outputs_in_loss = {0, 1, 2};
    expect_gradient_both(s, true);
    s.outputs_in_loss = {2};  // the others get no gradient: zeros
    expect_gradient_both(s, true);
  }
  GradCheck eq = spec("Split", {f64({4, 3}, rng)}, {}, 13, 8);  // equal parts
  eq.num_outputs = 2;
  eq.outputs_in_loss = {1, 0};
  expect_gradient(eq, true);
}

GRAD_COVERS(GradMovement, Slice, "Slice");
TEST(GradMovement, Slice) {
  std::mt19937 rng(9);
  const Tensor x = f64({4, 5, 3}, rng);
  // Slice-9: attributes (unit steps); a clamped end and a negative start. (Inference does not give
  // Slice-1's output shape, so the harness' loss needs run-time unbroadcasting, portable only from
  // opset 13: the portable form, a zero Pad, is checked for standard operators only.)
  for (GradCheck s : {spec("Slice", {x}, {attr_ints("starts", {1, -4}), attr_ints("ends", {100, 4}), attr_ints("axes", {0, 1})}, 9, 9),
                      spec("Slice", {x}, {attr_ints("starts", {1}), attr_ints("ends", {3})}, 9, 9)}) {  // default axes
    expect_gradient(s);
    s.portable = true;
    EXPECT_EQ(custom_ops(s), std::vector<std::string>{});
  }
  struct Case {
    std::vector<int64_t> starts, ends, axes, steps;
  };
  const Case cases[] = {
      {{1, 0}, {3, 5}, {0, 1}, {1, 2}},              // step 2
      {{-1}, {-100}, {1}, {-1}},                     // reversed, clamped
      {{3, 4, 2}, {0, 0, -100}, {0, -2, -1}, {-2, -3, -1}},  // negative steps, negative axes
      {{0}, {0}, {2}, {1}},                          // empty slice
      {{10}, {20}, {0}, {1}},                        // start clamped past the end
      {{1, 1}, {4, 4}, {1, 0}, {1, 1}},              // unit steps: the portable Pad form
  };
  for (const Case& k : cases) {
    GradCheck s = spec("Slice", {x, i64(k.starts), i64(k.ends), i64(k.axes), i64(k.steps)}, {}, 13, 9);
    expect_gradient_both(s, true);
    s.inputs.resize(4);  // no steps
    if (std::all_of(k.steps.begin(), k.steps.end(), [](int64_t v) { return v == 1; })) expect_gradient_both(s, true);
  }
  // Steps at opset 10: no Range for the portable scatter form, so SliceGrad in portable mode too.
  GradCheck stepped = spec("Slice", {x, i64({0}), i64({4}), i64({0}), i64({2})}, {}, 10, 9);
  expect_gradient(stepped);
  stepped.portable = true;
  EXPECT_EQ(custom_ops(stepped), std::vector<std::string>{"SliceGrad"});
  // No axes input (axes 0..n-1), opset 10.
  expect_gradient_both(spec("Slice", {x, i64({1, 2}), i64({3, 5})}, {}, 10, 9));
  expect_gradient(spec("Slice", {x, i64({1, 2}), i64({3, 5})}, {}, 10, 9), true);
}

GRAD_COVERS(GradMovement, PadConstant, "Pad");
TEST(GradMovement, PadConstant) {
  std::mt19937 rng(10);
  const Tensor x = f64({3, 4}, rng);
  // Pad-2..10: pads and value attributes.
  expect_gradient_both(spec("Pad", {x}, {attr_ints("pads", {1, 0, 2, 3})}, 8, 10));
  expect_gradient_both(spec("Pad", {x}, {attr_ints("pads", {1, -1, -2, 3}), attr_float("value", 1.5f)}, 10, 10));
  // Pad-11+: pads input; constant_value (a float input) receives the padded positions' gradient.
  for (int64_t opset : {11, 13}) {
    expect_gradient_both(spec("Pad", {x, i64({0, 2, 1, -1}), Tensor::scalar<double>(0.5)}, {}, opset, 10), true);
    expect_gradient_both(spec("Pad", {x, i64({-1, -1, 0, -2})}, {}, opset, 10), true);
  }
}

TEST(GradMovement, PadEdgeReflect) {
  std::mt19937 rng(11);
  const Tensor x = f64({3, 4, 5}, rng);
  for (const char* mode : {"edge", "reflect"}) {
    const ir::Attribute m = attr_string("mode", mode);
    // Attribute form (before opset 10 no Slice steps for a portable form: PadGrad) and input form.
    expect_gradient(spec("Pad", {x}, {attr_ints("pads", {1, 0, 2, 0, 3, 1}), m}, 8, 11));
    expect_gradient_both(spec("Pad", {x}, {attr_ints("pads", {1, 0, 2, 0, 3, 1}), m}, 10, 11));
    // Symbolic shapes: PadGrad in portable mode too (the folds need static shapes).
    expect_gradient_both(spec("Pad", {x, i64({2, 3, 0, 1, 3, 4})}, {m}, 13, 11), true, false);
    expect_gradient_both(spec("Pad", {x, i64({-1, 2, 1, 0, -1, 2})}, {m}, 13, 11), true, false);  // crop, then pad
  }
  // Pads wider than the input: reflect folds several times, edge sums long runs.
  for (const char* mode : {"edge", "reflect"})
    expect_gradient_both(spec("Pad", {f64({3, 2}, rng), i64({5, 0, 2, 3})}, {attr_string("mode", mode)}, 13, 11));
}

// ---------------------------------------------------------------- masks and rearrangements
GRAD_COVERS(GradMovement, Trilu, "Trilu");
TEST(GradMovement, Trilu) {
  std::mt19937 rng(12);
  for (int64_t upper : {0, 1}) {
    expect_gradient_both(spec("Trilu", {f64({2, 3, 4}, rng)}, {attr_int("upper", upper)}, 14, 12), true);
    expect_gradient(spec("Trilu", {f64({4, 3}, rng), Tensor::scalar<int64_t>(-1)}, {attr_int("upper", upper)}, 14, 12));
  }
}

GRAD_COVERS(GradMovement, DepthSpace, "SpaceToDepth", "DepthToSpace");
TEST(GradMovement, DepthSpace) {
  std::mt19937 rng(13);
  expect_gradient_both(spec("SpaceToDepth", {f64({1, 2, 4, 6}, rng)}, {attr_int("blocksize", 2)}, 13, 13), true);
  expect_gradient(spec("SpaceToDepth", {f64({2, 1, 3, 3}, rng)}, {attr_int("blocksize", 3)}, 9, 13));
  expect_gradient(spec("DepthToSpace", {f64({1, 8, 2, 3}, rng)}, {attr_int("blocksize", 2)}, 9, 13));  // DCR only
  for (const char* mode : {"DCR", "CRD"})
    expect_gradient_both(spec("DepthToSpace", {f64({2, 8, 2, 3}, rng)}, {attr_int("blocksize", 2), attr_string("mode", mode)}, 13, 13),
                         true);
}

// ---------------------------------------------------------------- generators
// Range: y_i = start + i delta. The limit only sets the length (zero gradient almost everywhere):
// (limit - start) / delta stays away from an integer so that the length does not change.
GRAD_COVERS(GradShape, Range, "Range");
TEST(GradShape, Range) {
  auto d = [](double v) { return Tensor::scalar<double>(v); };
  for (const auto& [start, limit, delta] : {std::tuple{0.3, 2.55, 0.4}, std::tuple{1.0, -1.3, -0.45}, std::tuple{-2.0, 0.5, 3.0}})
    for (int64_t opset : {11, 17}) {
      GradCheck s = spec("Range", {d(start), d(limit), d(delta)}, {}, opset, 15);
      s.rtol = 1e-7;
      s.atol = 1e-9;
      if (opset >= 13) expect_gradient_both(s);  // the harness's portable loss needs opset 13 here
      else expect_gradient(s);
    }
}

// Generators and shape queries are declared zero-gradient: their outputs do not depend on the
// values of their inputs (Shape, Size, NonZero's indices, ConstantOfShape, EyeLike, the random
// generators), or sample from them (Bernoulli, Multinomial). Operators without a CPU kernel are
// checked on the gradient graph alone.
GRAD_COVERS(GradShape, ZeroGradientOperators, "Shape", "Size", "NonZero", "ConstantOfShape", "Constant", "EyeLike", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial");
TEST(GradShape, ZeroGradientOperators) {
  uint32_t seed = 16;
  auto check = [&](ZeroGradCheck z) {
    z.seed = seed++;
    EXPECT_TRUE(check_zero_gradient(z)) << z.op;
  };
  for (const char* op : {"Shape", "Size", "NonZero"}) check({op, {"x"}});
  ZeroGradCheck c{"ConstantOfShape", {"s"}, {}, {make_node("Shape", {"x"}, {"s"})}};
  c.attrs = {attr_tensor("value", Tensor::from_vector<double>({1}, {2.5}))};
  check(c);
  check({"Constant", {}, {}, {}, {attr_tensor("value", Tensor::from_vector<double>({2}, {1.0, -1.0}))}});
  ZeroGradCheck eye{"EyeLike", {"x"}};
  eye.has_kernel = false;
  check(eye);
  for (const char* op : {"RandomNormalLike", "RandomUniformLike", "Bernoulli"}) {
    ZeroGradCheck z{op, {"x"}};
    z.has_kernel = false;
    check(z);
  }
  for (const char* op : {"RandomNormal", "RandomUniform"}) {
    ZeroGradCheck z{op, {}};
    z.attrs = {attr_ints("shape", {3, 4}), attr_int("dtype", int64_t(DType::kFloat64))};
    z.has_kernel = false;
    check(z);
  }
  ZeroGradCheck multi{"Multinomial", {"x"}};  // x: unnormalized log-probabilities [batch, classes]
  multi.attrs = {attr_int("sample_size", 5)};
  multi.has_kernel = false;
  check(multi);
}

// ---------------------------------------------------------------- backward kernels
// SliceGrad against the adjoint of the forward Slice, random slices, float32 and float64.
TEST(GradMovement, SliceGradKernel) {
  const uint32_t seed = 14;
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 40; ++trial) {
    const Shape xs = random_shape(rng, 1, 4, 1, 6);
    const int64_t r = int64_t(xs.size());
    std::vector<int64_t> starts, ends, axes, steps;
    std::uniform_int_distribution<int64_t> pick(-8, 8), st(-3, 3);
    for (int64_t a = 0; a < r; ++a) {
      if (rng() % 3 == 0) continue;
      axes.push_back(rng() % 2 ? a : a - r);
      starts.push_back(pick(rng));
      ends.push_back(pick(rng));
      int64_t s = st(rng);
      steps.push_back(s == 0 ? 1 : s);
    }
    std::vector<Tensor> fin{Tensor(), i64(starts), i64(ends), i64(axes), i64(steps)};
    fin[0] = f64(xs, rng);
    const Shape ys = run_node("Slice", fin, {}, {})[0].shape();
    for (DType dt : {DType::kFloat64, DType::kFloat32}) {
      const Tensor dy = random_tensor(dt, ys, rng);
      const Tensor dx = run_grad_kernel("SliceGrad", {dy, i64(xs), i64(starts), i64(ends), i64(axes), i64(steps)}, {},
                                        trial % 2 ? 2 : 1);
      EXPECT_TRUE(all_close(dx, xs, adjoint_reference("Slice", xs, fin, {}, dy), 1e-6, 1e-6))
          << seed_msg(seed, trial) << " x " << onnxtrain::shape_to_string(xs) << " starts "
          << onnxtrain::shape_to_string(starts) << " ends " << onnxtrain::shape_to_string(ends) << " steps "
          << onnxtrain::shape_to_string(steps);
    }
  }
}

// SliceGradSum (train::fuse_slice_grad_sum's node) against the sum of the adjoints of the forward
// Slices: slices that tile X along one axis (copies alone), disjoint ones with gaps (zeros, then
// copies) and random, overlapping ones with steps (accumulated); axes and steps absent in some.
TEST(GradMovement, SliceGradSumKernel) {
  const uint32_t seed = 17;
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 45; ++trial) {
    const Shape xs = random_shape(rng, 1, 4, 3, 7);
    const int64_t r = int64_t(xs.size());
    const int kind = trial % 3;  // 0: tiling, 1: disjoint with gaps, 2: random
    const size_t n = 2 + size_t(rng() % 3);
    const int64_t axis = int64_t(rng() % uint32_t(r)), d = xs[size_t(axis)];
    std::vector<int64_t> cuts{0, d};
    while (cuts.size() < n + 1) cuts.push_back(int64_t(rng() % uint32_t(d + 1)));
    std::sort(cuts.begin(), cuts.end());
    std::vector<Tensor> in{i64(xs)};
    std::vector<double> want(size_t(onnxtrain::shape_numel(xs)), 0.0);
    for (const DType dt : {DType::kFloat64, DType::kFloat32}) {
      in.resize(1);
      std::fill(want.begin(), want.end(), 0.0);
      for (size_t g = 0; g < n; ++g) {
        std::vector<int64_t> starts, ends, axes, steps;
        if (kind == 0 || kind == 1) {
          starts = {cuts[g] + (kind == 1 && cuts[g + 1] > cuts[g] + 1 ? 1 : 0)};
          ends = {cuts[g + 1]};
          axes = {rng() % 2 ? axis : axis - r};
          steps = {1};
        } else {
          std::uniform_int_distribution<int64_t> pick(-8, 8), st(-2, 2);
          for (int64_t a = 0; a < r; ++a) {
            if (rng() % 3 == 0) continue;
            axes.push_back(a);
            starts.push_back(pick(rng));
            ends.push_back(pick(rng));
            const int64_t s = st(rng);
            steps.push_back(s == 0 ? 1 : s);
          }
        }
        const bool plain = kind != 2 && g % 2 == 1 && axis == 0;  // axes and steps absent: axes 0.., steps 1
        std::vector<Tensor> fin{f64(xs, rng), i64(starts), i64(ends), i64(axes), i64(steps)};
        const Shape ys = run_node("Slice", fin, {}, {})[0].shape();
        const Tensor dy = random_tensor(dt, ys, rng);
        const auto adj = adjoint_reference("Slice", xs, fin, {}, dy);
        for (size_t i = 0; i < want.size(); ++i) want[i] += adj[i];
        in.push_back(dy);
        in.push_back(i64(starts));
        in.push_back(i64(ends));
        in.push_back(plain ? Tensor() : i64(axes));
        in.push_back(plain ? Tensor() : i64(steps));
      }
      const Tensor dx = run_grad_kernel("SliceGradSum", in, {}, trial % 2 ? 2 : 1);
      EXPECT_TRUE(all_close(dx, xs, want, 1e-6, 1e-6))
          << seed_msg(seed, trial) << " kind " << kind << " x " << onnxtrain::shape_to_string(xs) << " slices " << n;
    }
  }
  // Bad input: a gradient whose shape is not its slice's, an input count not 1 + 5 per slice.
  expect_error<onnxtrain::InvalidArgument>(
      [&] {
        run_grad_kernel("SliceGradSum", {i64({4, 4}), f64({2, 2}, rng), i64({0}), i64({3}), Tensor(), Tensor(),
                                         f64({1, 4}, rng), i64({3}), i64({4}), Tensor(), Tensor()});
      },
      "SliceGradSum", "the slice's is");
  expect_error<onnxtrain::InvalidModel>(
      [&] { run_grad_kernel("SliceGradSum", {i64({4}), f64({2}, rng), i64({0}), i64({2}), i64({0}), i64({1}), f64({2}, rng), i64({2})}); },
      "SliceGradSum",
      "five inputs per slice");
}

// PadGrad (edge, reflect, wrap; negative pads) against the adjoint of the forward Pad.
TEST(GradMovement, PadGradKernel) {
  const uint32_t seed = 15;
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 36; ++trial) {
    const char* mode = trial % 3 == 0 ? "edge" : trial % 3 == 1 ? "reflect" : "wrap";
    const Shape xs = random_shape(rng, 1, 3, 2, 5);
    std::vector<int64_t> pads;
    std::uniform_int_distribution<int64_t> pd(-1, 6);
    for (size_t i = 0; i < 2 * xs.size(); ++i) pads.push_back(pd(rng));
    const std::vector<ir::Attribute> attrs{attr_string("mode", mode)};
    const std::vector<Tensor> fin{f64(xs, rng), i64(pads)};
    const Shape ys = run_node("Pad", fin, attrs, opset_options(19))[0].shape();
    for (DType dt : {DType::kFloat64, DType::kFloat32, DType::kFloat16}) {
      const Tensor dy = random_tensor(dt, ys, rng);
      const Tensor dx = run_grad_kernel("PadGrad", {dy, i64(xs), i64(pads)}, attrs, trial % 2 ? 2 : 1);
      const double tol = dt == DType::kFloat16 ? 1e-2 : 1e-6;
      EXPECT_TRUE(all_close(dx, xs, adjoint_reference("Pad", xs, fin, attrs, dy, 19), tol, tol))
          << seed_msg(seed, trial) << " " << mode << " x " << onnxtrain::shape_to_string(xs) << " pads "
          << onnxtrain::shape_to_string(pads);
    }
  }
  // axes input (Pad-18 layout): pads for the listed axes only.
  const Tensor dy = random_tensor(DType::kFloat64, {3, 7}, rng);
  const std::vector<ir::Attribute> attrs{attr_string("mode", "reflect")};
  const Tensor dx = run_grad_kernel("PadGrad", {dy, i64({3, 4}), i64({1, 2}), i64({-1})}, attrs);
  EXPECT_TRUE(all_close(dx, {3, 4}, adjoint_reference("Pad", {3, 4}, {Tensor(), i64({0, 1, 0, 2})}, attrs, dy), 1e-9, 1e-9));
}

TEST(GradMovement, BackwardKernelErrors) {
  std::mt19937 rng(16);
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_grad_kernel("SliceGrad", {f64({2, 2}, rng), i64({4, 4}), i64({0}), i64({3})}); }, "SliceGrad",
      "differs from the slice's shape");
  expect_error<onnxtrain::InvalidArgument>(
      [&] { run_grad_kernel("PadGrad", {f64({3, 3}, rng), i64({2, 2}), i64({1, 1})}, {attr_string("mode", "edge")}); },
      "PadGrad", "must hold 2 values per axis");
}
