// Conv / ConvTranspose gradients: finite-difference tests of the rules (float64, default and
// portable mode) and the com.onnxtrain.ConvGrad / ConvTransposeGrad kernels against a naive
// double-precision reference (float32: oneDNN backward primitives; float64 / float16: im2col).
#include <algorithm>

#include "grad_linalg_util.h"
#include "kernels/cpu/nchwc_direct.h"
#include "kernels/kernel.h"

using namespace ot_test;
using onnxtrain::ExecOptions;

namespace {

std::string str(const Shape& s) { return onnxtrain::shape_to_string(s); }

struct Geo {
  bool transposed = false;
  size_t nd = 2;
  int64_t N = 2, C = 2, M = 2, G = 1;
  Shape in, k, s, d, pb, pe, op;  // op: ConvTranspose output_padding
  std::string auto_pad = "NOTSET";
  Shape output_shape;             // ConvTranspose output_shape attribute
  bool bias = true, kernel_attr = false;

  std::string describe() const {
    return std::string(transposed ? "ConvTranspose" : "Conv") + " N=" + std::to_string(N) + " C=" + std::to_string(C) +
           " M=" + std::to_string(M) + " G=" + std::to_string(G) + " in" + str(in) + " k" + str(k) + " s" + str(s) +
           " d" + str(d) + " pb" + str(pb) + " pe" + str(pe) + " op" + str(op) + " os" + str(output_shape) + " " +
           auto_pad + (bias ? " bias" : "");
  }
  std::vector<ir::Attribute> attrs() const {
    std::vector<ir::Attribute> a = {attr_ints("strides", s), attr_ints("dilations", d), attr_int("group", G),
                                    pad_attr(auto_pad, pb, pe)};
    if (kernel_attr) a.push_back(attr_ints("kernel_shape", k));
    if (transposed && !op.empty()) a.push_back(attr_ints("output_padding", op));
    if (!output_shape.empty()) a.push_back(attr_ints("output_shape", output_shape));
    return a;
  }
  Shape xshape() const {
    Shape r = {N, C};
    r.insert(r.end(), in.begin(), in.end());
    return r;
  }
  Shape wshape() const {
    Shape r = transposed ? Shape{C, M / G} : Shape{M, C / G};
    r.insert(r.end(), k.begin(), k.end());
    return r;
  }
  int64_t ext(size_t i) const { return (k[i] - 1) * d[i] + 1; }
  // Output shape for explicit pads (NOTSET, no output_shape).
  Shape yshape() const {
    Shape r = {N, M};
    for (size_t i = 0; i < nd; ++i)
      r.push_back(transposed ? s[i] * (in[i] - 1) + (op.empty() ? 0 : op[i]) + ext(i) - pb[i] - pe[i]
                             : (in[i] + pb[i] + pe[i] - ext(i)) / s[i] + 1);
    return r;
  }
};

// Gradients of a (transposed) convolution with explicit pads, by visiting every pairing of an
// X position and a Y position through a kernel offset:
//   Conv: Y[n, m, o] += X[n, c, o*s - pb + k*d] W[m, c, k];  ConvTranspose: Y[n, m, i*s - pb + k*d] += X[n, c, i] W[c, m, k]
void ref_grads(const Geo& g, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& dy,
               std::vector<double>* dx, std::vector<double>* dw, std::vector<double>* db) {
  const Shape xs = g.xshape(), ws = g.wshape(), ys = g.yshape();
  dx->assign(x.size(), 0.0), dw->assign(w.size(), 0.0), db->assign(size_t(g.M), 0.0);
  const Shape xsp(xs.begin() + 2, xs.end()), ysp(ys.begin() + 2, ys.end());
  const Shape& walk = g.transposed ? xsp : ysp;
  const Shape& other = g.transposed ? ysp : xsp;
  const int64_t Cg = g.C / g.G, Mg = g.M / g.G, nk = onnxtrain::shape_numel(g.k), nwalk = onnxtrain::shape_numel(walk);
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t grp = 0; grp < g.G; ++grp)
      for (int64_t m = 0; m < Mg; ++m)
        for (int64_t ci = 0; ci < Cg; ++ci)
          for (int64_t p = 0; p < nwalk; ++p)
            for (int64_t kf = 0; kf < nk; ++kf) {
              auto pi = unravel(p, walk), ki = unravel(kf, g.k);
              std::vector<int64_t> q(g.nd);
              bool inside = true;
              for (size_t i = 0; i < g.nd; ++i) {
                q[i] = pi[i] * g.s[i] - g.pb[i] + ki[i] * g.d[i];
                inside = inside && q[i] >= 0 && q[i] < other[i];
              }
              if (!inside) continue;
              std::vector<int64_t> xi = {n, grp * Cg + ci}, yi = {n, grp * Mg + m},
                                   wi = g.transposed ? std::vector<int64_t>{grp * Cg + ci, m}
                                                     : std::vector<int64_t>{grp * Mg + m, ci};
              const auto& xpos = g.transposed ? pi : q;
              const auto& ypos = g.transposed ? q : pi;
              xi.insert(xi.end(), xpos.begin(), xpos.end());
              yi.insert(yi.end(), ypos.begin(), ypos.end());
              wi.insert(wi.end(), ki.begin(), ki.end());
              const size_t xo = size_t(ravel(xi, xs)), yo = size_t(ravel(yi, ys)), wo = size_t(ravel(wi, ws));
              (*dx)[xo] += dy[yo] * w[wo];
              (*dw)[wo] += dy[yo] * x[xo];
            }
  const int64_t plane = onnxtrain::shape_numel(ysp);
  for (size_t i = 0; i < dy.size(); ++i) (*db)[size_t((int64_t(i) / plane) % g.M)] += dy[i];
}

