// Pooling gradients: finite-difference tests of the rules (float64, default and portable mode) and
// the com.onnxtrain.<Pool>Grad kernels against a naive double-precision reference (ties in max
// pooling: the first maximum, as PyTorch).
#include <cmath>
#include <cstring>

#include "grad_linalg_util.h"

using namespace ot_test;

namespace {

// Options of a com.onnxtrain gradient kernel's run (opset 17) at `threads`.
RunOptions grad_kernel_options(int threads = 1) {
  RunOptions o;
  o.domain = "com.onnxtrain";
  o.opset = 17;
  o.threads = threads;
  return o;
}


std::string str(const Shape& s) { return onnxtrain::shape_to_string(s); }

enum class Kind { kMax, kAvg, kLp };

struct PGeo {
  size_t nd = 2;
  int64_t N = 2, C = 2;
  Shape in, k, s, d, pb, pe;
  std::string auto_pad = "NOTSET";
  bool ceil = false, include_pad = false, col_major = false, global = false;
  double p = 2.0;

  std::string describe() const {
    return "N=" + std::to_string(N) + " C=" + std::to_string(C) + " in" + str(in) + " k" + str(k) + " s" + str(s) +
           " d" + str(d) + " pb" + str(pb) + " pe" + str(pe) + " " + auto_pad + (ceil ? " ceil" : "") +
           (include_pad ? " include_pad" : "") + (col_major ? " col_major" : "") + (global ? " global" : "") +
           " p=" + std::to_string(p);
  }
  // Forward attributes of `kind` at `opset` (only those the operator has there).
  std::vector<ir::Attribute> attrs(Kind kind, int64_t opset) const {
    if (global) return kind == Kind::kLp ? std::vector<ir::Attribute>{attr_int("p", int64_t(p))} : std::vector<ir::Attribute>{};
    std::vector<ir::Attribute> a = {attr_ints("kernel_shape", k), attr_ints("strides", s), pad_attr(auto_pad, pb, pe)};
    if (kind == Kind::kMax && opset >= 10) a.push_back(attr_ints("dilations", d));
    if (kind == Kind::kMax && opset >= 8) a.push_back(attr_int("storage_order", col_major));
    if (kind != Kind::kLp && opset >= 10) a.push_back(attr_int("ceil_mode", ceil));
    if (kind == Kind::kAvg && opset >= 7) a.push_back(attr_int("count_include_pad", include_pad));
    if (kind == Kind::kLp) a.push_back(attr_int("p", int64_t(p)));
    return a;
  }
  Shape xshape() const {
    Shape r = {N, C};
    r.insert(r.end(), in.begin(), in.end());
    return r;
  }
  // Output size along dim i for explicit pads (NOTSET), PyTorch's ceil_mode rule included.
  int64_t out(size_t i) const {
    if (global) return 1;
    const int64_t ext = (k[i] - 1) * d[i] + 1, span = in[i] + pb[i] + pe[i] - ext;
    int64_t o = (ceil ? (span + s[i] - 1) / s[i] : span / s[i]) + 1;
    if (ceil && (o - 1) * s[i] >= in[i] + pb[i]) --o;
    return o;
  }
  Shape yshape() const {
    Shape r = {N, C};
    for (size_t i = 0; i < nd; ++i) r.push_back(out(i));
    return r;
  }
};

// dX by visiting every window (positions in row-major kernel order).
std::vector<double> ref_pool_grad(const PGeo& g, Kind kind, const std::vector<double>& x, const std::vector<double>& dy) {
  const Shape xs = g.xshape(), ys = g.yshape(), ysp(ys.begin() + 2, ys.end());
  const Shape k = g.global ? g.in : g.k;
  std::vector<double> dx(x.size(), 0.0);
  const int64_t planes = g.N * g.C, pin = onnxtrain::shape_numel(g.in), pout = onnxtrain::shape_numel(ysp),
                nk = onnxtrain::shape_numel(k);
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t o = 0; o < pout; ++o) {
      const auto oi = unravel(o, ysp);
      std::vector<int64_t> valid;  // plane offsets inside X
      int64_t in_pad = 0;          // window positions inside the padded input
      for (int64_t kf = 0; kf < nk; ++kf) {
        const auto ki = unravel(kf, k);
        std::vector<int64_t> q(g.nd);
        bool inside = true, padded = true;
        for (size_t i = 0; i < g.nd; ++i) {
          const int64_t pb = g.global ? 0 : g.pb[i], pe = g.global ? 0 : g.pe[i];
          q[i] = oi[i] * (g.global ? 1 : g.s[i]) - pb + ki[i] * (g.global ? 1 : g.d[i]);
          inside = inside && q[i] >= 0 && q[i] < g.in[i];
          padded = padded && q[i] >= -pb && q[i] < g.in[i] + pe;
        }
        in_pad += padded;
        if (inside) valid.push_back(ravel(q, g.in));
      }
      const double gy = dy[size_t(pl * pout + o)];
      const double* xp = x.data() + pl * pin;
      double* dxp = dx.data() + pl * pin;
      if (kind == Kind::kMax) {
        int64_t best = -1;
        for (int64_t q : valid)
          if (best < 0 || xp[q] > xp[best]) best = q;
        if (best >= 0) dxp[best] += gy;
      } else if (kind == Kind::kAvg) {
        const double n = g.include_pad ? double(in_pad) : double(valid.size());
        for (int64_t q : valid) dxp[q] += gy / n;
      } else {
        double sum = 0;
        for (int64_t q : valid) sum += std::pow(std::abs(xp[q]), g.p);
        const double y = std::pow(sum, 1.0 / g.p);
        if (y == 0) continue;
        for (int64_t q : valid)
          dxp[q] += gy * std::copysign(std::pow(std::abs(xp[q]), g.p - 1), xp[q]) / std::pow(y, g.p - 1);
      }
    }
  return dx;
}

