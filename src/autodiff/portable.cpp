// Portable mode's gradients of the windowed, slicing and resizing operators: the same gradients as
// their com.onnxtrain kernels (ConvGrad, <Pool>Grad, SliceGrad, PadGrad, ResizeGrad), expressed
// with standard ONNX operators only, where the model's opset and static shapes allow (each returns
// "" / false otherwise, and the rule emits the com.onnxtrain node). See portable.h.
#include "autodiff/portable.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>

#include "autodiff/rule_helpers.h"

namespace onnxtrain::autodiff::detail {

namespace {

// Geometry of a windowed node as far as the static shapes tell, for the portable expansions.
// Conv and the pools are read as they are; ConvTranspose as the direct convolution it is the
// adjoint of (in: its output's spatial dims, out: its input's).
struct Win {
  size_t nd = 0;
  std::vector<int64_t> in, out, k, s, d, pb, pe;  // in / out: -1 when unknown
  std::vector<int64_t> extra;  // ceil_mode: how far the last window reaches past the end pad
  std::vector<int64_t> rest;   // input positions after the last window (the adjoint's output_padding)
  bool known = true;           // pads, extra and rest are known (false: needed static spatial dims)
  int64_t ext(size_t i) const { return (k[i] - 1) * d[i] + 1; }
  // Attributes of a Conv / ConvTranspose with this geometry (end pads grown by extra).
  std::vector<ir::Attribute> attrs(int64_t group, bool output_padding) const {
    std::vector<int64_t> pads = pb;
    for (size_t i = 0; i < nd; ++i) pads.push_back(pe[i] + extra[i]);
    std::vector<ir::Attribute> a = {intsattr("kernel_shape", k), intsattr("strides", s), intsattr("dilations", d),
                                    intsattr("pads", pads), iattr("group", group)};
    if (output_padding) a.push_back(intsattr("output_padding", rest));
    return a;
  }
};

// Common part of the windows below; kernel: spatial kernel dims. Unknown rank or kernel dims
// leave the window unknown.
Win window_of(Ctx& c, const std::vector<int64_t>& kernel) {
  Win w;
  const int64_t r = c.rank(c.I(0));
  w.nd = r < 3 ? 0 : size_t(r - 2);
  w.known = r >= 3 && kernel.size() == w.nd;
  for (int64_t v : kernel) w.known = w.known && v >= 1;
  if (!w.known) return w;
  w.k = kernel;
  w.s = c.attr_ints("strides", std::vector<int64_t>(w.nd, 1));
  w.d = c.attr_ints("dilations", std::vector<int64_t>(w.nd, 1));
  if (w.s.size() != w.nd || w.d.size() != w.nd) c.fail("strides / dilations do not match the spatial rank");
  w.in.assign(w.nd, -1), w.out.assign(w.nd, -1), w.pb.assign(w.nd, 0), w.pe.assign(w.nd, 0);
  w.extra.assign(w.nd, 0), w.rest.assign(w.nd, 0);
  const std::vector<int64_t> pads = c.attr_ints("pads", {});
  if (c.attr_string("auto_pad", "NOTSET") == "NOTSET" && !pads.empty()) {
    if (pads.size() != 2 * w.nd) c.fail("pads has ", pads.size(), " values for ", w.nd, " spatial dims");
    for (size_t i = 0; i < w.nd; ++i) w.pb[i] = pads[i], w.pe[i] = pads[w.nd + i];
  }
  return w;
}

Win forward_window(Ctx& c, const std::vector<int64_t>& kernel) {
  Win w = window_of(c, kernel);
  if (!w.known) return w;
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER", ceil = c.attr_int("ceil_mode", 0) != 0;
  for (size_t i = 0; i < w.nd; ++i) {
    const int64_t in = static_dim(c, c.I(0), i + 2), s = w.s[i], ext = w.ext(i);
    w.in[i] = in;
    if (same) {
      if (in < 0 && s != 1) {
        w.known = false;
        continue;
      }
      const int64_t total = in < 0 ? ext - 1 : std::max<int64_t>(0, ((in + s - 1) / s - 1) * s + ext - in);
      w.pb[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pe[i] = total - w.pb[i];
    }
    if (in < 0) {  // the last window ends at the end pad only for stride 1 without ceil_mode
      w.known = w.known && s == 1 && !ceil;
      continue;
    }
    const int64_t span = in + w.pb[i] + w.pe[i] - ext;
    if (span < 0) c.fail("the window is larger than the padded input");
    w.out[i] = (ceil ? (span + s - 1) / s : span / s) + 1;
    if (ceil && (w.out[i] - 1) * s >= in + w.pb[i]) --w.out[i];
    const int64_t reach = (w.out[i] - 1) * s + ext;  // from -pb
    w.extra[i] = std::max<int64_t>(0, reach - (in + w.pb[i] + w.pe[i]));
    w.rest[i] = in + w.pb[i] + w.pe[i] + w.extra[i] - reach;
    w.known = w.known && w.rest[i] < s;
  }
  return w;
}

// ConvTranspose X[N, C, in] -> Y[N, M, out] as the adjoint of the direct Conv Y -> X.
Win transposed_window(Ctx& c, const std::vector<int64_t>& kernel) {
  Win w = window_of(c, kernel);
  if (!w.known) return w;
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  std::vector<int64_t> op = c.attr_ints("output_padding", std::vector<int64_t>(w.nd, 0));
  std::vector<int64_t> os = c.attr_ints("output_shape", {});
  if (os.size() == w.nd + 2) os.erase(os.begin(), os.begin() + 2);
  if (op.size() != w.nd || (!os.empty() && os.size() != w.nd)) c.fail("output_padding / output_shape do not match the spatial rank");
  for (size_t i = 0; i < w.nd; ++i) {
    const int64_t in = static_dim(c, c.I(0), i + 2);
    w.out[i] = in;
    if (op[i] >= w.s[i]) w.known = false;  // the direct Conv would give more than `in` outputs
    if (in < 0) {
      w.known = w.known && os.empty() && !same;
      continue;
    }
    const int64_t full = w.s[i] * (in - 1) + op[i] + w.ext(i);
    if (!os.empty() || same) {
      const int64_t total = full - (!os.empty() ? os[i] : in * w.s[i]);
      const int64_t half = total >= 0 ? total / 2 : -((1 - total) / 2);
      w.pb[i] = auto_pad == "SAME_UPPER" ? half : total - half;
      w.pe[i] = total - w.pb[i];
      if (w.pb[i] < 0 || w.pe[i] < 0) w.known = false;  // output past the full result: not a Conv
    }
    w.in[i] = full - w.pb[i] - w.pe[i];
  }
  return w;
}

// dW of the direct convolution X[N, Ci, in] -> dY[N, Co, out] with weights [Co, Ci/G, k]:
//   dW[g*Cog + m, c, k] = sum_{n,o} dY[n, g*Cog + m, o] X[n, g*Cig + c, o*s - pb + k*d],
// itself a convolution over the batch: X as [Cig, G*N, in] (channel g*N + n), dY as weights
// [Co, N, out], group G, stride d, dilation s, the same pads; its output [Cig, Co, k'] (k' > k when
// input positions are left over) is sliced to k and transposed to [Co, Cig, k].
std::string conv_weight_grad(Ctx& c, const std::string& x, const std::string& dy, int64_t G, int64_t Cig, const Win& w) {
  const size_t nd = w.nd;
  std::vector<int64_t> swap01 = {1, 0}, perm = {2, 1, 0}, axes, zeros(nd, 0);
  for (size_t i = 0; i < nd; ++i) swap01.push_back(int64_t(i + 2)), perm.push_back(int64_t(i + 3)), axes.push_back(int64_t(i + 2));
  std::string xin = c.transpose(x, swap01);
  if (G > 1) {
    const std::string x5 = c.reshape(x, shape_with_tail(c, {0, G, Cig}, x, 2));
    xin = c.reshape(c.transpose(x5, perm), shape_with_tail(c, {Cig, -1}, x, 2));
  }
  std::vector<int64_t> pads = w.pb;
  pads.insert(pads.end(), w.pe.begin(), w.pe.end());
  std::string r = c.op("Conv", {xin, c.transpose(dy, swap01)},
                       {intsattr("strides", w.d), intsattr("dilations", w.s), intsattr("pads", pads), iattr("group", G)});
  bool exact = true;
  for (size_t i = 0; i < nd; ++i)
    exact = exact && w.in[i] >= 0 && w.out[i] >= 0 &&
            (w.in[i] + w.pb[i] + w.pe[i] - (w.out[i] - 1) * w.s[i] - 1) / w.d[i] + 1 == w.k[i];
  if (!exact) r = c.slice(r, zeros, w.k, axes);
  return c.transpose(r, swap01);
}

// Spatial kernel of a Conv / ConvTranspose: kernel_shape, else W's static dims (-1 unknown).
std::vector<int64_t> conv_kernel(Ctx& c) {
  std::vector<int64_t> k = c.attr_ints("kernel_shape", {});
  if (!k.empty()) return k;
  const int64_t r = c.rank(c.I(1));
  for (int64_t i = 2; i < r; ++i) k.push_back(static_dim(c, c.I(1), size_t(i)));
  return k;
}

}  // namespace

// Standard-op gradients of Conv / ConvTranspose; false when the geometry needs static shapes the
// model does not give (the caller then emits the custom op).
//   Conv:           dX = ConvTranspose(dY, W) (output_padding: the left-over input positions),
//                   dW = conv_weight_grad(X, dY)
//   ConvTranspose:  dX = Conv(dY, W),  dW = conv_weight_grad(dY, X)     (the direct Conv Y -> X)
//   dB = ReduceSum(dY) over every axis but 1
bool conv_portable(Ctx& c, bool transposed) {
  const Win w = transposed ? transposed_window(c, conv_kernel(c)) : forward_window(c, conv_kernel(c));
  const int64_t G = c.attr_int("group", 1), Wc = static_dim(c, c.I(1), 1);
  if (!w.known || (G > 1 && Wc < 0)) return false;
  const std::string& g = c.GO(0);
  if (c.needs_GI(0)) c.set_GI(0, c.op(transposed ? "Conv" : "ConvTranspose", {g, c.I(1)}, w.attrs(G, !transposed)));
  if (c.needs_GI(1))
    c.set_GI(1, transposed ? conv_weight_grad(c, g, c.I(0), G, Wc, w) : conv_weight_grad(c, c.I(0), g, G, Wc, w));
  if (c.has_input(2) && c.needs_GI(2)) {
    std::vector<int64_t> axes = {0};
    for (size_t i = 0; i < w.nd; ++i) axes.push_back(int64_t(i + 2));
    c.set_GI(2, c.reduce_sum(g, axes, false));
  }
  return true;
}

namespace {

// dX = S^T(g), S the window sum of a pool over X (g shaped like its output): a depthwise
// ConvTranspose with a ones kernel (the end pads grown to the windows ceil_mode adds). Empty
// when the geometry needs static shapes the model does not give.
std::string window_sum_adjoint(Ctx& c, const Win& w, const std::string& g) {
  const int64_t C = static_dim(c, c.I(0), 1);
  if (!w.known || C < 0) return "";
  Shape ks = {C, 1};
  ks.insert(ks.end(), w.k.begin(), w.k.end());
  return c.op("ConvTranspose", {g, c.constant(filled(c, c.I(0), ks, 1.0))}, w.attrs(C, true));
}

// Divisor of AveragePool per output [1, 1, out...]: a Conv of ones with a ones kernel over X's
// spatial extent (count_include_pad 0) or over the padded extent (1).
std::string avg_count(Ctx& c, const Win& w, bool include_pad) {
  Shape ks = {1, 1};
  ks.insert(ks.end(), w.k.begin(), w.k.end());
  std::vector<int64_t> head = {1, 1}, pads = w.pb;
  std::string shape;
  if (include_pad) {  // every in[i] is known here (ceil_mode needs static shapes)
    for (size_t i = 0; i < w.nd; ++i) head.push_back(w.in[i] + w.pb[i] + w.pe[i]), pads[i] = 0;
    shape = c.ints(head);
    for (size_t i = 0; i < w.nd; ++i) pads.push_back(w.extra[i]);
  } else {
    shape = shape_with_tail(c, head, c.I(0), 2);
    for (size_t i = 0; i < w.nd; ++i) pads.push_back(w.pe[i] + w.extra[i]);
  }
  const std::string ones = c.expand(c.scalar_like(1.0, c.I(0)), shape);
  return c.op("Conv", {ones, c.constant(filled(c, c.I(0), ks, 1.0))},
              {intsattr("kernel_shape", w.k), intsattr("strides", w.s), intsattr("dilations", w.d), intsattr("pads", pads)});
}

// sign(x) |x|^(p-1), the derivative of |x|^p / p.
std::string lp_factor(Ctx& c, const std::string& x, double p) {
  if (p == 2.0) return x;
  const std::string sign = c.op("Sign", {x});
  if (p == 1.0) return sign;
  return c.mul(sign, c.op("Pow", {c.op("Abs", {x}), c.scalar_like(p - 1, x)}));
}
// dY / Y^(p-1)
std::string lp_scale(Ctx& c, double p) {
  if (p == 1.0) return c.GO(0);
  if (p == 2.0) return c.div(c.GO(0), c.O(0));
  return c.div(c.GO(0), c.op("Pow", {c.O(0), c.scalar_like(p - 1, c.O(0))}));
}

}  // namespace

// Standard-op gradients of the pools; "" when the model's opset or shapes cannot express it.
//   MaxPool        ScatterElements(zeros, Indices, dY, reduction add) over the flattened X (opset
//                  16; 11 when windows cannot overlap), Indices from the node or a recomputing MaxPool
//   AveragePool    window_sum_adjoint(dY / count)
//   LpPool         window_sum_adjoint(dY / Y^(p-1)) * sign(X) |X|^(p-1)
//   GlobalAveragePool  Expand(dY / n);  GlobalLpPool  dY / Y^(p-1) * sign(X) |X|^(p-1)
//   GlobalMaxPool  ScatterElements of dY at ArgMax over the flattened planes (opset 11)
std::string pool_portable(Ctx& c) {
  const std::string& op = c.node().op_type;
  const std::string &x = c.I(0), &g = c.GO(0);
  if (op == "GlobalAveragePool") {
    std::string scaled;
    if (auto s = c.static_shape(x)) {
      scaled = c.mul(g, c.scalar_like(double(std::max<int64_t>(1, (*s)[0] * (*s)[1])) / double(shape_numel(*s)), x));
    } else {
      scaled = c.div(g, c.div(c.cast_like(c.op("Size", {x}), x), c.cast_like(c.op("Size", {c.O(0)}), x)));
    }
    return c.expand(scaled, c.shape_of(x));
  }
  if (op == "GlobalLpPool") return c.mul(lp_scale(c, lp_norm(c)), lp_factor(c, x, lp_norm(c)));
  if (op == "GlobalMaxPool") {
    if (c.opset() < 11) return "";
    const std::string flat = c.reshape(x, c.ints({0, 0, -1}));
    const std::string at = c.op("ArgMax", {flat}, {iattr("axis", 2), iattr("keepdims", 1)});
    const std::string s = c.op("ScatterElements", {c.zeros_like(flat), at, c.reshape(g, c.ints({0, 0, 1}))},
                               {iattr("axis", 2)});
    return c.reshape(s, c.shape_of(x));
  }
  const Win w = forward_window(c, c.attr_ints("kernel_shape", {}));
  if (op == "MaxPool") {
    bool disjoint = !w.s.empty();  // strides and kernel known (rank known)
    for (size_t i = 0; i < w.s.size(); ++i) disjoint = disjoint && w.s[i] >= w.ext(i);
    if (c.opset() < 8 || (c.opset() < 16 && !(c.opset() >= 11 && disjoint))) return "";
    std::string ind = c.O(1);
    if (ind.empty() || c.attr_int("storage_order", 0) != 0)
      ind = c.op_n("MaxPool", {x}, 2, attrs_but(c, {"storage_order"}))[1];
    const std::string flat = c.reshape(x, c.ints({-1}));
    std::vector<ir::Attribute> a = {iattr("axis", 0)};
    if (c.opset() >= 16) a.push_back(sattr("reduction", "add"));
    const std::string s = c.op("ScatterElements",
                               {c.zeros_like(flat), c.reshape(ind, c.ints({-1})), c.reshape(g, c.ints({-1}))}, a);
    return c.reshape(s, c.shape_of(x));
  }
  if (op == "AveragePool") {
    const bool incl = c.attr_int("count_include_pad", 0) != 0;
    bool whole = incl;  // every window counts prod(kernel)
    for (size_t i = 0; i < w.nd; ++i) whole = whole && w.extra[i] == 0;
    if (!w.known) return "";
    const std::string scaled = whole ? c.mul(g, c.scalar_like(1.0 / double(shape_numel(w.k)), g)) : c.div(g, avg_count(c, w, incl));
    return window_sum_adjoint(c, w, scaled);
  }
  // LpPool
  const std::string s = window_sum_adjoint(c, w, lp_scale(c, lp_norm(c)));
  return s.empty() ? s : c.mul(s, lp_factor(c, x, lp_norm(c)));
}

namespace {

// Portable Slice gradient by scatters: per sliced axis a, the kept positions are Slice(Range(0, d_a))
// (the forward's own clamping), and ScatterElements places the gradient into zeros of the
// axis' full length.
std::string slice_grad_scatter(Ctx& c, const IntList& starts, const IntList& ends, const std::vector<int64_t>& axes,
                               const IntList& steps) {
  const std::string& x = c.I(0);
  const int64_t r = known_rank(c, x);
  auto elem = [&](const IntList& l, size_t k) {
    if (l.name.empty()) return c.ints({1});
    if (l.value) return c.ints({(*l.value)[k]});
    return c.op("Slice", {l.name, c.ints({int64_t(k)}), c.ints({int64_t(k) + 1})});
  };
  std::string cur = c.GO(0);
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t a = norm_axis(c, axes[k], r);
    const std::string d = c.op("Gather", {c.shape_of(x), c.constant(Tensor::scalar<int64_t>(a))});
    const std::string range =
        c.op("Range", {c.constant(Tensor::scalar<int64_t>(0)), d, c.constant(Tensor::scalar<int64_t>(1))});
    const std::string pos = c.op("Slice", {range, elem(starts, k), elem(ends, k), c.ints({0}), elem(steps, k)});
    std::vector<int64_t> view(size_t(r), 1);
    view[size_t(a)] = -1;
    const std::string idx = c.expand(c.reshape(pos, c.ints(view)), c.shape_of(cur));
    const std::string full =
        c.op("ScatterElements", {c.shape_of(cur), c.ints({a}), dim_of(c, x, a)}, {iattr("axis", 0)});
    cur = c.op("ScatterElements", {c.expand(c.scalar_like(0.0, cur), full), idx, cur}, {iattr("axis", a)});
  }
  return cur;
}

}  // namespace

// Portable Slice gradient: a zero Pad when steps are 1 and shapes and bounds are known, else
// scatters (opset >= 11, constant axes); "" when neither applies.
std::string slice_grad_portable(Ctx& c, const IntList& starts, const IntList& ends, const IntList& axes,
                                const IntList& steps) {
  const std::string& x = c.I(0);
  const int64_t r = c.rank(x);
  if (r < 0 || (!axes.name.empty() && !axes.value)) return "";
  std::vector<int64_t> ax;
  if (axes.value) {
    ax = *axes.value;
  } else {
    const int64_t n = starts.value ? int64_t(starts.value->size()) : static_dim(c, starts.name, 0);
    if (n < 0) return "";
    for (int64_t i = 0; i < n; ++i) ax.push_back(i);
  }
  const auto xs = c.static_shape(x);
  const bool unit = steps.name.empty() ||
                    (steps.value && std::all_of(steps.value->begin(), steps.value->end(), [](int64_t s) { return s == 1; }));
  if (xs && starts.value && ends.value && unit) {
    std::vector<int64_t> pads(size_t(2 * r), 0);
    for (size_t k = 0; k < ax.size(); ++k) {  // the forward's clamping, unit steps
      const int64_t a = norm_axis(c, ax[k], r), d = (*xs)[size_t(a)];
      int64_t s = (*starts.value)[k], e = (*ends.value)[k];
      s = std::clamp<int64_t>(s < 0 ? s + d : s, 0, d);
      e = std::clamp<int64_t>(e < 0 ? e + d : e, 0, d);
      pads[size_t(a)] = s;
      pads[size_t(a + r)] = d - s - std::max<int64_t>(e - s, 0);
    }
    return c.pad(c.GO(0), pads);
  }
  return c.opset() >= 11 ? slice_grad_scatter(c, starts, ends, ax, steps) : "";
}

namespace {

// Source index of output position o of an edge / reflect / wrap Pad along one axis: the kept input
// range is [lo, lo + m), the first kept element lands at `first`.
int64_t pad_source(const std::string& mode, int64_t o, int64_t first, int64_t lo, int64_t m) {
  const int64_t i = o - first;
  if (i >= 0 && i < m) return lo + i;
  if (mode == "edge") return lo + std::clamp<int64_t>(i, 0, m - 1);
  if (mode == "wrap") return lo + ((i % m) + m) % m;
  if (m == 1) return lo;
  const int64_t p = 2 * (m - 1), t = ((i % p) + p) % p;
  return lo + (t < m ? t : p - t);
}

}  // namespace

// Portable gradient of an edge / reflect / wrap Pad, axis by axis: output runs whose sources are
// consecutive (ascending or descending) or equal fold back with Slice (+ ReduceSum) and a zero
// Pad, summed. Needs static shapes and constant pads; "" when not expressible.
std::string pad_grad_portable(Ctx& c, const std::string& mode, const std::vector<int64_t>& pads) {
  const auto xs = c.static_shape(c.I(0));
  if (!xs || c.opset() < 10 || pads.size() != 2 * xs->size()) return "";
  const int64_t r = int64_t(xs->size());
  std::string cur = c.GO(0);
  for (int64_t a = 0; a < r; ++a) {
    const int64_t b = pads[size_t(a)], e = pads[size_t(a + r)], d = (*xs)[size_t(a)];
    if (b == 0 && e == 0) continue;
    const int64_t lo = std::max<int64_t>(-b, 0), m = d - lo - std::max<int64_t>(-e, 0);
    const int64_t first = std::max<int64_t>(b, 0), n = d + b + e;
    if (m <= 0) return "";
    auto src = [&](int64_t o) { return pad_source(mode, o, first, lo, m); };
    std::string acc;
    for (int64_t o0 = 0; o0 < n;) {
      int64_t step = o0 + 1 < n ? src(o0 + 1) - src(o0) : 1;
      if (step < -1 || step > 1) step = 1;
      int64_t o1 = o0 + 1;
      while (o1 < n && src(o1) == src(o1 - 1) + step) ++o1;
      if (o1 == o0 + 1) step = 1;
      std::string piece;
      int64_t at = src(o0), len = o1 - o0;
      if (step == 1) {
        piece = c.slice(cur, {o0}, {o1}, {a});
      } else if (step == -1) {
        piece = c.slice(cur, {o1 - 1}, {o0 == 0 ? INT64_MIN : o0 - 1}, {a}, {-1});
        at -= len - 1;
      } else {
        piece = c.reduce_sum(c.slice(cur, {o0}, {o1}, {a}), {a}, true);
        len = 1;
      }
      std::vector<int64_t> place(size_t(2 * r), 0);
      place[size_t(a)] = at;
      place[size_t(a + r)] = d - at - len;
      const std::string placed = c.pad(piece, place);
      acc = acc.empty() ? placed : c.add(acc, placed);
      o0 = o1;
    }
    cur = acc;
  }
  return cur;
}

namespace {

// Float values of a constant input (empty when absent or empty; nullopt when not constant).
std::optional<std::vector<double>> const_floats(Ctx& c, size_t input) {
  if (!c.has_input(input)) return std::vector<double>{};
  const Tensor* t = c.constant_value(c.I(input));
  if (!t || t->dtype() != DType::kFloat32) return std::nullopt;
  return std::vector<double>(t->data<float>(), t->data<float>() + t->numel());
}

}  // namespace

// Portable Resize gradient. Resize is separable: along each resized axis a it applies a matrix
// M_a [out_a, in_a], which is Resize of an identity matrix resized along that axis alone (scale 1
// on the other axis maps it to itself). dX = g contracted with every M_a (Transpose + MatMul).
// Needs static shapes and constant scales / sizes / roi; "" otherwise, and for nearest
// tf_half_pixel_for_nn rounding up, whose scale 1 is no identity.
std::string resize_grad_portable(Ctx& c) {
  const auto xs = c.static_shape(c.I(0));
  const auto ys = c.static_shape(c.O(0));
  const bool v10 = c.opset() < 11;
  const auto roi = v10 ? std::vector<double>{} : const_floats(c, 1);
  const auto scales = const_floats(c, v10 ? 1 : 2);
  const std::string coord = v10 ? "asymmetric" : c.attr_string("coordinate_transformation_mode", "half_pixel");
  const std::string rounding = c.attr_string("nearest_mode", "round_prefer_floor");
  if (!xs || !ys || !roi || !scales ||
      (coord == "tf_half_pixel_for_nn" && (rounding == "ceil" || rounding == "round_prefer_ceil")))
    return "";
  const int64_t r = int64_t(xs->size());
  if (int64_t(ys->size()) != r) return "";  // a declared output type of another rank: not expressible
  const bool crop = coord == "tf_crop_and_resize";
  if ((crop && int64_t(roi->size()) != 2 * r) || (!scales->empty() && int64_t(scales->size()) != r)) return "";
  std::vector<ir::Attribute> at;
  for (const ir::Attribute& a : c.attrs())
    if (a.name != "extrapolation_value") at.push_back(a);  // outside the crop: no gradient
  auto f32 = [&](std::vector<float> v) { return c.constant(Tensor::from_vector<float>({int64_t(v.size())}, v)); };
  std::string cur = c.GO(0);
  for (int64_t a = 0; a < r; ++a) {
    const int64_t n_in = (*xs)[size_t(a)], n_out = (*ys)[size_t(a)];
    const bool cropped = crop && ((*roi)[size_t(a)] != 0 || (*roi)[size_t(r + a)] != 1);
    if ((scales->empty() ? n_out == n_in : (*scales)[size_t(a)] == 1.0) && !cropped) continue;
    std::vector<int64_t> iota(static_cast<size_t>(n_in));
    std::iota(iota.begin(), iota.end(), int64_t(0));
    std::vector<std::string> in{c.op("OneHot", {c.ints(iota), c.ints({n_in}), c.constant(float_pair(c, c.dtype(cur), 0, 1))})};
    const std::string none = c.opset() < 13 ? f32({}) : "";
    if (v10) {
      in.push_back(f32({float((*scales)[size_t(a)]), 1.f}));
    } else {
      in.push_back(crop ? f32({float((*roi)[size_t(a)]), 0.f, float((*roi)[size_t(r + a)]), 1.f}) : none);
      if (!scales->empty()) in.insert(in.end(), {f32({float((*scales)[size_t(a)]), 1.f})});
      else in.insert(in.end(), {none, c.ints({n_out, n_in})});
    }
    const std::string m = c.op("Resize", in, at);  // [n_out, n_in]
    std::vector<int64_t> perm, inv(static_cast<size_t>(r));
    for (int64_t k = 0; k < r; ++k)
      if (k != a) perm.push_back(k);
    perm.push_back(a);
    for (int64_t k = 0; k < r; ++k) inv[size_t(perm[size_t(k)])] = k;
    const bool last = a == r - 1;
    const std::string g = c.op("MatMul", {last ? cur : c.transpose(cur, perm), m});
    cur = last ? g : c.transpose(g, inv);
  }
  return cur;
}

}  // namespace onnxtrain::autodiff::detail