// Runs one com.onnxtrain gradient node naming only the outputs in `named` (others left unnamed).
std::vector<Tensor> run_grad_node(const std::string& op, const std::vector<Tensor>& inputs,
                                  const std::vector<ir::Attribute>& attrs, const std::vector<bool>& named,
                                  const ExecOptions& eo) {
  ir::Model m;
  m.ir_version = 8;
  m.opsets[""] = 17;
  m.opsets["com.onnxtrain"] = 1;
  m.graph = std::make_shared<ir::Graph>();
  ir::Node n;
  n.op_type = op;
  n.domain = "com.onnxtrain";
  n.name = "node_" + op;
  n.attrs = attrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    n.inputs.push_back(name);
    m.graph->inputs.push_back(ir::ValueInfo{name, ir::TypeInfo::tensor(inputs[i].dtype(), inputs[i].shape()), ""});
  }
  for (size_t i = 0; i < named.size(); ++i) {
    n.outputs.push_back(named[i] ? "out" + std::to_string(i) : "");
    if (named[i]) m.graph->outputs.push_back(ir::ValueInfo{"out" + std::to_string(i), {}, ""});
  }
  m.graph->nodes.push_back(n);
  return run_model(m, inputs, eo);
}
std::vector<Tensor> run_grad_node(const std::string& op, const std::vector<Tensor>& inputs,
                                  const std::vector<ir::Attribute>& attrs, const std::vector<bool>& named, int threads) {
  ExecOptions eo;
  eo.num_threads = threads;
  return run_grad_node(op, inputs, attrs, named, eo);
}

Geo random_geo(std::mt19937& rng, bool transposed) {
  auto r = [&](int lo, int hi) { return rand_int(rng, lo, hi); };
  Geo g;
  g.transposed = transposed;
  g.nd = size_t(r(1, 3));
  g.N = r(1, 3);
  const int64_t kind = r(0, 5);  // 0: depthwise, 1-2: grouped, else plain
  g.G = kind == 0 ? r(2, 5) : kind <= 2 ? r(2, 3) : 1;
  g.C = g.G * (kind == 0 ? 1 : r(1, 4));
  g.M = g.G * (kind == 0 ? r(1, 2) : r(1, 4));
  for (size_t i = 0; i < g.nd; ++i) {
    g.k.push_back(r(1, g.nd == 3 ? 3 : 4));
    g.s.push_back(r(1, 3));
    g.d.push_back(r(1, 2));
    g.pb.push_back(r(0, 2));
    g.pe.push_back(r(0, 2));
    g.in.push_back(transposed ? r(1, 5) : g.ext(i) + r(0, g.nd == 3 ? 3 : 6));
    if (transposed) g.op.push_back(r(0, g.s[i] - 1));
  }
  for (size_t i = 0; transposed && i < g.nd; ++i) {  // keep the output non-empty
    const int64_t full = g.s[i] * (g.in[i] - 1) + g.op[i] + g.ext(i);
    while (g.pb[i] + g.pe[i] >= full) --(g.pb[i] > 0 ? g.pb[i] : g.pe[i]);
  }
  return g;
}