const char* op_name(Kind kind, bool global) {
  if (global) return kind == Kind::kMax ? "GlobalMaxPool" : kind == Kind::kAvg ? "GlobalAveragePool" : "GlobalLpPool";
  return kind == Kind::kMax ? "MaxPool" : kind == Kind::kAvg ? "AveragePool" : "LpPool";
}

// Finite-difference check, default and portable mode; `portable_custom`: portable mode still
// needs the custom op.
void fd(const PGeo& g, Kind kind, uint32_t seed, int64_t opset = 17, bool portable_custom = false,
        size_t num_outputs = 1) {
  std::mt19937 rng(seed);
  GradCheck s;
  s.op = op_name(kind, g.global);
  s.inputs = {kind == Kind::kMax ? distinct_tensor(g.xshape(), rng) : random_tensor(DType::kFloat64, g.xshape(), rng)};
  s.attrs = g.attrs(kind, opset);
  s.opset = opset;
  s.num_outputs = num_outputs;
  s.seed = seed;
  const std::string what = std::string(s.op) + " opset " + std::to_string(opset) + " " + g.describe();
  expect_gradient(s, what);
  EXPECT_EQ(uses_custom(gradient_ops(s, true)), portable_custom) << what;
}

PGeo geo(size_t nd, Shape in, Shape k, Shape s, Shape pb, Shape pe) {
  PGeo g;
  g.nd = nd, g.in = in, g.k = k, g.s = s, g.pb = pb, g.pe = pe, g.d = Shape(nd, 1);
  return g;
}

}  // namespace