// The gradient kernel against ref_grads, every output subset, on random geometries.
void check_grad_kernel(bool transposed, DType dt, uint32_t seed, int trials) {
  std::mt19937 rng(seed);
  const char* op = transposed ? "ConvTransposeGrad" : "ConvGrad";
  for (int t = 0; t < trials; ++t) {
    const Geo g = random_geo(rng, transposed);
    Tensor x = random_tensor(dt, g.xshape(), rng), w = random_tensor(dt, g.wshape(), rng),
           dy = random_tensor(dt, g.yshape(), rng);
    std::vector<double> dx, dw, db;
    ref_grads(g, to_double(x), to_double(w), to_double(dy), &dx, &dw, &db);
    const double tol = dt == DType::kFloat64 ? 1e-10 : dt == DType::kFloat32 ? 1e-4 : 3e-2;
    const std::vector<bool> named = t % 4 == 0 ? std::vector<bool>{true, false, false}
                                    : t % 4 == 1 ? std::vector<bool>{false, true, true}
                                    : t % 4 == 2 ? std::vector<bool>{false, true, false}
                                                 : std::vector<bool>{true, true, true};
    try {
      auto out = run_grad_node(op, {dy, x, w}, g.attrs(), named, 1 + t % 2);
      size_t o = 0;
      const std::string what = g.describe() + " seed " + std::to_string(seed) + " trial " + std::to_string(t);
      const std::vector<std::pair<Shape, const std::vector<double>*>> want = {{g.xshape(), &dx}, {g.wshape(), &dw}, {{g.M}, &db}};
      for (size_t i = 0; i < 3; ++i) {
        if (!named[i]) continue;
        EXPECT_TRUE(all_close(out[o++], want[i].first, *want[i].second, tol, tol)) << "output " << i << " " << what;
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << op << " " << g.describe() << " seed " << seed << " trial " << t << ": " << e.what();
    }
  }
}

// Finite-difference check of one geometry: X, W (and B) together and alone, default and portable.
void fd(const Geo& g, uint32_t seed, bool expect_portable = true) {
  std::mt19937 rng(seed);
  GradCheck s;
  s.op = g.transposed ? "ConvTranspose" : "Conv";
  s.inputs = {random_tensor(DType::kFloat64, g.xshape(), rng), random_tensor(DType::kFloat64, g.wshape(), rng)};
  if (g.bias) s.inputs.push_back(random_tensor(DType::kFloat64, {g.M}, rng));
  s.attrs = g.attrs();
  s.seed = seed;
  expect_gradient(s, g.describe());
  EXPECT_EQ(uses_custom(gradient_ops(s, true)), !expect_portable) << g.describe();
  EXPECT_TRUE(uses_custom(gradient_ops(s, false))) << g.describe();
}

Geo conv(size_t nd, int64_t C, int64_t M, int64_t G, Shape in, Shape k, Shape s, Shape d, Shape pb, Shape pe) {
  Geo g;
  g.nd = nd, g.C = C, g.M = M, g.G = G, g.in = in, g.k = k, g.s = s, g.d = d, g.pb = pb, g.pe = pe;
  return g;
}

}  // namespace

GRAD_COVERS(GradConv, Conv2D, "Conv");
TEST(GradConv, Conv2D) {
  fd(conv(2, 3, 4, 1, {5, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}), 1);                // same-size, bias
  fd(conv(2, 2, 3, 1, {7, 6}, {3, 2}, {2, 2}, {1, 1}, {0, 1}, {1, 0}), 2);                // strides, asymmetric pads, leftover input
  Geo g = conv(2, 2, 2, 1, {7, 7}, {2, 3}, {1, 2}, {2, 2}, {1, 0}, {0, 2});                // dilations
  g.bias = false;
  fd(g, 3);
  fd(conv(2, 4, 6, 2, {5, 5}, {2, 3}, {1, 1}, {1, 1}, {0, 1}, {1, 1}), 4);                // groups
  fd(conv(2, 3, 6, 3, {6, 5}, {3, 3}, {2, 1}, {1, 1}, {1, 1}, {1, 1}), 5);                // depthwise, multiplier 2
  g = conv(2, 2, 3, 1, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0});
  g.kernel_attr = true;
  fd(g, 6);
}

TEST(GradConv, ConvAutoPad) {
  for (const char* ap : {"SAME_UPPER", "SAME_LOWER", "VALID"}) {
    Geo g = conv(2, 2, 3, 1, {5, 6}, {3, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0});
    g.auto_pad = ap;
    fd(g, 10);
    g.s = {1, 1};
    g.d = {2, 1};
    fd(g, 11);
  }
}

TEST(GradConv, Conv1D3D) {
  fd(conv(1, 2, 3, 1, {9}, {3}, {2}, {2}, {2}, {1}), 20);
  fd(conv(1, 4, 4, 4, {7}, {3}, {1}, {1}, {1}, {1}), 21);  // depthwise 1-D
  fd(conv(3, 2, 2, 1, {3, 4, 4}, {2, 2, 3}, {1, 2, 1}, {1, 1, 1}, {0, 1, 1}, {1, 0, 1}), 22);
  fd(conv(3, 4, 2, 2, {3, 3, 4}, {2, 1, 2}, {1, 1, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 1}), 23);  // grouped 3-D
}

TEST(GradConv, ConvSymbolicShapes) {
  // Spatial dims unknown to the rule: stride 1 stays portable; stride 2 needs the left-over input
  // positions, so portable mode falls back to the custom op (still correct).
  for (int64_t s : {1, 2}) {
    std::mt19937 rng(30);
    GradCheck spec;
    spec.op = "Conv";
    Geo g = conv(2, 4, 4, 2, {6, 5}, {3, 3}, {s, s}, {1, 1}, {1, 0}, {0, 1});
    spec.inputs = {random_tensor(DType::kFloat64, g.xshape(), rng), random_tensor(DType::kFloat64, g.wshape(), rng),
                   random_tensor(DType::kFloat64, {4}, rng)};
    spec.attrs = g.attrs();
    spec.seed = 30;
    spec.symbolic_shapes = true;
    expect_gradient(spec, "symbolic " + g.describe());
  }
}

// com.microsoft.FusedConv(X, W[, B], activation = "Relu"): train/fusion.h's Conv + Relu, against
// central differences (random inputs: no output within a step of the kink); other activations and
// Z name what is not implemented.
GRAD_COVERS(GradConv, FusedConvRelu, "com.microsoft.FusedConv");
TEST(GradConv, FusedConvRelu) {
  uint32_t seed = 700;
  for (bool bias : {true, false}) {
    Geo g = conv(2, 3, 4, 1, {5, 6}, {3, 3}, {2, 1}, {1, 1}, {1, 0}, {1, 1});
    g.bias = bias;
    std::mt19937 rng(seed);
    GradCheck s;
    s.op = "FusedConv";
    s.domain = "com.microsoft";
    s.inputs = {random_tensor(DType::kFloat64, g.xshape(), rng), random_tensor(DType::kFloat64, g.wshape(), rng)};
    if (bias) s.inputs.push_back(random_tensor(DType::kFloat64, {g.M}, rng));
    s.attrs = g.attrs();
    s.attrs.push_back(attr_string("activation", "Relu"));
    s.seed = seed++;
    EXPECT_TRUE(check_gradient(s)) << g.describe() << (bias ? " bias" : "");
  }
  std::mt19937 rng(seed);
  const Geo g = conv(2, 2, 2, 1, {4, 4}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1});
  GradCheck s;
  s.op = "FusedConv";
  s.domain = "com.microsoft";
  s.inputs = {random_tensor(DType::kFloat64, g.xshape(), rng), random_tensor(DType::kFloat64, g.wshape(), rng)};
  s.attrs = g.attrs();
  s.attrs.push_back(attr_string("activation", "Tanh"));
  const ::testing::AssertionResult r = check_gradient(s);
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("gradient of FusedConv is implemented for activation 'Relu' without Z"),
            std::string::npos)
      << r.message();
}