GRAD_COVERS(GradPool, MaxPool, "MaxPool");
TEST(GradPool, MaxPool) {
  fd(geo(2, {5, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}), Kind::kMax, 1);  // overlapping windows: ScatterElements add
  PGeo g = geo(2, {7, 6}, {2, 3}, {2, 1}, {1, 0}, {0, 1});
  g.d = {2, 1};
  g.ceil = true;
  fd(g, Kind::kMax, 2);  // dilations, ceil_mode
  g = geo(2, {5, 5}, {2, 2}, {1, 2}, {0, 0}, {1, 1});
  g.col_major = true;    // storage_order 1 with the Indices output: recomputed row-major
  fd(g, Kind::kMax, 3, 17, false, 2);
  g.col_major = false;   // Indices output used as it is
  fd(g, Kind::kMax, 4, 17, false, 2);
  fd(geo(1, {9}, {3}, {2}, {1}, {2}), Kind::kMax, 5);
  fd(geo(3, {4, 3, 4}, {2, 2, 3}, {2, 1, 1}, {0, 1, 1}, {1, 0, 1}), Kind::kMax, 6);
  for (const char* ap : {"SAME_UPPER", "SAME_LOWER", "VALID"}) {
    g = geo(2, {5, 6}, {3, 2}, {2, 2}, {0, 0}, {0, 0});
    g.auto_pad = ap;
    fd(g, Kind::kMax, 7);
  }
}

TEST(GradPool, MaxPoolOpsets) {
  // Before opset 16 ScatterElements cannot add: overlapping windows keep the custom op, disjoint
  // ones scatter without reduction (opset 11+); no ScatterElements before opset 11.
  fd(geo(2, {5, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}), Kind::kMax, 10, 13, true);
  fd(geo(2, {6, 6}, {2, 2}, {2, 2}, {0, 0}, {0, 0}), Kind::kMax, 11, 13, false);
  fd(geo(2, {6, 5}, {2, 2}, {1, 1}, {0, 0}, {0, 0}), Kind::kMax, 12, 10, true);
  fd(geo(2, {6, 6}, {2, 2}, {2, 2}, {0, 0}, {0, 0}), Kind::kMax, 13, 9, true);
}

GRAD_COVERS(GradPool, AveragePool, "AveragePool");
TEST(GradPool, AveragePool) {
  for (bool incl : {false, true}) {
    PGeo g = geo(2, {5, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1});
    g.include_pad = incl;
    fd(g, Kind::kAvg, 20);
    g = geo(2, {6, 7}, {3, 2}, {2, 3}, {1, 0}, {0, 1});
    g.include_pad = incl;
    g.ceil = true;  // windows past the end pad (divisor of count_include_pad 1 stops at the pad)
    fd(g, Kind::kAvg, 21);
    fd(geo(1, {8}, {3}, {2}, {2}, {0}), Kind::kAvg, 22);
    g = geo(3, {3, 4, 4}, {2, 3, 2}, {1, 2, 2}, {1, 1, 0}, {0, 1, 1});
    g.include_pad = incl;
    fd(g, Kind::kAvg, 23);
    for (const char* ap : {"SAME_UPPER", "SAME_LOWER", "VALID"}) {
      g = geo(2, {5, 6}, {3, 2}, {2, 2}, {0, 0}, {0, 0});
      g.auto_pad = ap;
      g.include_pad = incl;
      fd(g, Kind::kAvg, 24);
    }
  }
  fd(geo(2, {5, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}), Kind::kAvg, 25, 8);  // no ceil_mode yet
}

GRAD_COVERS(GradPool, LpPool, "LpPool");
TEST(GradPool, LpPool) {
  for (double p : {1.0, 2.0, 3.0}) {
    PGeo g = geo(2, {5, 6}, {3, 2}, {2, 1}, {1, 0}, {1, 1});
    g.p = p;
    fd(g, Kind::kLp, 30);
    g = geo(1, {7}, {3}, {2}, {0}, {1});
    g.p = p;
    fd(g, Kind::kLp, 31, 11);
  }
}

GRAD_COVERS(GradPool, GlobalPools, "GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool");
TEST(GradPool, GlobalPools) {
  PGeo g = geo(2, {4, 5}, {}, {}, {}, {});
  g.global = true;
  for (Kind kind : {Kind::kMax, Kind::kAvg, Kind::kLp}) {
    fd(g, kind, 40);
    PGeo g3 = geo(3, {2, 3, 2}, {}, {}, {}, {});
    g3.global = true;
    g3.p = 3;
    fd(g3, kind, 41, 13);
  }
  fd(g, Kind::kMax, 42, 9, true);  // no ScatterElements before opset 11
  // Symbolic shapes: the divisor of GlobalAveragePool from run-time sizes.
  std::mt19937 rng(43);
  GradCheck s;
  s.op = "GlobalAveragePool";
  s.inputs = {random_tensor(DType::kFloat64, {2, 3, 4, 2}, rng)};
  s.symbolic_shapes = true;
  s.seed = 43;
  expect_gradient(s, "GlobalAveragePool symbolic");
}

TEST(GradPool, SymbolicShapes) {
  // Stride 1 without ceil_mode needs no static spatial dims; stride 2 falls back to the custom op
  // in portable mode (the left-over positions are unknown).
  for (int64_t st : {1, 2})
    for (Kind kind : {Kind::kAvg, Kind::kMax, Kind::kLp}) {
      std::mt19937 rng(50);
      PGeo g = geo(2, {5, 6}, {3, 2}, {st, st}, {1, 0}, {1, 1});
      GradCheck s;
      s.op = op_name(kind, false);
      s.inputs = {kind == Kind::kMax ? distinct_tensor(g.xshape(), rng) : random_tensor(DType::kFloat64, g.xshape(), rng)};
      s.attrs = g.attrs(kind, 17);
      s.symbolic_shapes = true;
      s.seed = 50;
      expect_gradient(s, std::string(s.op) + " symbolic " + g.describe());
    }
}

namespace {

// The gradient kernel against ref_pool_grad on random geometries (explicit pads), inputs with
// ties for max pooling.
// wide: rows long enough for the 8-column vector path of max pooling.
void check_pool_grad_kernel(Kind kind, bool global, DType dt, uint32_t seed, int trials, bool wide = false) {
  std::mt19937 rng(seed);
  auto r = [&](int lo, int hi) { return rand_int(rng, lo, hi); };
  const std::string op = op_name(kind, global);
  for (int t = 0; t < trials; ++t) {
    PGeo g;
    g.global = global;
    g.nd = size_t(r(1, 3));
    g.N = r(1, 2), g.C = r(1, 3);
    g.p = double(r(1, 3));
    for (size_t i = 0; i < g.nd; ++i) {
      g.k.push_back(r(1, 3));
      g.s.push_back(r(1, 3));
      g.d.push_back(kind == Kind::kMax ? r(1, 2) : 1);
      g.pb.push_back(r(0, g.k[i] - 1));
      g.pe.push_back(r(0, g.k[i] - 1));
      g.in.push_back((g.k[i] - 1) * g.d[i] + 1 + r(0, 6));
    }
    if (wide) g.in.back() += r(16, 40);
    g.ceil = kind != Kind::kLp && r(0, 2) == 0;  // LpPool has no ceil_mode before opset 18
    g.include_pad = r(0, 1) == 1;
    Tensor x = random_tensor(dt, g.xshape(), rng, -1, 1);
    if (kind == Kind::kMax && t % 2 == 0) {  // many ties
      std::vector<double> v = to_double(x);
      for (auto& e : v) e = std::round(e);
      x = from_double(dt, g.xshape(), v);
    }
    Tensor dy = random_tensor(dt, g.yshape(), rng);
    const auto e = ref_pool_grad(g, kind, to_double(x), to_double(dy));
    const double tol = dt == DType::kFloat64 ? 1e-10 : dt == DType::kFloat32 ? 1e-5 : 2e-2;
    const std::string what = op + "Grad " + g.describe() + " seed " + std::to_string(seed) + " trial " + std::to_string(t);
    std::vector<ir::Attribute> attrs = g.attrs(kind, 17);
    if (kind == Kind::kLp) {  // the gradient op takes p as a float
      attrs.erase(std::remove_if(attrs.begin(), attrs.end(), [](const ir::Attribute& a) { return a.name == "p"; }),
                  attrs.end());
      attrs.push_back(attr_float("p", float(g.p)));
    }
    RunOptions o = grad_kernel_options(1 + t % 2);
    try {
      std::vector<Tensor> in = {dy, x};
      if (kind == Kind::kLp) {
        RunOptions fo;
        fo.opset = 17;
        in.push_back(run_node(op, {x}, g.attrs(kind, 17), fo)[0]);
      }
      auto dx = run_node(op + "Grad", in, attrs, o);
      EXPECT_TRUE(all_close(dx[0], g.xshape(), e, tol, tol)) << what;
      if (kind == Kind::kMax && !global) {  // through MaxPool's Indices
        RunOptions fo;
        fo.opset = 17;
        fo.num_outputs = 2;
        auto yi = run_node(op, {x}, attrs, fo);
        auto dx2 = run_node(op + "Grad", {dy, x, yi[1]}, attrs, o);
        EXPECT_TRUE(all_close(dx2[0], g.xshape(), e, tol, tol)) << what << " with Indices";
      }
    } catch (const std::exception& ex) {
      ADD_FAILURE() << what << ": " << ex.what();
    }
  }
}

}  // namespace