GRAD_COVERS(GradConv, ConvTranspose, "ConvTranspose");
TEST(GradConv, ConvTranspose) {
  auto convt = [](size_t nd, int64_t C, int64_t M, int64_t G, Shape in, Shape k, Shape s, Shape d, Shape pb, Shape pe,
                  Shape op) {
    Geo g = conv(nd, C, M, G, in, k, s, d, pb, pe);
    g.transposed = true;
    g.op = op;
    return g;
  };
  fd(convt(2, 3, 2, 1, {3, 4}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 0}), 40);  // stride, pads, output_padding
  fd(convt(2, 4, 6, 2, {3, 3}, {2, 3}, {1, 2}, {2, 1}, {0, 1}, {1, 0}, {0, 1}), 41);  // groups, dilations
  fd(convt(1, 2, 2, 1, {4}, {3}, {3}, {1}, {1}, {2}, {2}), 42);
  fd(convt(3, 2, 2, 2, {2, 3, 2}, {2, 2, 2}, {2, 1, 1}, {1, 1, 1}, {0, 0, 1}, {1, 0, 0}, {1, 0, 0}), 43);
  Geo g = convt(2, 2, 3, 1, {3, 3}, {3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {});
  g.output_shape = {6, 7};
  fd(g, 44);
  g.output_shape.clear();
  for (const char* ap : {"SAME_UPPER", "SAME_LOWER"}) {
    g.auto_pad = ap;
    fd(g, 45);
  }
  g.auto_pad = "NOTSET";
  g.output_shape = {8, 9};  // past the full output: negative pads, not a Conv: the custom op in portable mode
  fd(g, 46, false);
}

TEST(GradConv, KernelRandomFloat) { check_grad_kernel(false, DType::kFloat32, 201, 80); }
TEST(GradConv, KernelRandomDouble) { check_grad_kernel(false, DType::kFloat64, 202, 40); }
TEST(GradConv, KernelRandomFloat16) { check_grad_kernel(false, DType::kFloat16, 203, 10); }
TEST(GradConv, KernelTransposeRandomFloat) { check_grad_kernel(true, DType::kFloat32, 204, 80); }
TEST(GradConv, KernelTransposeRandomDouble) { check_grad_kernel(true, DType::kFloat64, 205, 40); }
TEST(GradConv, KernelRandomBFloat16) { check_grad_kernel(false, DType::kBFloat16, 207, 20); }
TEST(GradConv, KernelTransposeRandomFloat16) { check_grad_kernel(true, DType::kFloat16, 208, 10); }