TEST(GradPool, KernelMaxFloat) { check_pool_grad_kernel(Kind::kMax, false, DType::kFloat32, 101, 60); }
TEST(GradPool, KernelMaxDouble) { check_pool_grad_kernel(Kind::kMax, false, DType::kFloat64, 102, 40); }
TEST(GradPool, KernelMaxFloatWideRows) { check_pool_grad_kernel(Kind::kMax, false, DType::kFloat32, 109, 60, true); }
TEST(GradPool, KernelMaxFloat16) { check_pool_grad_kernel(Kind::kMax, false, DType::kFloat16, 103, 10); }
TEST(GradPool, KernelAvgFloat) { check_pool_grad_kernel(Kind::kAvg, false, DType::kFloat32, 104, 60); }
TEST(GradPool, KernelAvgDouble) { check_pool_grad_kernel(Kind::kAvg, false, DType::kFloat64, 105, 40); }
TEST(GradPool, KernelLpDouble) { check_pool_grad_kernel(Kind::kLp, false, DType::kFloat64, 106, 40); }
TEST(GradPool, KernelGlobal) {
  for (Kind kind : {Kind::kMax, Kind::kAvg, Kind::kLp}) {
    check_pool_grad_kernel(kind, true, DType::kFloat32, 107, 10);
    check_pool_grad_kernel(kind, true, DType::kFloat64, 108, 10);
  }
}

TEST(GradPool, KernelMaxTiesGoToTheFirst) {
  // All-equal window: the whole gradient lands on its first (row-major) element.
  RunOptions o = grad_kernel_options();
  Tensor x = from_double(DType::kFloat32, {1, 1, 2, 3}, {1, 1, 1, 1, 1, 1});
  Tensor dy = from_double(DType::kFloat32, {1, 1, 1, 2}, {2, 3});
  auto dx = run_node("MaxPoolGrad", {dy, x}, {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {1, 1})}, o);
  EXPECT_TRUE(all_close(dx[0], {1, 1, 2, 3}, {2, 3, 0, 0, 0, 0}));
}

TEST(GradPool, KernelMax2x2Stride2) {
  // The direct path of the common CNN pool (2x2, stride 2, no pads): odd and even sizes (rows and
  // columns outside every window), ties and -inf windows, against the naive reference.
  std::mt19937 rng(110);
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t h = 2; h <= 7; ++h)
    for (int64_t w = 2; w <= 19; w += 3) {
      PGeo g;
      g.N = 2, g.C = 3;
      g.in = {h, w}, g.k = {2, 2}, g.s = {2, 2}, g.d = {1, 1}, g.pb = {0, 0}, g.pe = {0, 0};
      std::vector<double> v = to_double(random_tensor(DType::kFloat32, g.xshape(), rng, -2, 2));
      for (size_t i = 0; i < v.size(); ++i) {
        if (i % 3 == 0) v[i] = std::round(v[i]);  // ties
        if (i % 11 == 0) v[i] = -inf;
      }
      for (size_t i = 0; i < 4 && i < v.size(); ++i) v[i] = -inf;  // a whole -inf window (or more)
      Tensor x = from_double(DType::kFloat32, g.xshape(), v);
      Tensor dy = random_tensor(DType::kFloat32, g.yshape(), rng);
      const auto e = ref_pool_grad(g, Kind::kMax, to_double(x), to_double(dy));
      for (int threads : {1, 2}) {
        RunOptions o = grad_kernel_options(threads);
        auto dx = run_node("MaxPoolGrad", {dy, x}, g.attrs(Kind::kMax, 17), o);
        EXPECT_TRUE(all_close(dx[0], g.xshape(), e, 0, 0)) << g.describe() << " threads " << threads;
      }
    }
}

TEST(GradPool, KernelMax3x3Stride2) {
  // The direct path of the stem and reduction pools (3x3, stride 2, pads of 0 or 1, ceil mode):
  // rows and columns around the eight-window vector blocks and their edges, ties, -inf windows
  // and NaN, with and without relu_mask, at 1 and 2 threads, against the naive reference; and bit
  // for bit the scatter through MaxPool's own Indices (the same first maxima, summed in the same
  // order).
  std::mt19937 rng(111);
  const double inf = std::numeric_limits<double>::infinity();
  int trial = 0;
  for (int64_t h : {3, 4, 7, 10})
    for (int64_t w : {3, 8, 17, 18, 19, 34, 41, 56})
      for (int pads = 0; pads < 4; ++pads) {
        ++trial;
        PGeo g;
        g.N = 1, g.C = 2;
        g.in = {h, w}, g.k = {3, 3}, g.s = {2, 2}, g.d = {1, 1};
        g.pb = {pads & 1, pads >> 1}, g.pe = {pads >> 1, trial % 2};
        g.ceil = trial % 3 == 0;
        std::vector<double> v = to_double(random_tensor(DType::kFloat32, g.xshape(), rng, -2, 2));
        for (size_t i = 0; i < v.size(); ++i) {
          if (i % 3 == 0) v[i] = std::round(v[i]);  // ties, zeros among them
          if (i % 11 == 0) v[i] = -inf;
        }
        for (int64_t r = 0; r < 3 && r < h; ++r)  // a whole -inf window at the first output
          for (int64_t c = 0; c < 3; ++c) v[size_t(r * w + c)] = -inf;
        if (trial % 4 == 1) v[size_t(w + w / 2)] = std::nan("");
        Tensor x = from_double(DType::kFloat32, g.xshape(), v);
        Tensor dy = random_tensor(DType::kFloat32, g.yshape(), rng);
        const std::vector<double> xd = to_double(x);
        for (bool relu : {false, true}) {
          std::vector<double> e = ref_pool_grad(g, Kind::kMax, xd, to_double(dy));
          if (relu)
            for (size_t i = 0; i < e.size(); ++i) e[i] = xd[i] > 0 ? e[i] : 0.0;
          std::vector<ir::Attribute> a = g.attrs(Kind::kMax, 17);
          if (relu) a.push_back(attr_int("relu_mask", 1));
          for (int threads : {1, 2}) {
            RunOptions o = grad_kernel_options(threads);
            auto dx = run_node("MaxPoolGrad", {dy, x}, a, o);
            EXPECT_TRUE(all_close(dx[0], g.xshape(), e, 1e-6, 1e-6))
                << g.describe() << (relu ? " relu_mask" : "") << " threads " << threads;
            if (relu || threads == 2) continue;
            RunOptions fo;
            fo.opset = 17;
            fo.num_outputs = 2;
            auto yi = run_node("MaxPool", {x}, g.attrs(Kind::kMax, 17), fo);
            auto dx2 = run_node("MaxPoolGrad", {dy, x, yi[1]}, g.attrs(Kind::kMax, 17), o);
            EXPECT_EQ(std::memcmp(dx[0].raw_data(), dx2[0].raw_data(), dx[0].nbytes()), 0)
                << g.describe() << ": not the bits of the scatter through Indices";
          }
        }
      }
}