// Channel counts that select oneDNN's blocked layouts (and reorders) in both backward primitives.
TEST(GradConv, KernelBlockedLayouts) {
  std::mt19937 rng(206);
  for (auto [C, M, G, k, s] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>>{
           {16, 32, 1, 3, 1}, {32, 32, 32, 3, 2}, {24, 48, 2, 1, 1}, {3, 16, 1, 7, 2}, {64, 64, 1, 3, 1}}) {
    for (bool transposed : {false, true}) {
      Geo g = conv(2, C, M, G, {9, 10}, {k, k}, {s, s}, {1, 1}, {k / 2, k / 2}, {k / 2, k / 2});
      g.transposed = transposed;
      if (transposed) g.op = {s - 1, 0};
      // bfloat16 (the bf16 mixed-precision mode): oneDNN's bf16 backward kernels, inputs exact, fp32
      // accumulation, the outputs rounded once to 8 significant bits.
      // float16: widened into oneDNN's float32 kernels, the outputs rounded once to 11 bits.
      for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
        Tensor x = random_tensor(dt, g.xshape(), rng), w = random_tensor(dt, g.wshape(), rng),
               dy = random_tensor(dt, g.yshape(), rng);
        std::vector<double> dx, dw, db;
        ref_grads(g, to_double(x), to_double(w), to_double(dy), &dx, &dw, &db);
        auto out = run_grad_node(transposed ? "ConvTransposeGrad" : "ConvGrad", {dy, x, w}, g.attrs(), {true, true, true}, 2);
        const bool bf = dt == DType::kBFloat16, half = dt == DType::kFloat16;
        const double rt = bf ? 1e-2 : half ? 2e-3 : 1e-4, at = bf ? 5e-2 : half ? 1e-2 : 1e-4,
                     atw = bf ? 2e-1 : half ? 3e-2 : 1e-3;
        EXPECT_TRUE(all_close(out[0], g.xshape(), dx, rt, at)) << dtype_name(dt) << " dX " << g.describe();
        EXPECT_TRUE(all_close(out[1], g.wshape(), dw, rt, atw)) << dtype_name(dt) << " dW " << g.describe();
        EXPECT_TRUE(all_close(out[2], {g.M}, db, rt, atw)) << dtype_name(dt) << " dB " << g.describe();
      }
    }
  }
}