TEST(GradPool, KernelMaxReluMask) {
  // MaxPoolGrad with relu_mask (train/fusion.h's fuse_relu_grad): ReluGrad(dX, X) of the naive
  // reference, on the 2x2 stride-2 direct path (odd sizes, vector tails) and on overlapping padded
  // windows (the general loop), with zeros, negatives, ties and -inf, in float32, float64 and
  // float16; Indices or another pool kind with relu_mask name what is wrong.
  std::mt19937 rng(130);
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    Shape in, k, s, pb;
  };
  const std::vector<Case> cases = {{{5, 11}, {2, 2}, {2, 2}, {0, 0}}, {{6, 26}, {2, 2}, {2, 2}, {0, 0}},
                                   {{7, 9}, {3, 3}, {2, 2}, {1, 1}}, {{5, 6}, {3, 3}, {1, 1}, {1, 1}}};
  for (const Case& c : cases)
    for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16}) {
      PGeo g;
      g.N = 2, g.C = 3;
      g.in = c.in, g.k = c.k, g.s = c.s, g.d = {1, 1}, g.pb = c.pb, g.pe = c.pb;
      std::vector<double> v = to_double(random_tensor(DType::kFloat32, g.xshape(), rng, -2, 2));
      for (size_t i = 0; i < v.size(); ++i) {
        if (i % 3 == 0) v[i] = std::round(v[i]);  // ties, zeros among them
        if (i % 13 == 0) v[i] = -inf;
        if (i % 7 == 0) v[i] = 0;
      }
      for (size_t i = 0; i < 4; ++i) v[i] = -inf;  // a whole -inf window
      Tensor x = from_double(dt, g.xshape(), v);
      Tensor dy = from_double(dt, g.yshape(), to_double(random_tensor(DType::kFloat32, g.yshape(), rng)));
      const std::vector<double> xd = to_double(x);
      std::vector<double> e = ref_pool_grad(g, Kind::kMax, xd, to_double(dy));
      for (size_t i = 0; i < e.size(); ++i) e[i] = xd[i] > 0 ? e[i] : 0.0;
      std::vector<ir::Attribute> a = g.attrs(Kind::kMax, 17);
      a.push_back(attr_int("relu_mask", 1));
      // Disjoint windows route single values (exact); overlapping ones sum in the compute type.
      const double tol = c.k == c.s ? 0 : dt == DType::kFloat64 ? 1e-10 : dt == DType::kFloat32 ? 1e-5 : 2e-2;
      for (int threads : {1, 2}) {
        RunOptions o = grad_kernel_options(threads);
        auto dx = run_node("MaxPoolGrad", {dy, x}, a, o);
        EXPECT_TRUE(all_close(dx[0], g.xshape(), e, tol, tol)) << g.describe() << " " << dtype_name(dt) << " threads " << threads;
      }
    }
  RunOptions o = grad_kernel_options();
  const std::vector<ir::Attribute> a = {attr_ints("kernel_shape", {2, 2}), attr_int("relu_mask", 1)};
  Tensor x = Tensor::zeros(DType::kFloat32, {1, 1, 2, 2});
  for (const auto& [op, in, what] :
       {std::tuple{"MaxPoolGrad", std::vector<Tensor>{Tensor::zeros(DType::kFloat32, {1, 1, 1, 1}), x,
                                                      Tensor::from_vector<int64_t>({1, 1, 1, 1}, {0})},
                   "relu_mask is not implemented with MaxPool's Indices"},
        std::tuple{"AveragePoolGrad", std::vector<Tensor>{Tensor::zeros(DType::kFloat32, {1, 1, 1, 1}), x},
                   "relu_mask applies to MaxPoolGrad only"}}) {
    try {
      run_node(op, in, a, o);
      ADD_FAILURE() << "expected an error: " << what;
    } catch (const onnxtrain::Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
}

TEST(GradPool, KernelErrors) {
  RunOptions o = grad_kernel_options();
  const std::vector<ir::Attribute> a = {attr_ints("kernel_shape", {2, 2})};
  auto expect_error = [&](const std::vector<Tensor>& in, const char* what) {
    try {
      run_node("MaxPoolGrad", in, a, o);
      ADD_FAILURE() << "expected an error: " << what;
    } catch (const onnxtrain::Error& e) {
      EXPECT_NE(std::string(e.what()).find("node_MaxPoolGrad"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  Tensor x = Tensor::zeros(DType::kFloat32, {1, 1, 3, 3});
  expect_error({Tensor::zeros(DType::kFloat32, {1, 1, 3, 3}), x}, "does not match the output shape");
  expect_error({Tensor::zeros(DType::kFloat32, {1, 1, 2, 2}), x, Tensor::from_vector<int64_t>({1, 1, 2, 2}, {0, 1, 9, 3})},
               "outside its plane");
}

TEST(GradPool, WindowsFarWiderThanTheInput) {
  // kernel_shape [2^16 + 1, 2^16 + 1, 1] centred by its pads on a 2x3x2 input: every window covers
  // the whole of the first two dims, so Y[., ., k] is the max / mean / L2 norm of X[:, :, k], and
  // the gradients go to the first maximum / spread evenly. The offsets table was sized by the
  // kernel (2^32 positions, 32 GiB) rather than by the input.
  const int64_t K = (int64_t(1) << 16) + 1, h = (K - 1) / 2;
  std::mt19937 rng(120);
  const Shape xs = {1, 1, 2, 3, 2};
  std::vector<double> xv(12);
  for (auto& v : xv) v = std::uniform_real_distribution<double>(-2, 2)(rng);
  const Tensor x = from_double(DType::kFloat32, xs, xv);
  std::vector<double> dyv(12);
  for (auto& v : dyv) v = std::uniform_real_distribution<double>(-1, 1)(rng);
  const Tensor dy = from_double(DType::kFloat32, xs, dyv);
  auto attrs = [&] {
    return std::vector<ir::Attribute>{attr_ints("kernel_shape", {K, K, 1}), attr_ints("pads", {h, h, 0, h, h, 0})};
  };
  // Naive references over the 6 inputs of each k (X[i, k] at xv[2 i + k]).
  std::vector<double> mx(12), mean(12), l2(12), dmax(12, 0.0), davg(12, 0.0);
  for (int k = 0; k < 2; ++k) {
    int first = k;
    double s = 0, s2 = 0, g = 0;
    for (int i = 0; i < 6; ++i) {
      const double v = xv[size_t(2 * i + k)];
      if (v > xv[size_t(first)]) first = 2 * i + k;
      s += v, s2 += v * v, g += dyv[size_t(2 * i + k)];
    }
    for (int i = 0; i < 6; ++i) {
      mx[size_t(2 * i + k)] = xv[size_t(first)], mean[size_t(2 * i + k)] = s / 6, l2[size_t(2 * i + k)] = std::sqrt(s2);
      davg[size_t(2 * i + k)] = g / 6;
    }
    dmax[size_t(first)] = g;
  }
  EXPECT_TRUE(all_close(run_node("MaxPool", {x}, attrs())[0], xs, mx));
  EXPECT_TRUE(all_close(run_node("AveragePool", {x}, attrs())[0], xs, mean));
  auto lp = attrs();
  lp.push_back(attr_int("p", 2));
  EXPECT_TRUE(all_close(run_node("LpPool", {x}, lp)[0], xs, l2));
  RunOptions o;
  o.domain = "com.onnxtrain";
  EXPECT_TRUE(all_close(run_node("MaxPoolGrad", {dy, x}, attrs(), o)[0], xs, dmax));
  EXPECT_TRUE(all_close(run_node("AveragePoolGrad", {dy, x}, attrs(), o)[0], xs, davg));
}