// Training's Winograd (cpu/conv.cpp train_winograd_fits): Conv over weights that are not constants
// (a graph input, as a training graph's parameters are) and ConvGrad's dX, dW and dB through oneDNN's
// Winograd F(4x4, 3x3) kernels, against the double reference. "auto" takes them where a thread
// has 24+ output tiles and both channel counts are 32+ (here 32 -> 48 channels, 2 x 14 x 14: 32
// tiles, so at one thread and not at two), "1" everywhere it fits, "0" never; the Winograd
// results differ from the direct kernels' in the last bits (proof that the path ran).
TEST(GradConv, KernelWinogradTraining) {
  std::mt19937 rng(209);
  Geo g = conv(2, 32, 48, 1, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1});
  const Tensor x = random_tensor(DType::kFloat32, g.xshape(), rng), w = random_tensor(DType::kFloat32, g.wshape(), rng),
               b = random_tensor(DType::kFloat32, {g.M}, rng), dy = random_tensor(DType::kFloat32, g.yshape(), rng);
  std::vector<double> dx, dw, db;
  ref_grads(g, to_double(x), to_double(w), to_double(dy), &dx, &dw, &db);
  // The forward reference: Y[n, m, p] = b[m] + sum over c, k of X W (pads 1).
  const Shape ys = g.yshape();
  const std::vector<double> xd = to_double(x), wd = to_double(w), bd = to_double(b);
  std::vector<double> y(size_t(onnxtrain::shape_numel(ys)));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t m = 0; m < g.M; ++m)
      for (int64_t oh = 0; oh < 14; ++oh)
        for (int64_t ow = 0; ow < 14; ++ow) {
          double acc = bd[size_t(m)];
          for (int64_t c = 0; c < g.C; ++c)
            for (int64_t kh = 0; kh < 3; ++kh)
              for (int64_t kw = 0; kw < 3; ++kw) {
                const int64_t ih = oh - 1 + kh, iw = ow - 1 + kw;
                if (ih >= 0 && ih < 14 && iw >= 0 && iw < 14)
                  acc += xd[size_t(((n * g.C + c) * 14 + ih) * 14 + iw)] * wd[size_t(((m * g.C + c) * 3 + kh) * 3 + kw)];
              }
          y[size_t(((n * g.M + m) * 14 + oh) * 14 + ow)] = acc;
        }
  auto run = [&](int threads, ExecOptions::Winograd mode) {
    ExecOptions eo;
    eo.num_threads = threads;
    eo.winograd = mode;
    ir::Model m;
    m.ir_version = 8;
    m.opsets[""] = 17;
    m.graph = std::make_shared<ir::Graph>();
    ir::Node n;
    n.op_type = "Conv";
    n.inputs = {"x", "w", "b"};
    n.outputs = {"y"};
    n.attrs = g.attrs();
    m.graph->nodes.push_back(n);
    for (auto [name, t] : {std::pair{"x", &x}, {"w", &w}, {"b", &b}})
      m.graph->inputs.push_back(ir::ValueInfo{name, ir::TypeInfo::tensor(t->dtype(), t->shape()), ""});
    m.graph->outputs.push_back(ir::ValueInfo{"y", {}, ""});
    std::vector<Tensor> out = run_model(m, {x, w, b}, eo);
    for (Tensor& t : run_grad_node("ConvGrad", {dy, x, w}, g.attrs(), {true, true, true}, eo)) out.push_back(t);
    return out;  // Y, dX, dW, dB
  };
  using W = ExecOptions::Winograd;
  const auto auto1 = run(1, W::kAuto), wino1 = run(1, W::kAlways), direct1 = run(1, W::kNever);
  const auto auto2 = run(2, W::kAuto), wino2 = run(2, W::kAlways), direct2 = run(2, W::kNever);
  const std::vector<std::pair<Shape, const std::vector<double>*>> want = {
      {ys, &y}, {g.xshape(), &dx}, {g.wshape(), &dw}, {{g.M}, &db}};
  const char* names[] = {"Y", "dX", "dW", "dB"};
  for (const auto* r : {&auto1, &wino1, &direct1, &auto2, &wino2, &direct2})
    for (size_t i = 0; i < 4; ++i)
      EXPECT_TRUE(all_close((*r)[i], want[i].first, *want[i].second, 1e-4, i == 2 ? 1e-3 : 1e-4)) << names[i];
  auto same = [](const std::vector<Tensor>& a, const std::vector<Tensor>& b, size_t i) {
    return to_double(a[i]) == to_double(b[i]);
  };
  // Which kernels ran: Winograd's Y, dX and dW (dB is a plain sum over dY in both) differ from the
  // direct kernels'. oneDNN has Winograd F(4x4, 3x3) on AVX-512 CPUs only; elsewhere "1" falls
  // back to the direct kernels.
  const bool avx512 = onnxtrain::kernels::cpu::nchwc512::available();
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(names[i]);
    EXPECT_TRUE(same(auto2, direct2, i));  // 32 tiles: under 24 a thread at two threads
    EXPECT_TRUE(same(auto1, avx512 ? wino1 : direct1, i));
    if (avx512) {
      EXPECT_FALSE(same(wino1, direct1, i));
      EXPECT_FALSE(same(wino2, direct2, i));
    }
  }
}

TEST(GradConv, KernelErrors) {
  const Geo g = conv(2, 2, 3, 1, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0});
  Tensor x = Tensor::zeros(DType::kFloat32, g.xshape()), w = Tensor::zeros(DType::kFloat32, g.wshape());
  try {
    run_grad_node("ConvGrad", {Tensor::zeros(DType::kFloat32, {2, 3, 4, 4}), x, w}, g.attrs(), {true, true, true}, 1);
    ADD_FAILURE() << "expected an error";
  } catch (const onnxtrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find("node_ConvGrad"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not match the output shape"), std::string::npos) << e.what();
  }
}

TEST(GradConv, KernelEmptyBatch) {
  const Geo g = conv(2, 2, 3, 1, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0});
  Geo e = g;
  e.N = 0;
  auto out = run_grad_node("ConvGrad", {Tensor::zeros(DType::kFloat32, e.yshape()), Tensor::zeros(DType::kFloat32, e.xshape()),
                                        Tensor::zeros(DType::kFloat32, e.wshape())},
                           g.attrs(), {true, true, true}, 1);
  EXPECT_EQ(out[0].shape(), e.xshape());
  EXPECT_TRUE(all_close(out[1], e.wshape(), std::vector<double>(size_t(onnxtrain::shape_numel(e.wshape())), 0.0)));
}
