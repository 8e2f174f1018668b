// THE table of gradient rules: one entry per operator (and opset range where semantics differ),
// a few lines each. Rules emit ONNX nodes through RuleContext; the builder owns the chain rule
// (accumulation, unbroadcasting, pruning). Notation: I(i) inputs, O(i) outputs, GO(i) gradient of
// output i, set_GI(i, g) gradient of input i.
#include <cmath>
#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <optional>

#include "autodiff/portable.h"
#include "autodiff/rule_context.h"
#include "autodiff/rule_helpers.h"
#include "ir/emitter.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::autodiff {

namespace {

using namespace detail;

// g * f'(x) for unary elementwise ops.
void unary(Ctx& c, const std::string& dydx) { c.set_GI(0, c.mul(c.GO(0), dydx)); }

// Where(cond, a, 0)
std::string where_else_zero(Ctx& c, const std::string& cond, const std::string& a) {
  return c.op("Where", {cond, a, c.scalar_like(0.0, a)});
}

// Swaps the last two axes of a rank-r value.
std::string swap_last2(Ctx& c, const std::string& v, int64_t r) {
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < r; ++i) perm.push_back(i);
  std::swap(perm[size_t(r - 1)], perm[size_t(r - 2)]);
  return c.transpose(v, perm);
}

// Type with the dims of `base` except the last `k` replaced by `tail` (for unbroadcasting).
ir::TypeInfo with_tail(const ir::TypeInfo* base, size_t drop, const std::vector<ir::Dim>& tail, DType dt) {
  ir::TypeInfo t;
  t.kind = ir::TypeInfo::Kind::kTensor;
  t.elem = dt;
  if (!base || !base->has_shape || base->dims.size() < drop) return t;
  t.has_shape = true;
  t.dims.assign(base->dims.begin(), base->dims.end() - long(drop));
  t.dims.insert(t.dims.end(), tail.begin(), tail.end());
  return t;
}

std::vector<ir::Dim> last_dims(const ir::TypeInfo* t, size_t k) {
  if (!t || !t->has_shape || t->dims.size() < k) return std::vector<ir::Dim>(k);
  return std::vector<ir::Dim>(t->dims.end() - long(k), t->dims.end());
}

// ---------------------------------------------------------------- linear algebra
void matmul_rule(Ctx& c) {
  const int64_t ra = c.rank(c.I(0)), rb = c.rank(c.I(1));
  if (ra < 0 || rb < 0) c.fail("operand ranks are unknown (ONNX type inference failed)");
  const std::string& g = c.GO(0);
  const std::string &A = c.I(0), &B = c.I(1);
  const DType dt = c.dtype(g);
  if (ra == 1 && rb == 1) {  // dot product: y scalar
    c.set_GI(0, c.mul(g, B));
    c.set_GI(1, c.mul(g, A));
    return;
  }
  // Axes counted from the front (ONNX has negative axes only from opset 11).
  if (ra == 1) {  // A[K], B[..., K, N], Y[..., N]
    if (c.needs_GI(0)) {
      auto ga = c.squeeze(c.op("MatMul", {c.unsqueeze(g, {rb - 2}), swap_last2(c, B, rb)}), {rb - 2});  // [..., K]
      auto t = with_tail(c.type(c.O(0)), 1, last_dims(c.type(A), 1), dt);
      c.set_GI_unbroadcast_typed(0, ga, &t);
    }
    if (c.needs_GI(1)) {  // dB[..., K, N] = A[K,1] * g[..., 1, N]
      auto gb = c.op("MatMul", {c.unsqueeze(A, {1}), c.unsqueeze(g, {rb - 2})});
      auto t = with_tail(c.type(c.O(0)), 1, last_dims(c.type(B), 2), dt);
      c.set_GI_unbroadcast_typed(1, gb, &t);
    }
    return;
  }
  if (rb == 1) {  // A[..., M, K], B[K], Y[..., M]
    if (c.needs_GI(0)) {  // dA = g[..., M, 1] * B[1, K]
      auto ga = c.op("MatMul", {c.unsqueeze(g, {ra - 1}), c.unsqueeze(B, {0})});
      auto t = with_tail(c.type(c.O(0)), 1, last_dims(c.type(A), 2), dt);
      c.set_GI_unbroadcast_typed(0, ga, &t);
    }
    if (c.needs_GI(1)) {  // dB = sum over batch and M of A^T g
      auto gb = c.squeeze(c.op("MatMul", {swap_last2(c, A, ra), c.unsqueeze(g, {ra - 1})}), {ra - 1});  // [..., K]
      auto t = with_tail(c.type(c.O(0)), 1, last_dims(c.type(B), 1), dt);
      c.set_GI_unbroadcast_typed(1, gb, &t);
    }
    return;
  }
  // Default mode: com.onnxtrain.FusedMatMul reads the transposed operand through its strides
  // (portable mode: a Transpose node, then MatMul). Batched products with B transposed stay a
  // Transpose and a MatMul: oneDNN ran them 1.4x slower than the copy and the plain product
  // ([32, 128, 64] @ [32, 128, 64]^T, one thread).
  auto mm_t = [&](const std::string& x, const std::string& y, bool tx, bool ty) {
    if (!c.portable() && (!ty || c.rank(y) == 2))
      return c.custom("FusedMatMul", {x, y}, 1, {iattr("transA", tx), iattr("transB", ty)})[0];
    return c.op("MatMul", {tx ? swap_last2(c, x, c.rank(x)) : x, ty ? swap_last2(c, y, c.rank(y)) : y});
  };
  if (c.needs_GI(0)) {
    auto ga = mm_t(g, B, false, true);
    auto t = with_tail(c.type(c.O(0)), 2, last_dims(c.type(A), 2), dt);
    c.set_GI_unbroadcast_typed(0, ga, &t);
  }
  if (c.needs_GI(1) && rb == 2) {
    // A 2-D weight applied over batch dims (a linear layer): Y's batch dims are A's, so
    // dB = sum over the batch of A_i^T g_i = A^T g with A and g flattened to 2-D — one GEMM
    // instead of a batch of products, their [..., K, N] result and its ReduceSum.
    const std::string fa = c.op("Flatten", {A}, {iattr("axis", ra - 1)});
    const std::string fg = c.op("Flatten", {g}, {iattr("axis", ra - 1)});
    c.set_GI(1, c.opset() >= 11 ? c.op("Gemm", {fa, fg}, {iattr("transA", 1)})
                                : c.op("MatMul", {c.transpose(fa, {1, 0}), fg}));
  } else if (c.needs_GI(1)) {
    auto gb = mm_t(A, g, true, false);
    auto t = with_tail(c.type(c.O(0)), 2, last_dims(c.type(B), 2), dt);
    c.set_GI_unbroadcast_typed(1, gb, &t);
  }
}

// Y = alpha * op(A) op(B) + beta * C
void gemm_rule(Ctx& c) {
  const bool ta = c.attr_int("transA", 0) != 0, tb = c.attr_int("transB", 0) != 0;
  const float alpha = c.attr_float("alpha", 1.f), beta = c.attr_float("beta", 1.f);
  const std::string& g = c.GO(0);
  auto gemm = [&](const std::string& a, const std::string& b, bool tA, bool tB) {
    if (c.opset() >= 11) return c.op("Gemm", {a, b}, {iattr("transA", tA), iattr("transB", tB), fattr("alpha", alpha)});
    // C is required before opset 11: a MatMul of the (transposed) operands, scaled.
    const std::string p = c.op("MatMul", {tA ? c.transpose(a, {1, 0}) : a, tB ? c.transpose(b, {1, 0}) : b});
    return alpha == 1.f ? p : c.mul(p, c.scalar_like(alpha, g));
  };
  // op(A) = A or A^T; dop(A) = g op(B)^T; dA = dop(A) or its transpose.
  if (c.needs_GI(0)) c.set_GI(0, ta ? gemm(c.I(1), g, tb, true) : gemm(g, c.I(1), false, !tb));
  if (c.needs_GI(1)) c.set_GI(1, tb ? gemm(g, c.I(0), true, ta) : gemm(c.I(0), g, !ta, false));
  if (c.has_input(2) && c.needs_GI(2)) {
    std::string gc = beta == 1.f ? g : c.mul(g, c.scalar_like(beta, g));
    c.set_GI_unbroadcast(2, gc);
  }
}

// ---------------------------------------------------------------- variadic
// Max/Min: the gradient goes to the inputs equal to the output, split evenly among ties
// (as torch.maximum / torch.minimum do).
void minmax_rule(Ctx& c) {
  const std::string& y = c.O(0);
  std::vector<std::string> masks;
  for (size_t i = 0; i < c.num_inputs(); ++i) masks.push_back(c.cast_like(c.op("Equal", {c.I(i), y}), y));
  std::string count = masks.size() == 1 ? masks[0] : c.op("Sum", masks);
  const std::string share = c.div(c.GO(0), count);
  for (size_t i = 0; i < c.num_inputs(); ++i) c.set_GI_unbroadcast(i, c.mul(share, masks[i]));
}

// Axes a Reduce* node reduces (normalized), or empty for "all".
std::vector<int64_t> reduced_axes(Ctx& c, bool axes_input) {
  std::vector<int64_t> axes;
  if (axes_input) {
    if (auto a = c.const_ints_input(1)) axes = *a;
  } else {
    axes = c.attr_ints("axes", {});
  }
  if (axes.empty()) return axes;
  const int64_t r = c.rank(c.I(0));
  if (r < 0) c.fail("input rank unknown");
  for (auto& a : axes) {
    if (a < -r || a >= r) c.fail("axis ", a, " is out of range for an input of rank ", r);  // (gradient fuzz finding)
    if (a < 0) a += r;
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

// Expands a Reduce* output gradient back to the input's shape.
std::string reduce_back(Ctx& c, const std::string& g, bool axes_input) {
  if (axes_input && c.opset() >= 13 && c.has_input(1) && !c.constant_value(c.I(1))) {
    // Axes computed at run time: Unsqueeze-13 takes them as an input too (an empty list, as with
    // noop_with_empty_axes, leaves g as it is; Expand then gives it back unchanged).
    const std::string r = c.attr_int("keepdims", 1) == 0 ? c.op("Unsqueeze", {g, c.I(1)}) : g;
    return c.expand(r, c.shape_of(c.I(0)));
  }
  if (axes_input && c.attr_int("noop_with_empty_axes", 0) && reduced_axes(c, true).empty()) return g;
  std::string r = g;
  if (c.attr_int("keepdims", 1) == 0) {
    std::vector<int64_t> axes = reduced_axes(c, axes_input);
    if (!axes.empty()) r = c.unsqueeze(g, axes);  // else every axis reduced: g is a scalar, Expand broadcasts it
  }
  if (c.opset() >= 8) return c.expand(r, c.shape_of(c.I(0)));
  // No Expand before opset 8: Tile the keepdims form, repeats = the input's dims on reduced axes.
  const int64_t rank = c.rank(c.I(0));
  if (rank < 0) c.fail("input rank unknown");
  std::vector<int64_t> axes = reduced_axes(c, axes_input), on(size_t(rank), 0), off(size_t(rank), 1);
  if (axes.empty())
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  if (r == g && c.attr_int("keepdims", 1) == 0) r = c.unsqueeze(g, axes);  // scalar g
  for (int64_t a : axes) on[size_t(a)] = 1, off[size_t(a)] = 0;
  return c.op("Tile", {r, c.add(c.mul(c.shape_of(c.I(0)), c.ints(on)), c.ints(off))});
}

struct Entry {
  std::string domain, op;
  int64_t since, until;
  GradRule rule;
};

// Collects entries. add(op, rule, differentiable inputs = all, opset range = all).
struct Table {
  std::vector<Entry> entries;
  void add(const char* op, std::function<void(Ctx&)> f, std::vector<size_t> diff = {}, int64_t since = 1,
           int64_t until = 1000, const char* domain = "") {
    entries.push_back({domain, op, since, until, GradRule{std::move(f), std::move(diff)}});
  }
  /// Declares an operator whose gradient is zero almost everywhere.
  void zero(const char* op) { entries.push_back({"", op, 1, 1000, GradRule{nullptr, {}}}); }
};

// ================================================================ elementwise
void rules_elementwise(Table& t) {
  // ---- arithmetic (numpy broadcasting: the builder reduces broadcast dims)
  t.add("Add", [](Ctx& c) {
    c.set_GI_unbroadcast(0, c.GO(0));
    c.set_GI_unbroadcast(1, c.GO(0));
  });
  t.add("Sub", [](Ctx& c) {
    c.set_GI_unbroadcast(0, c.GO(0));
    if (c.needs_GI(1)) c.set_GI_unbroadcast(1, c.neg(c.GO(0)));
  });
  t.add("Mul", [](Ctx& c) {
    if (c.needs_GI(0)) c.set_GI_unbroadcast(0, c.mul(c.GO(0), c.I(1)));
    if (c.needs_GI(1)) c.set_GI_unbroadcast(1, c.mul(c.GO(0), c.I(0)));
  });
  t.add("Div", [](Ctx& c) {  // y = a / b: da = g / b, db = -g y / b
    if (c.needs_GI(0)) c.set_GI_unbroadcast(0, c.div(c.GO(0), c.I(1)));
    if (c.needs_GI(1)) c.set_GI_unbroadcast(1, c.neg(c.div(c.mul(c.GO(0), c.O(0)), c.I(1))));
  });
  t.add("Pow", [](Ctx& c) {  // y = a^b: da = g b a^(b-1), db = g y ln(a)
    const std::string &a = c.I(0), &b = c.I(1);
    if (c.needs_GI(0)) {
      const std::string bf = c.dtype(b) == c.dtype(a) ? b : c.cast_like(b, a);
      const std::string pw = c.op("Pow", {a, c.sub(bf, c.scalar_like(1.0, a))});
      c.set_GI_unbroadcast(0, c.mul(c.GO(0), c.mul(bf, pw)));
    }
    if (c.needs_GI(1)) c.set_GI_unbroadcast(1, c.mul(c.GO(0), c.mul(c.O(0), c.op("Log", {a}))));
  });
  t.add("Neg", [](Ctx& c) { c.set_GI(0, c.neg(c.GO(0))); });
  t.add("Abs", [](Ctx& c) { unary(c, c.op("Sign", {c.I(0)})); });
  t.add("Sqrt", [](Ctx& c) { c.set_GI(0, c.div(c.GO(0), c.mul(c.O(0), c.scalar_like(2.0, c.O(0))))); });
  t.add("Reciprocal", [](Ctx& c) { c.set_GI(0, c.neg(c.mul(c.GO(0), c.mul(c.O(0), c.O(0))))); });
  t.add("Exp", [](Ctx& c) { unary(c, c.O(0)); });
  t.add("Log", [](Ctx& c) { c.set_GI(0, c.div(c.GO(0), c.I(0))); });
  t.add("Erf", [](Ctx& c) {  // 2/sqrt(pi) exp(-x^2)
    const std::string& x = c.I(0);
    unary(c, c.mul(c.scalar_like(2.0 / std::sqrt(M_PI), x), c.op("Exp", {c.neg(c.mul(x, x))})));
  });
  t.add("Sin", [](Ctx& c) { unary(c, c.op("Cos", {c.I(0)})); });
  t.add("Cos", [](Ctx& c) { unary(c, c.neg(c.op("Sin", {c.I(0)}))); });
  t.add("Tan", [](Ctx& c) { unary(c, c.add(c.scalar_like(1.0, c.O(0)), c.mul(c.O(0), c.O(0)))); });
  t.add("Asin", [](Ctx& c) {
    const std::string& x = c.I(0);
    c.set_GI(0, c.div(c.GO(0), c.op("Sqrt", {c.sub(c.scalar_like(1.0, x), c.mul(x, x))})));
  });
  t.add("Acos", [](Ctx& c) {
    const std::string& x = c.I(0);
    c.set_GI(0, c.neg(c.div(c.GO(0), c.op("Sqrt", {c.sub(c.scalar_like(1.0, x), c.mul(x, x))}))));
  });
  t.add("Atan", [](Ctx& c) {
    const std::string& x = c.I(0);
    c.set_GI(0, c.div(c.GO(0), c.add(c.scalar_like(1.0, x), c.mul(x, x))));
  });
  t.add("Sinh", [](Ctx& c) { unary(c, c.op("Cosh", {c.I(0)})); });
  t.add("Cosh", [](Ctx& c) { unary(c, c.op("Sinh", {c.I(0)})); });
  t.add("Asinh", [](Ctx& c) {
    const std::string& x = c.I(0);
    c.set_GI(0, c.div(c.GO(0), c.op("Sqrt", {c.add(c.mul(x, x), c.scalar_like(1.0, x))})));
  });
  t.add("Acosh", [](Ctx& c) {
    const std::string& x = c.I(0);
    c.set_GI(0, c.div(c.GO(0), c.op("Sqrt", {c.sub(c.mul(x, x), c.scalar_like(1.0, x))})));
  });
  t.add("Atanh", [](Ctx& c) {
    const std::string& x = c.I(0);
    c.set_GI(0, c.div(c.GO(0), c.sub(c.scalar_like(1.0, x), c.mul(x, x))));
  });
  t.add("Tanh", [](Ctx& c) { unary(c, c.sub(c.scalar_like(1.0, c.O(0)), c.mul(c.O(0), c.O(0)))); });
  t.add("Sigmoid", [](Ctx& c) { unary(c, c.mul(c.O(0), c.sub(c.scalar_like(1.0, c.O(0)), c.O(0)))); });

  // ---- activations
  t.add("Relu", [](Ctx& c) {  // default mode: one fused pass over the forward output (Y > 0 iff X > 0)
    if (!c.portable()) return c.set_GI(0, c.custom("ReluGrad", {c.GO(0), c.O(0)}, 1)[0]);
    c.set_GI(0, where_else_zero(c, c.op("Greater", {c.I(0), c.scalar_like(0.0, c.I(0))}), c.GO(0)));
  });
  // com.onnxtrain.Gelu (train/fusion.h fuses the exported erf GELU): one GeluGrad pass, reading the
  // forward's 1 + erf(x / sqrt(2)) when the node outputs it.
  t.add("Gelu", [](Ctx& c) {
    std::vector<std::string> in = {c.GO(0), c.I(0)};
    if (c.num_outputs() > 1 && !c.O(1).empty()) in.push_back(c.O(1));
    c.set_GI(0, c.custom("GeluGrad", in, 1)[0]);
  }, {0}, 1, 1000, ops::kDomain);
  t.add("LeakyRelu", [](Ctx& c) {
    const std::string& x = c.I(0);
    const double alpha = c.attr_float("alpha", 0.01f);
    c.set_GI(0, c.op("Where", {c.op("Greater", {x, c.scalar_like(0.0, x)}), c.GO(0),
                               c.mul(c.GO(0), c.scalar_like(alpha, x))}));
  });
  t.add("Elu", [](Ctx& c) {  // x <= 0: y = alpha (e^x - 1), dy = y + alpha
    const std::string& x = c.I(0);
    const double alpha = c.attr_float("alpha", 1.f);
    c.set_GI(0, c.op("Where", {c.op("Greater", {x, c.scalar_like(0.0, x)}), c.GO(0),
                               c.mul(c.GO(0), c.add(c.O(0), c.scalar_like(alpha, x)))}));
  });
  t.add("Selu", [](Ctx& c) {  // x <= 0: y = gamma alpha (e^x - 1), dy = y + gamma alpha
    const std::string& x = c.I(0);
    const double alpha = c.attr_float("alpha", 1.67326319217681884765625f);
    const double gamma = c.attr_float("gamma", 1.05070102214813232421875f);
    c.set_GI(0, c.op("Where", {c.op("Greater", {x, c.scalar_like(0.0, x)}), c.mul(c.GO(0), c.scalar_like(gamma, x)),
                               c.mul(c.GO(0), c.add(c.O(0), c.scalar_like(gamma * alpha, x)))}));
  });
  t.add("Celu", [](Ctx& c) {  // x <= 0: dy = exp(x / alpha)
    const std::string& x = c.I(0);
    const double alpha = c.attr_float("alpha", 1.f);
    c.set_GI(0, c.op("Where", {c.op("Greater", {x, c.scalar_like(0.0, x)}), c.GO(0),
                               c.mul(c.GO(0), c.op("Exp", {c.div(x, c.scalar_like(alpha, x))}))}));
  });
  t.add("ThresholdedRelu", [](Ctx& c) {
    const std::string& x = c.I(0);
    c.set_GI(0, where_else_zero(c, c.op("Greater", {x, c.scalar_like(c.attr_float("alpha", 1.f), x)}), c.GO(0)));
  });
  t.add("Softplus", [](Ctx& c) { unary(c, c.op("Sigmoid", {c.I(0)})); });
  t.add("Softsign", [](Ctx& c) {  // 1 / (1 + |x|)^2
    const std::string& x = c.I(0);
    const std::string d = c.add(c.scalar_like(1.0, x), c.op("Abs", {x}));
    c.set_GI(0, c.div(c.GO(0), c.mul(d, d)));
  });
  t.add("HardSigmoid", [](Ctx& c) {  // alpha where 0 < alpha x + beta < 1
    const std::string& x = c.I(0);
    const double alpha = c.attr_float("alpha", 0.2f), beta = c.attr_float("beta", 0.5f);
    const std::string z = c.add(c.mul(x, c.scalar_like(alpha, x)), c.scalar_like(beta, x));
    const std::string inside = c.op("And", {c.op("Greater", {z, c.scalar_like(0.0, x)}),
                                            c.op("Less", {z, c.scalar_like(1.0, x)})});
    c.set_GI(0, where_else_zero(c, inside, c.mul(c.GO(0), c.scalar_like(alpha, x))));
  });
  t.add("HardSwish", [](Ctx& c) {  // 0 (x < -3), 1 (x > 3), x/3 + 1/2 between
    const std::string& x = c.I(0);
    const std::string mid = c.add(c.div(x, c.scalar_like(3.0, x)), c.scalar_like(0.5, x));
    const std::string d = c.op("Where", {c.op("Greater", {x, c.scalar_like(3.0, x)}), c.scalar_like(1.0, x),
                                         c.op("Where", {c.op("Less", {x, c.scalar_like(-3.0, x)}),
                                                        c.scalar_like(0.0, x), mid})});
    unary(c, d);
  });
  t.add("PRelu", [](Ctx& c) {
    const std::string &x = c.I(0), &s = c.I(1);
    const std::string pos = c.op("Greater", {x, c.scalar_like(0.0, x)});
    c.set_GI(0, c.op("Where", {pos, c.GO(0), c.mul(c.GO(0), s)}));
    if (c.needs_GI(1)) c.set_GI_unbroadcast(1, where_else_zero(c, c.op("Not", {pos}), c.mul(c.GO(0), x)));
  });
  t.add("Clip", [](Ctx& c) {  // gradient passes where min <= x <= max
    const std::string& x = c.I(0);
    std::string lo, hi;
    if (c.opset() < 11) {
      lo = c.scalar_like(c.attr_float("min", -3.4028234663852886e38f), x);
      hi = c.scalar_like(c.attr_float("max", 3.4028234663852886e38f), x);
    } else {
      if (c.has_input(1)) lo = c.I(1);
      if (c.has_input(2)) hi = c.I(2);
    }
    // x < lo, x > hi with Less and Greater (GreaterOrEqual and LessOrEqual only exist from opset 12).
    const std::string below = lo.empty() ? "" : c.op("Less", {x, lo}), above = hi.empty() ? "" : c.op("Greater", {x, hi});
    std::string inside;
    if (!below.empty()) inside = c.op("Not", {below});
    if (!above.empty()) inside = inside.empty() ? c.op("Not", {above}) : c.op("And", {inside, c.op("Not", {above})});
    c.set_GI(0, inside.empty() ? c.GO(0) : where_else_zero(c, inside, c.GO(0)));
    // y = min(max(x, lo), hi) is lo where x < lo <= hi, hi where max(x, lo) > hi (min > max: all of it).
    if (c.needs_GI(1))
      c.set_GI_unbroadcast(1, where_else_zero(c, hi.empty() ? below : c.op("And", {below, c.op("Not", {c.op("Greater", {lo, hi})})}),
                                              c.GO(0)));
    if (c.needs_GI(2))
      c.set_GI_unbroadcast(2, where_else_zero(c, lo.empty() ? above : c.op("Greater", {c.op("Max", {x, lo}), hi}), c.GO(0)));
  });
  t.add("Mod", [](Ctx& c) {  // y = a - b q, q = floor(a/b) (fmod: trunc(a/b))
    const std::string &a = c.I(0), &b = c.I(1);
    c.set_GI_unbroadcast(0, c.GO(0));
    if (c.needs_GI(1)) {
      const std::string r = c.div(a, b);
      const std::string q = c.attr_int("fmod", 0) ? c.mul(c.op("Sign", {r}), c.op("Floor", {c.op("Abs", {r})}))
                                                  : c.op("Floor", {r});
      c.set_GI_unbroadcast(1, c.neg(c.mul(c.GO(0), q)));
    }
  });

  // ---- variadic and selection
  t.add("Sum", [](Ctx& c) {
    for (size_t i = 0; i < c.num_inputs(); ++i) c.set_GI_unbroadcast(i, c.GO(0));
  });
  t.add("Mean", [](Ctx& c) {
    const std::string g = c.div(c.GO(0), c.scalar_like(double(c.num_inputs()), c.O(0)));
    for (size_t i = 0; i < c.num_inputs(); ++i) c.set_GI_unbroadcast(i, g);
  });
  t.add("Max", minmax_rule);
  t.add("Min", minmax_rule);
  t.add("Where", [](Ctx& c) {
    if (c.needs_GI(1)) c.set_GI_unbroadcast(1, where_else_zero(c, c.I(0), c.GO(0)));
    if (c.needs_GI(2)) c.set_GI_unbroadcast(2, where_else_zero(c, c.op("Not", {c.I(0)}), c.GO(0)));
  }, {1, 2});
  t.add("Identity", [](Ctx& c) { c.set_GI(0, c.GO(0)); });
  t.add("Cast", [](Ctx& c) { c.set_GI(0, c.cast_like(c.GO(0), c.I(0))); });
  t.add("CastLike", [](Ctx& c) { c.set_GI(0, c.cast_like(c.GO(0), c.I(0))); }, {0});

  // ---- zero gradient almost everywhere (declared explicitly)
  for (const char* op : {"Round", "Floor", "Ceil", "Sign", "ArgMax", "ArgMin", "Equal", "Less", "Greater",
                         "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf", "Shape",
                         "Size", "NonZero", "ConstantOfShape", "Constant", "EyeLike", "RandomNormal",
                         "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial",
                         "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"})
    t.zero(op);
}


bool is_letter(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }

void conv_rule(Ctx& c) {
  const bool transposed = c.node().op_type == "ConvTranspose";
  if (c.portable() && conv_portable(c, transposed)) return;
  const std::vector<bool> want = {c.needs_GI(0), c.needs_GI(1), c.has_input(2) && c.needs_GI(2)};
  const auto g = c.custom_some(transposed ? "ConvTransposeGrad" : "ConvGrad", {c.GO(0), c.I(0), c.I(1)}, want, c.attrs());
  for (size_t i = 0; i < 3; ++i)
    if (want[i]) c.set_GI(i, g[i]);
}

// ---- pooling
// Default mode (and portable mode where pool_portable cannot): com.onnxtrain.<Pool>Grad(dY, X [,
// Indices | Y]) with the forward attributes (LpPool's p as a float).
void pool_rule(Ctx& c) {
  const std::string& op = c.node().op_type;
  if (c.portable()) {
    const std::string g = pool_portable(c);
    if (!g.empty()) return c.set_GI(0, g);
  }
  std::vector<std::string> in = {c.GO(0), c.I(0)};
  std::vector<ir::Attribute> attrs = c.attrs();
  if (op == "MaxPool" && !c.O(1).empty() && c.attr_int("storage_order", 0) == 0) in.push_back(c.O(1));
  if (op == "LpPool" || op == "GlobalLpPool") {
    in.push_back(c.O(0));
    attrs = attrs_but(c, {"p"}, {fattr("p", float(lp_norm(c)))});
  }
  c.set_GI(0, c.custom(op + "Grad", in, 1, attrs)[0]);
}

// ---- Einsum
// Labels of each operand and of the output, the ellipsis spelled out in letters the equation does
// not use (right-aligned, as numpy broadcasts); `unused`: letters free for new labels.
struct EinsumTerms {
  std::vector<std::string> in;
  std::string out, unused;
};

EinsumTerms einsum_terms(Ctx& c) {
  std::string eq;
  for (char ch : c.attr_string("equation", ""))
    if (ch != ' ') eq += ch;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms(1);
  for (char ch : lhs) {
    if (ch == ',') terms.emplace_back();
    else terms.back() += ch;
  }
  if (terms.size() != c.num_inputs()) c.fail("equation '", eq, "' has ", terms.size(), " terms for ", c.num_inputs(), " inputs");
  // Letters and at most one "..." per term (a stray '.' or a second arrow would derail the label
  // arithmetic below; found by the gradient fuzz target).
  auto check_term = [&](const std::string& term) {
    const size_t at = term.find("...");
    for (size_t k = 0; k < term.size(); ++k)
      if (!is_letter(term[k]) && (at == std::string::npos || k < at || k >= at + 3))
        c.fail("equation '", eq, "': term '", term, "' may hold only letters and one '...'");
  };
  for (const auto& term : terms) check_term(term);
  if (arrow != std::string::npos) check_term(eq.substr(arrow + 2));
  std::string used;
  for (char ch : eq)
    if (is_letter(ch)) used += ch;
  EinsumTerms t;
  for (char ch = 'A'; ch <= 'z'; ++ch)
    if (is_letter(ch) && used.find(ch) == std::string::npos) t.unused += ch;
  // Ellipsis dims of each term: rank minus letters.
  std::vector<int64_t> ell(terms.size(), 0);
  int64_t ell_rank = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    const bool has_ell = terms[i].find("...") != std::string::npos;
    const int64_t r = c.rank(c.I(i));
    const int64_t labels = int64_t(terms[i].size()) - (has_ell ? 3 : 0);
    if (r >= 0 && (has_ell ? labels > r : labels != r))
      c.fail("equation '", eq, "': term '", terms[i], "' has ", labels, " labels for input ", i, " of rank ", r);
    if (!has_ell) continue;
    if (r < 0) c.fail("the rank of input ", i, " is unknown (needed for the ellipsis)");
    ell[i] = r - labels;
    ell_rank = std::max(ell_rank, ell[i]);
  }
  if (ell_rank > int64_t(t.unused.size())) c.fail("too many labels");
  const std::string ell_labels = t.unused.substr(0, size_t(ell_rank));
  t.unused = t.unused.substr(size_t(ell_rank));
  auto expand = [&](const std::string& term, int64_t e) {
    const size_t at = term.find("...");
    if (at == std::string::npos) return term;
    return term.substr(0, at) + ell_labels.substr(size_t(ell_rank - e)) + term.substr(at + 3);
  };
  for (size_t i = 0; i < terms.size(); ++i) t.in.push_back(expand(terms[i], ell[i]));
  if (arrow != std::string::npos) {
    t.out = expand(eq.substr(arrow + 2), ell_rank);
  } else {  // ellipsis dims, then the labels seen once in ASCII order
    std::string once;
    for (char ch : lhs)
      if (is_letter(ch) && std::count(lhs.begin(), lhs.end(), ch) == 1) once += ch;
    std::sort(once.begin(), once.end());
    t.out = ell_labels + once;
  }
  return t;
}

// Identity matrix [n, n] of v's element type, n = dim `axis` of v.
std::string eye_of_dim(Ctx& c, const std::string& v, size_t axis) {
  const int64_t n = static_dim(c, v, axis);
  if (n >= 0) return c.constant(filled(c, v, {n, n}, 1.0, true));
  const std::string dim = c.op("Gather", {c.shape_of(v), c.constant(Tensor::scalar<int64_t>(int64_t(axis)))});
  const std::string r = c.op("Range", {c.constant(Tensor::scalar<int64_t>(0)), dim, c.constant(Tensor::scalar<int64_t>(1))});
  return c.cast_like(c.op("Equal", {c.unsqueeze(r, {1}), r}), v);
}

// dX_i = einsum(dY, X_j (j != i) -> labels of X_i). A label repeated in X_i (a diagonal) gets a
// fresh label tied to the first by an identity matrix; labels of X_i found in no other term
// (summed out in the forward) are broadcast back with Expand; dims where X_i has size 1 but the
// other operands do not are summed back by the builder (unbroadcast).
void einsum_rule(Ctx& c) {
  EinsumTerms t = einsum_terms(c);
  size_t fresh = 0;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.needs_GI(i)) continue;
    std::vector<std::string> ops = {c.GO(0)}, terms = {t.out};
    for (size_t j = 0; j < c.num_inputs(); ++j)
      if (j != i) ops.push_back(c.I(j)), terms.push_back(t.in[j]);
    std::string target = t.in[i];
    for (size_t p = 0; p < target.size(); ++p) {
      if (t.in[i].find(t.in[i][p]) == p) continue;
      if (fresh >= t.unused.size()) c.fail("too many labels");
      target[p] = t.unused[fresh++];
      ops.push_back(eye_of_dim(c, c.I(i), p));
      terms.push_back(std::string{t.in[i][p], target[p]});
    }
    std::string avail, kept;
    for (const auto& s : terms) avail += s;
    std::vector<int64_t> dropped;
    for (size_t p = 0; p < target.size(); ++p) {
      if (avail.find(target[p]) != std::string::npos) kept += target[p];
      else dropped.push_back(int64_t(p));
    }
    std::string eq;
    for (size_t k = 0; k < terms.size(); ++k) eq += (k ? "," : "") + terms[k];
    std::string g = c.op("Einsum", ops, {sattr("equation", eq + "->" + kept)});
    if (!dropped.empty()) g = c.expand(c.unsqueeze(g, dropped), c.shape_of(c.I(i)));
    // Static type of g: per dim the largest size its label has among the inputs (1 broadcasts).
    ir::TypeInfo gt = ir::TypeInfo::tensor(c.dtype(c.I(i)));
    gt.has_shape = true;
    for (size_t p = 0; p < t.in[i].size() && gt.has_shape; ++p) {
      const bool drop = std::count(dropped.begin(), dropped.end(), int64_t(p)) > 0;
      int64_t size = drop ? static_dim(c, c.I(i), p) : 1;
      for (size_t j = 0; j < c.num_inputs() && !drop; ++j)
        for (size_t q = 0; q < t.in[j].size(); ++q)
          if (t.in[j][q] == t.in[i][p]) {
            const int64_t d = static_dim(c, c.I(j), q);
            size = d < 0 || size < 0 ? -1 : std::max(size, d);
          }
      gt.has_shape = size >= 0;
      gt.dims.push_back(ir::Dim{size, ""});
    }
    c.set_GI_unbroadcast_typed(i, g, gt.has_shape ? &gt : nullptr);
  }
}

// Col2Im (ai.onnx 18): Y = fold(X) sums each block column into the image; dX = unfold(dY) (Im2Col)
// reads it back. With dY viewed as [N C, 1, image...], a Conv whose K = prod(block_shape) one-hot
// filters each pick one block position gives [N C, K, L], which is X's [N, C K, L]. block_shape
// must be a constant (the filters' shape).
void col2im_rule(Ctx& c) {
  const auto block = c.const_ints_input(2);
  if (!block || block->empty()) c.fail("block_shape (input 2) is not a constant");
  int64_t K = 1;
  for (int64_t d : *block)
    if (d <= 0 || __builtin_mul_overflow(K, d, &K) || K > (int64_t(1) << 16))
      c.fail("block_shape must be positive with at most 65536 positions");
  Shape wshape{K, 1};
  wshape.insert(wshape.end(), block->begin(), block->end());
  Tensor w = ir::float_tensor(DType::kFloat64, 0.0, wshape);
  for (int64_t k = 0; k < K; ++k) w.data<double>()[k * K + k] = 1.0;
  std::vector<ir::Attribute> at;
  for (const char* a : {"dilations", "pads", "strides"})
    if (c.has_attr(a)) at.push_back(intsattr(a, c.attr_ints(a, {})));
  const std::string img = c.reshape(c.GO(0), c.op("Concat", {c.ints({-1, 1}), c.I(1)}, {iattr("axis", 0)}));
  const std::string cols = c.op("Conv", {img, c.cast_like(c.constant(w), c.I(0))}, at);
  c.set_GI(0, c.reshape(cols, c.shape_of(c.I(0))));
}

// ================================================================ linear algebra, convolution, pooling
void rules_linalg(Table& t) {
  // ---- linear algebra
  t.add("MatMul", matmul_rule);
  // com.onnxtrain.FusedMatMul(X, W, transB = 1) with W 2-D: train/fusion.h's MatMul(X, Transpose(W)),
  // a linear layer as torch.onnx exports it. dX = g W (Y's batch dims are X's); dW = g^T X with X
  // and g flattened to 2-D: one GEMM, already in W's layout (no transposed copy of W or of dW).
  t.add("FusedMatMul", [](Ctx& c) {
    const int64_t ra = c.rank(c.I(0)), rb = c.rank(c.I(1));
    if (c.attr_int("transA", 0) != 0 || c.attr_int("transB", 0) != 1 || rb != 2 || ra < 2 ||
        c.attr_float("alpha", 1.f) != 1.f)
      c.fail("gradient of FusedMatMul is implemented for transA = 0, transB = 1, alpha 1, a 2-D B and A of rank 2 "
             "or more (the fused linear layer); got transA ", c.attr_int("transA", 0), ", transB ",
             c.attr_int("transB", 0), ", alpha ", c.attr_float("alpha", 1.f), ", ranks ", ra, " and ", rb);
    const std::string &g = c.GO(0), &X = c.I(0), &W = c.I(1);
    if (c.needs_GI(0)) c.set_GI(0, c.op("MatMul", {g, W}));
    if (c.needs_GI(1)) {
      const std::string fx = c.op("Flatten", {X}, {iattr("axis", ra - 1)});
      const std::string fg = c.op("Flatten", {g}, {iattr("axis", ra - 1)});
      c.set_GI(1, c.op("Gemm", {fg, fx}, {iattr("transA", 1)}));
    }
  }, {0, 1}, 1, 1000, ops::kDomain);
  t.add("Gemm", gemm_rule);
  t.add("Einsum", einsum_rule);

  // ---- convolution: com.onnxtrain.Conv(Transpose)Grad, or standard ops in portable mode
  t.add("Conv", conv_rule);
  t.add("ConvTranspose", conv_rule);
  // com.microsoft.FusedConv(X, W[, B], activation = "Relu"): train/fusion.h's Conv + Relu. The
  // pre-activation gradient is ReluGrad on the output (Y > 0 iff Conv(X) > 0), then ConvGrad as
  // for Conv; other activations and Z (onnxruntime's inference rewrites) are not differentiated.
  t.add("FusedConv", [](Ctx& c) {
    const std::string act = c.attr_string("activation", "");
    if (act != "Relu" || (c.num_inputs() > 3 && c.has_input(3)) || !c.attr_floats("activation_params", {}).empty())
      c.fail("gradient of FusedConv is implemented for activation 'Relu' without Z (the fused Conv + Relu); got "
             "activation '", act, "' and ", c.num_inputs(), " inputs");
    if (c.portable()) c.fail("gradient of FusedConv has no portable form (com.onnxtrain.ReluGrad and ConvGrad)");
    const std::string pre = c.custom("ReluGrad", {c.GO(0), c.O(0)}, 1)[0];
    const std::vector<bool> want = {c.needs_GI(0), c.needs_GI(1), c.has_input(2) && c.needs_GI(2)};
    const auto g = c.custom_some("ConvGrad", {pre, c.I(0), c.I(1)}, want, attrs_but(c, {"activation", "activation_params"}));
    for (size_t i = 0; i < 3; ++i)
      if (want[i]) c.set_GI(i, g[i]);
  }, {0, 1, 2}, 1, 1000, ops::kMicrosoftDomain);
  t.add("Col2Im", col2im_rule, {0});

  // ---- pooling: com.onnxtrain.<Pool>Grad, or standard ops in portable mode where the opset allows
  for (const char* op : {"MaxPool", "AveragePool", "LpPool", "GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"})
    t.add(op, pool_rule, {0});

}

// ---------------------------------------------------------------- helpers: reductions, softmax family
// Reduce* nodes of type `op` take their axes as input 1 (not an attribute) from this opset on.
bool axes_as_input(const std::string& op, int64_t opset) { return opset >= (op == "ReduceSum" ? 13 : 18); }
// (At 17, a Reduce* node with input 1 is opset 18's form kept for axes computed at run time,
// ir/opset_lower.h.)
bool axes_as_input(Ctx& c) { return axes_as_input(c.node().op_type, c.opset()) || c.has_input(1); }
// The axes are input 1, computed at run time.
bool runtime_axes(Ctx& c) { return axes_as_input(c) && c.has_input(1) && !c.constant_value(c.I(1)); }

// noop_with_empty_axes and no axes: the forward node is the identity.
bool reduce_is_noop(Ctx& c) {
  if (runtime_axes(c) && c.attr_int("noop_with_empty_axes", 0))
    c.fail("noop_with_empty_axes with axes computed at run time has no gradient rule");
  return axes_as_input(c) && c.attr_int("noop_with_empty_axes", 0) && reduced_axes(c, true).empty();
}

// A value shaped like the Reduce* output, with the reduced axes restored as 1 (keepdims = 0
// removed them) so that it broadcasts against the input. All axes reduced: a scalar broadcasts.
std::string keep_reduced(Ctx& c, const std::string& v) {
  if (c.attr_int("keepdims", 1)) return v;
  if (runtime_axes(c)) return c.op("Unsqueeze", {v, c.I(1)});  // Unsqueeze-13 takes them as input too
  const std::vector<int64_t> axes = reduced_axes(c, axes_as_input(c));
  return axes.empty() ? v : c.unsqueeze(v, axes);
}

// Reduce `type` over any axes, keepdims = 1, in the form the model's opset wants.
std::string reduce_axes(Ctx& c, const char* type, const std::string& v, const std::vector<int64_t>& axes) {
  if (axes_as_input(type, c.opset())) return c.op(type, {v, c.ints(axes)}, {iattr("keepdims", 1)});
  std::vector<ir::Attribute> attrs{iattr("keepdims", 1)};
  if (!axes.empty()) attrs.push_back(intsattr("axes", axes));
  return c.op(type, {v}, attrs);
}

// Reduce `type` over the forward node's axes, keepdims = 1.
std::string reduce_like(Ctx& c, const char* type, const std::string& v) {
  if (axes_as_input(c) && (axes_as_input(type, c.opset()) || runtime_axes(c)))  // pass the axes input through
    return c.op(type, c.has_input(1) ? std::vector<std::string>{v, c.I(1)} : std::vector<std::string>{v},
                {iattr("keepdims", 1)});
  return reduce_axes(c, type, v, reduced_axes(c, axes_as_input(c)));
}

// Registers a Reduce* rule: dx = f(x, y, g) with y and g in keepdims form (broadcasting against x);
// f returns x's shape. A noop reduction passes the gradient through.
using ReduceGrad = std::function<std::string(Ctx&, const std::string& x, const std::string& y, const std::string& g)>;
void add_reduce_rule(Table& t, const char* op, ReduceGrad f) {
  t.add(op, [f](Ctx& c) {
    if (reduce_is_noop(c)) return c.set_GI(0, c.GO(0));
    c.set_GI(0, f(c, c.I(0), keep_reduced(c, c.O(0)), keep_reduced(c, c.GO(0))));
  }, {0});
}

// ReduceMax/ReduceMin: the gradient goes to the elements equal to the result, split evenly among
// ties (torch.amax / torch.amin).
std::string reduce_extreme_grad(Ctx& c, const std::string& x, const std::string& y, const std::string& g) {
  const std::string mask = c.cast_like(c.op("Equal", {x, y}), x);
  return c.mul(c.div(g, reduce_like(c, "ReduceSum", mask)), mask);
}

// ReduceProd: d y / d x_i = product of the others. With z zeros in the group: z = 0 -> y / x_i;
// z = 1 -> the product of the nonzeros at the zero, 0 elsewhere; z >= 2 -> 0.
std::string reduce_prod_grad(Ctx& c, const std::string& x, const std::string&, const std::string& g) {
  const std::string zero = c.scalar_like(0.0, x), one = c.scalar_like(1.0, x);
  const std::string is_zero = c.op("Equal", {x, zero});
  const std::string nonzero = c.op("Where", {is_zero, one, x});
  const std::string p = reduce_like(c, "ReduceProd", nonzero);  // product of the nonzeros
  const std::string z = reduce_like(c, "ReduceSum", c.cast_like(is_zero, x));
  const std::string at_zero = c.op("Where", {c.op("Equal", {z, one}), p, zero});
  const std::string elsewhere = c.op("Where", {c.op("Equal", {z, zero}), c.div(p, nonzero), zero});
  return c.mul(g, c.op("Where", {is_zero, at_zero, elsewhere}));
}

// Axes a Softmax-family node normalizes over: opset < 13 coerces the input to 2-D at `axis`
// (default 1): axes axis..rank-1; opset 13 on: the single `axis` (default -1).
std::vector<int64_t> softmax_axes(Ctx& c) {
  const int64_t r = c.rank(c.I(0));
  if (r < 0) c.fail("input rank unknown (ONNX type inference failed)");
  int64_t a = c.attr_int("axis", c.opset() < 13 ? 1 : -1);
  if (a < 0) a += r;
  if (c.opset() >= 13) return {a};
  std::vector<int64_t> axes;
  for (int64_t i = a; i < r; ++i) axes.push_back(i);
  return axes;
}

// Softmax: dx = y (dy - sum(dy y)); LogSoftmax: dx = dy - exp(y) sum(dy). Default mode: one
// com.onnxtrain.SoftmaxGrad / LogSoftmaxGrad node (same axis semantics as the forward opset).
void softmax_grad_rule(Ctx& c, bool log) {
  const std::string &y = c.O(0), &g = c.GO(0);
  if (!c.portable()) {
    const int64_t axis = c.attr_int("axis", c.opset() < 13 ? 1 : -1);
    c.set_GI(0, c.custom(log ? "LogSoftmaxGrad" : "SoftmaxGrad", {g, y}, 1,
                         {iattr("axis", axis), iattr("coerce_2d", c.opset() < 13)})[0]);
    return;
  }
  const std::vector<int64_t> axes = softmax_axes(c);
  if (axes.empty()) return c.set_GI(0, c.zeros_like(c.I(0)));  // coerced to [n, 1]: y is constant
  if (log)
    c.set_GI(0, c.sub(g, c.mul(c.op("Exp", {y}), c.reduce_sum(g, axes, true))));
  else
    c.set_GI(0, c.mul(y, c.sub(g, c.reduce_sum(c.mul(g, y), axes, true))));
}

// ================================================================ reductions, softmax family, CumSum, TopK
void rules_reduce(Table& t) {
  // ---- reductions: broadcast the output gradient back over the reduced axes
  t.add("ReduceSum", [](Ctx& c) { c.set_GI(0, reduce_back(c, c.GO(0), axes_as_input(c))); }, {0});
  t.add("ReduceMean", [](Ctx& c) {
    const std::string g = reduce_back(c, c.GO(0), axes_as_input(c));
    const std::string n = c.div(c.cast_like(c.op("Size", {c.I(0)}), c.I(0)), c.cast_like(c.op("Size", {c.O(0)}), c.I(0)));
    c.set_GI(0, c.div(g, n));
  }, {0});
  add_reduce_rule(t, "ReduceMax", reduce_extreme_grad);
  add_reduce_rule(t, "ReduceMin", reduce_extreme_grad);
  add_reduce_rule(t, "ReduceProd", reduce_prod_grad);
  add_reduce_rule(t, "ReduceL1", [](Ctx& c, const std::string& x, const std::string&, const std::string& g) {
    return c.mul(g, c.op("Sign", {x}));
  });
  add_reduce_rule(t, "ReduceL2", [](Ctx& c, const std::string& x, const std::string& y, const std::string& g) {
    // x g / y, 0 where y = 0 (torch.linalg.norm)
    const std::string s = c.op("Where", {c.op("Equal", {y, c.scalar_like(0.0, y)}), c.scalar_like(0.0, y), c.div(g, y)});
    return c.mul(x, s);
  });
  add_reduce_rule(t, "ReduceSumSquare", [](Ctx& c, const std::string& x, const std::string&, const std::string& g) {
    return c.mul(c.mul(g, c.scalar_like(2.0, x)), x);
  });
  t.add("ReduceLogSum", [](Ctx& c) {  // g / sum(x), sum(x) = exp(y)
    if (reduce_is_noop(c)) return c.set_GI(0, c.GO(0));
    c.set_GI(0, reduce_back(c, c.div(c.GO(0), c.op("Exp", {c.O(0)})), axes_as_input(c)));
  }, {0});
  add_reduce_rule(t, "ReduceLogSumExp", [](Ctx& c, const std::string& x, const std::string& y, const std::string& g) {
    return c.mul(g, c.op("Exp", {c.sub(x, y)}));  // g softmax(x)
  });

  // ---- scans and selections
  t.add("CumSum", [](Ctx& c) {  // reverse cumulative sum of the gradient, same exclusivity
    c.set_GI(0, c.op("CumSum", {c.GO(0), c.I(1)},
                     {iattr("exclusive", c.attr_int("exclusive", 0)), iattr("reverse", !c.attr_int("reverse", 0))}));
  }, {0});
  t.add("TopK", [](Ctx& c) {  // scatter the values' gradient to the selected indices
    if (c.opset() < 11) c.fail("the gradient needs ScatterElements (opset >= 11)");
    const std::string idx = c.forward_output(1);
    c.set_GI(0, c.op("ScatterElements", {c.zeros_like(c.I(0)), idx, c.GO(0)}, {iattr("axis", c.attr_int("axis", -1))}));
  }, {0});

  // ---- softmax family
  t.add("Softmax", [](Ctx& c) { softmax_grad_rule(c, false); });
  t.add("LogSoftmax", [](Ctx& c) { softmax_grad_rule(c, true); });
  t.zero("Hardmax");
}

// ---------------------------------------------------------------- helpers: normalization, dropout, losses
// v as `like`'s element type (no node when it already is).
std::string as_type_of(Ctx& c, const std::string& v, const std::string& like) {
  return c.dtype(v) == c.dtype(like) && c.dtype(v) != DType::kUndefined ? v : c.cast_like(v, like);
}

// Drops trailing omitted ("") inputs of a node to emit.
std::vector<std::string> trim_inputs(std::vector<std::string> v) {
  while (!v.empty() && v.back().empty()) v.pop_back();
  return v;
}

// xhat = (x - mean(x)) inv, inv = 1 / sqrt(var(x) + eps), statistics over `axes` (keepdims), in
// standard ops.
struct Normalized {
  std::string xhat, inv;
};
Normalized normalize_std(Ctx& c, const std::string& x, const std::vector<int64_t>& axes, double eps) {
  const std::string xc = c.sub(x, reduce_axes(c, "ReduceMean", x, axes));
  const std::string var = reduce_axes(c, "ReduceMean", c.mul(xc, xc), axes);
  const std::string inv = c.op("Reciprocal", {c.op("Sqrt", {c.add(var, c.scalar_like(eps, x))})});
  return {c.mul(xc, inv), inv};
}

// dx of xhat = (x - mean(x)) inv (statistics over `axes`) given dxhat:
// inv (dxhat - mean(dxhat) - xhat mean(dxhat xhat)).
std::string normalize_std_grad(Ctx& c, const Normalized& n, const std::string& dxhat, const std::vector<int64_t>& axes) {
  const std::string m1 = reduce_axes(c, "ReduceMean", dxhat, axes);
  const std::string m2 = reduce_axes(c, "ReduceMean", c.mul(dxhat, n.xhat), axes);
  return c.mul(n.inv, c.sub(c.sub(dxhat, m1), c.mul(n.xhat, m2)));
}

// Per-channel statistic v ([1, P, 1], X's type) as parameter input i (its shape and type).
void set_param_grad(Ctx& c, size_t i, const std::string& v) {
  if (c.needs_GI(i)) c.set_GI(i, as_type_of(c, c.reshape(v, c.shape_of(c.I(i))), c.I(i)));
}

// BatchNormalization. Training (opset >= 14: training_mode; before: the node names outputs beyond
// Y, and opset < 7 is_test = 0) normalizes with the batch's statistics:
//   dx = scale inv (dy - mean(dy) - xhat mean(dy xhat)), dscale = sum(dy xhat), dB = sum(dy)
// (sums over N and the spatial dims; torch's formula). Inference uses the running statistics:
//   dx = scale inv dy, dmean = -scale inv sum(dy), dvar = -scale inv^2 / 2 sum(dy xhat).
// spatial = 0 (opset < 9): statistics per element of dims[1:].
void batchnorm_rule(Ctx& c) {
  const std::string &x = c.I(0), &g = c.GO(0);
  const bool spatial = c.opset() >= 9 || c.attr_int("spatial", 1) != 0;
  bool training = c.attr_int("training_mode", 0) != 0;
  if (c.opset() < 14) {
    bool extra = false;
    for (size_t k = 1; k < c.num_outputs(); ++k) extra |= !c.O(k).empty();
    training = extra && c.attr_int("is_test", 0) == 0;
  }
  for (size_t k = 1; k < c.num_outputs(); ++k)
    if (c.has_GO(k)) c.fail("gradients flowing into the running or saved statistics (output ", k, ") are not supported");
  const float eps = c.attr_float("epsilon", 1e-5f);
  if (!c.portable()) {
    // Training mode recomputes the batch's moments: the running statistics are not read (so that
    // the forward node may update them in place).
    const auto d = c.custom("BatchNormalizationGrad", {g, x, c.I(1), training ? "" : c.I(3), training ? "" : c.I(4)},
                            training ? 3 : 5,
                            {fattr("epsilon", eps), iattr("training_mode", training), iattr("spatial", spatial)});
    for (size_t i = 0; i < d.size(); ++i) c.set_GI(i, d[i]);  // dX, dscale, dB (, dmean, dvar)
    return;
  }
  // Standard ops on X viewed as [N, P, S] (P channels, or every element of dims[1:] when not spatial).
  const std::string x3 = c.reshape(x, c.ints({0, spatial ? 0 : -1, spatial ? -1 : 1}));
  const std::string g3 = c.reshape(g, c.shape_of(x3));
  const std::vector<int64_t> axes{0, 2};
  auto param = [&](size_t i) { return as_type_of(c, c.reshape(c.I(i), c.ints({1, -1, 1})), x); };
  const std::string scale = param(1);
  std::string dx;
  if (training) {
    const Normalized n = normalize_std(c, x3, axes, eps);
    dx = normalize_std_grad(c, n, c.mul(g3, scale), axes);
    set_param_grad(c, 1, reduce_axes(c, "ReduceSum", c.mul(g3, n.xhat), axes));
  } else {
    const std::string inv = c.op("Reciprocal", {c.op("Sqrt", {c.add(param(4), c.scalar_like(eps, x))})});
    const std::string a = c.mul(scale, inv);
    const std::string sdy = reduce_axes(c, "ReduceSum", g3, axes);
    const std::string sdyxhat = reduce_axes(c, "ReduceSum", c.mul(g3, c.mul(c.sub(x3, param(3)), inv)), axes);
    dx = c.mul(g3, a);
    set_param_grad(c, 1, sdyxhat);
    set_param_grad(c, 3, c.neg(c.mul(a, sdy)));
    set_param_grad(c, 4, c.mul(c.mul(a, c.mul(inv, c.scalar_like(-0.5, x))), sdyxhat));
  }
  set_param_grad(c, 2, reduce_axes(c, "ReduceSum", g3, axes));
  c.set_GI(0, c.reshape(dx, c.shape_of(x)));
}

// LayerNormalization (opset 17): xhat = (x - Mean) InvStdDev over dims[axis:], y = xhat Scale + B.
// Mean and InvStdDev come from the forward node (named when the model leaves them unnamed).
void layernorm_rule(Ctx& c) {
  const std::string &x = c.I(0), &g = c.GO(0);
  const int64_t r = c.rank(x);
  if (r < 0) c.fail("input rank unknown (ONNX type inference failed)");
  int64_t axis = c.attr_int("axis", -1);
  if (axis < -r || axis >= r) c.fail("axis ", axis, " is out of range for rank ", r);
  if (axis < 0) axis += r;
  const std::string mean = c.forward_output(1), inv = c.forward_output(2);
  if (!c.portable()) {  // dScale, dB come in the normalized shape dims[axis:]
    const auto d = c.custom("LayerNormalizationGrad", {g, x, c.I(1), mean, inv}, 3, {iattr("axis", axis)});
    c.set_GI(0, d[0]);
    ir::TypeInfo nt;
    const ir::TypeInfo* xt = c.type(x);
    if (xt && xt->has_shape) nt = with_tail(xt, size_t(r), last_dims(xt, size_t(r - axis)), c.dtype(x));
    for (size_t i = 1; i <= 2; ++i)
      if (c.has_input(i)) c.set_GI_unbroadcast_typed(i, d[i], xt && xt->has_shape ? &nt : nullptr);
    return;
  }
  std::vector<int64_t> axes;
  for (int64_t a = axis; a < r; ++a) axes.push_back(a);
  const Normalized n{c.mul(c.sub(x, as_type_of(c, mean, x)), as_type_of(c, inv, x)), as_type_of(c, inv, x)};
  c.set_GI(0, normalize_std_grad(c, n, c.mul(g, c.I(1)), axes));
  if (c.needs_GI(1)) c.set_GI_unbroadcast(1, c.mul(g, n.xhat));
  if (c.has_input(2)) c.set_GI_unbroadcast(2, g);
}

// InstanceNormalization: statistics per (n, c) over the spatial dims; X viewed as [N, C, S].
void instancenorm_rule(Ctx& c) {
  const std::string &x = c.I(0), &g = c.GO(0);
  const std::string x3 = c.reshape(x, c.ints({0, 0, -1}));
  const std::string g3 = c.reshape(g, c.shape_of(x3));
  const Normalized n = normalize_std(c, x3, {2}, c.attr_float("epsilon", 1e-5f));
  const std::string scale = as_type_of(c, c.reshape(c.I(1), c.ints({1, -1, 1})), x);
  c.set_GI(0, c.reshape(normalize_std_grad(c, n, c.mul(g3, scale), {2}), c.shape_of(x)));
  set_param_grad(c, 1, reduce_axes(c, "ReduceSum", c.mul(g3, n.xhat), {0, 2}));
  set_param_grad(c, 2, reduce_axes(c, "ReduceSum", g3, {0, 2}));
}

// Sum over the LRN window of channels [c - lo, c + hi] (zero padded) along axis 1, standard ops.
std::string channel_window_sum(Ctx& c, const std::string& v, int64_t r, int64_t lo, int64_t hi) {
  std::vector<int64_t> pads(size_t(2 * r), 0);
  pads[1] = lo;
  pads[size_t(r) + 1] = hi;
  const std::string padded = c.pad(v, pads);
  std::vector<std::string> terms;
  for (int64_t k = 0; k <= lo + hi; ++k) {  // channels [k, k + C) of the padded tensor
    const int64_t end = k == lo + hi ? std::numeric_limits<int64_t>::max() : k - lo - hi;
    terms.push_back(c.slice(padded, {k}, {end}, {1}));
  }
  return terms.size() == 1 ? terms[0] : c.op("Sum", terms);
}

// LRN: y = x d^-beta, d = bias + alpha / size * sum_{window(c)} x^2:
//   dx_c = dy_c d_c^-beta - 2 alpha beta / size x_c sum_{c': c in window(c')} dy_c' x_c' d_c'^(-beta-1)
void lrn_rule(Ctx& c) {
  const std::string &x = c.I(0), &g = c.GO(0);
  const int64_t size = c.attr_int("size", 1);
  const double alpha = c.attr_float("alpha", 1e-4f), beta = c.attr_float("beta", 0.75f), bias = c.attr_float("bias", 1.f);
  if (!c.portable()) {
    c.set_GI(0, c.custom("LRNGrad", {g, x}, 1, {iattr("size", size), fattr("alpha", float(alpha)),
                                                fattr("beta", float(beta)), fattr("bias", float(bias))})[0]);
    return;
  }
  const int64_t r = c.rank(x);
  if (r < 0) c.fail("input rank unknown (ONNX type inference failed)");
  const int64_t lo = (size - 1) / 2, hi = size / 2;
  const std::string d = c.add(c.scalar_like(bias, x),
                              c.mul(c.scalar_like(alpha / double(size), x), channel_window_sum(c, c.mul(x, x), r, lo, hi)));
  const std::string dpow = c.op("Pow", {d, c.scalar_like(-beta, x)});  // d^-beta
  const std::string t = c.div(c.mul(c.mul(g, x), dpow), d);             // dy x d^(-beta-1)
  const std::string back = channel_window_sum(c, t, r, hi, lo);         // windows containing c
  c.set_GI(0, c.sub(c.mul(g, dpow), c.mul(c.mul(x, back), c.scalar_like(2 * alpha * beta / double(size), x))));
}

// Dropout: dx = dy mask / (1 - ratio) in training mode, dy otherwise. The mask is the forward
// node's (named when the model leaves it unnamed). Opset >= 12: training_mode input (absent:
// inference); before: the session's training flag decides (custom kernel only) and opset < 7
// is_test = 1 means inference.
void dropout_rule(Ctx& c) {
  const std::string& g = c.GO(0);
  if (c.opset() < 7 && c.attr_int("is_test", 0)) return c.set_GI(0, g);
  std::string mode;  // training_mode value when only known at run time
  if (c.opset() >= 12) {
    if (!c.has_input(2)) return c.set_GI(0, g);
    const Tensor* tm = c.constant_value(c.I(2));
    if (tm && tm->numel() == 1 && tm->dtype() == DType::kBool && !tm->data<bool>()[0]) return c.set_GI(0, g);
    if (!tm) mode = c.I(2);
  }
  const std::string ratio = c.opset() >= 12 && c.has_input(1) ? c.I(1) : "";
  const std::string mask = c.forward_output(1);
  if (!c.portable()) {
    c.set_GI(0, c.custom("DropoutGrad", trim_inputs({g, mask, ratio, mode}), 1,
                         {fattr("ratio", c.opset() < 12 ? c.attr_float("ratio", 0.5f) : 0.5f),
                          iattr("session_training", c.opset() < 12)})[0]);
    return;
  }
  if (c.opset() < 12) c.fail("a portable gradient needs opset >= 12 (before, the session decides the mode)");
  const std::string one = c.scalar_like(1.0, g);
  const std::string scale = ratio.empty() ? c.scalar_like(2.0, g) : c.div(one, c.sub(one, as_type_of(c, ratio, g)));
  const std::string dx = c.mul(c.mul(g, as_type_of(c, mask, g)), scale);
  c.set_GI(0, mode.empty() ? dx : c.op("Where", {mode, dx, g}));
}

// SoftmaxCrossEntropyLoss (softmax) and NegativeLogLikelihoodLoss over scores [N, C, d..]:
//   dscores = (p - onehot(t)) f (SCE, p = exp(log_prob)), dinput = -onehot(t) f (NLL),
//   f[n, d] = w[t] dloss (none, sum) or w[t] dloss / sum of applied weights (mean); 0 where t is
//   ignore_index. log_prob's own gradient (SCE output 1) goes through log-softmax along axis 1.
void loss_rule(Ctx& c, bool softmax) {
  const std::string &x = c.I(0), &labels = c.I(1);
  const std::string w = c.has_input(2) ? c.I(2) : "";
  const std::string reduction = c.attr_string("reduction", "mean");
  const bool has_ignore = c.has_attr("ignore_index");
  if (c.has_GO(0)) {
    const std::string lp = softmax ? c.forward_output(1) : x;  // NLL: x only gives the shape
    if (!c.portable()) {
      c.set_GI(0, c.custom(softmax ? "SoftmaxCrossEntropyLossGrad" : "NegativeLogLikelihoodLossGrad",
                           trim_inputs({c.GO(0), lp, labels, w}), 1, c.attrs())[0]);  // reduction, ignore_index
    } else {
      std::string t = labels, wt;  // wt: weight applied at each position, "" when all are 1
      if (has_ignore) {
        auto label_const = [&](int64_t v) {
          return c.dtype(labels) == DType::kInt32 ? c.constant(Tensor::scalar<int32_t>(int32_t(v)))
                                                  : c.constant(Tensor::scalar<int64_t>(v));
        };
        const std::string kept = c.op("Not", {c.op("Equal", {labels, label_const(c.attr_int("ignore_index", 0))})});
        t = c.op("Where", {kept, labels, label_const(0)});
        wt = c.cast_like(kept, x);
      }
      if (!w.empty()) {
        const std::string wg = as_type_of(c, c.op("Gather", {w, t}), x);
        wt = wt.empty() ? wg : c.mul(wt, wg);
      }
      std::string coef = c.GO(0);  // [] (sum, mean) or [N, d..] (none)
      if (reduction == "mean")
        coef = c.div(coef, wt.empty() ? c.cast_like(c.op("Size", {labels}), x) : c.reduce_sum(wt, {}, false));
      std::string f = wt.empty() ? coef : c.mul(wt, coef);
      if (!(wt.empty() && reduction != "none")) f = c.unsqueeze(f, {1});  // [N, 1, d..]
      const std::string depth = c.op("Gather", {c.shape_of(x), c.ints({1})}, {iattr("axis", 0)});
      const std::string onehot = c.op("OneHot", {t, depth, c.cast_like(c.ints({0, 1}), x)}, {iattr("axis", 1)});
      c.set_GI(0, softmax ? c.mul(c.sub(c.op("Exp", {lp}), onehot), f) : c.neg(c.mul(onehot, f)));
    }
  }
  if (softmax && c.has_GO(1)) {  // log_prob = log_softmax(scores) along axis 1
    const std::string &lp = c.O(1), &glp = c.GO(1);
    if (!c.portable())
      c.set_GI(0, c.custom("LogSoftmaxGrad", {glp, lp}, 1, {iattr("axis", 1), iattr("coerce_2d", 0)})[0]);
    else
      c.set_GI(0, c.sub(glp, c.mul(c.op("Exp", {lp}), c.reduce_sum(glp, {1}, true))));
  }
}

// ================================================================ normalization, dropout, losses
void rules_norm_loss(Table& t) {
  t.add("BatchNormalization", batchnorm_rule, {0, 1, 2, 3, 4});
  t.add("InstanceNormalization", instancenorm_rule);
  t.add("LayerNormalization", layernorm_rule, {0, 1, 2}, 17);
  t.add("LRN", lrn_rule);
  t.add("Dropout", dropout_rule, {0});
  t.add("SoftmaxCrossEntropyLoss", [](Ctx& c) { loss_rule(c, true); }, {0}, 12);
  t.add("NegativeLogLikelihoodLoss", [](Ctx& c) { loss_rule(c, false); }, {0}, 12);
}

// ---------------------------------------------------------------- shape, movement and index helpers

IntList int_list(Ctx& c, size_t input) {
  if (!c.has_input(input)) return {};
  if (!c.constant_value(c.I(input))) return {c.I(input), std::nullopt};
  return {c.I(input), c.const_ints_input(input)};
}
IntList int_list(Ctx& c, const std::vector<int64_t>& v) { return {c.ints(v), v}; }

// g reshaped to v's shape (Reshape-1..4 take the shape as an attribute: static shapes only).
std::string reshape_like(Ctx& c, const std::string& g, const std::string& v) {
  if (c.opset() >= 5) return c.reshape(g, c.shape_of(v));
  const auto s = c.static_shape(v);
  if (!s) c.fail("Reshape-", c.opset(), " needs the static shape of '", v, "'");
  return c.op("Reshape", {g}, {intsattr("shape", *s)});
}

std::string concat(Ctx& c, const std::vector<std::string>& parts, int64_t axis) {
  return parts.size() == 1 ? parts[0] : c.op("Concat", parts, {iattr("axis", axis)});
}

// Sum of every element, as a scalar.
std::string sum_all(Ctx& c, const std::string& v) { return c.op("ReduceSum", {v}, {iattr("keepdims", 0)}); }

// Tile: g viewed as [rep_0, d_0, rep_1, d_1, ...]; the repeat axes sum.
void tile_rule(Ctx& c) {
  const std::string& x = c.I(0);
  const int64_t r = known_rank(c, x);
  if (r == 0) return c.set_GI(0, c.GO(0));
  const IntList reps = int_list(c, 1);
  const auto xs = c.static_shape(x);
  std::string view;
  if (reps.value && xs) {
    std::vector<int64_t> v;
    for (int64_t i = 0; i < r; ++i) {
      v.push_back((*reps.value)[size_t(i)]);
      v.push_back((*xs)[size_t(i)]);
    }
    view = c.ints(v);
  } else {  // interleave the two [r] vectors: [2, r] -> [r, 2] -> [2r]
    const std::string both = concat(c, {c.unsqueeze(reps.name, {0}), c.unsqueeze(c.shape_of(x), {0})}, 0);
    view = c.reshape(c.transpose(both, {1, 0}), c.ints({-1}));
  }
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < r; ++i) axes.push_back(2 * i);
  c.set_GI(0, c.reduce_sum(c.reshape(c.GO(0), view), axes, false));
}

// Concat: each input's part of g along the axis (one Split when the sizes are static, else
// Slices at offsets computed from the input shapes).
void concat_rule(Ctx& c) {
  const std::string& g = c.GO(0);
  const int64_t r = c.rank(c.O(0)) >= 0 ? c.rank(c.O(0)) : known_rank(c, c.I(0));
  const int64_t axis = norm_axis(c, c.attr_int("axis", 1), r);
  std::vector<size_t> used;
  std::vector<int64_t> sizes;
  bool known = true;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    const int64_t ri = c.rank(c.I(i));
    if (ri >= 0 && ri != r) {  // legacy 1-D empty input that the kernel skips: an empty gradient
      if (ri != 1 || static_dim(c, c.I(i), 0) != 0) c.fail("input ", i, " has rank ", ri, ", output ", r);
      c.set_GI(i, c.constant(Tensor::zeros(c.dtype(c.I(i)), {0})));
      continue;
    }
    used.push_back(i);
    sizes.push_back(static_dim(c, c.I(i), axis));
    known = known && sizes.back() >= 0;
  }
  std::vector<std::string> parts;
  if (used.size() == 1) {
    parts = {g};
  } else if (known) {
    parts = c.split(g, axis, sizes);
  } else {
    if (c.opset() < 10) c.fail("inputs of unknown size along the axis need opset >= 10 (Slice with inputs)");
    std::string begin = c.ints({0});
    for (size_t i : used) {
      const std::string end = c.add(begin, dim_of(c, c.I(i), axis));
      parts.push_back(c.op("Slice", {g, begin, end, c.ints({axis})}));
      begin = end;
    }
  }
  for (size_t k = 0; k < used.size(); ++k) c.set_GI(used[k], parts[k]);
}

// Slice: dX = zeros with g at the sliced positions: one SliceGrad node, or the portable form.
void slice_rule(Ctx& c) {
  IntList starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = int_list(c, c.attr_ints("starts", {}));
    ends = int_list(c, c.attr_ints("ends", {}));
    if (c.has_attr("axes")) axes = int_list(c, c.attr_ints("axes", {}));
  } else {
    starts = int_list(c, 1);
    ends = int_list(c, 2);
    axes = int_list(c, 3);
    steps = int_list(c, 4);
  }
  if (c.portable())
    if (std::string gx = slice_grad_portable(c, starts, ends, axes, steps); !gx.empty()) return c.set_GI(0, gx);
  std::vector<std::string> in{c.GO(0), c.shape_of(c.I(0)), starts.name, ends.name, axes.name, steps.name};
  while (in.back().empty()) in.pop_back();
  c.set_GI(0, c.custom("SliceGrad", in, 1)[0]);
}

// Pad. constant: dX = Pad(g, -pads) (crops the padding, zero-fills what negative pads cropped);
// the constant receives the rest of g. edge / reflect / wrap: one PadGrad node, or portable
// Slice/Pad folds when shapes and pads are static.
void pad_rule(Ctx& c) {
  const std::string mode = c.attr_string("mode", "constant");
  const std::string& g = c.GO(0);
  const IntList pads = c.opset() < 11 ? int_list(c, c.attr_ints(c.opset() < 2 ? "paddings" : "pads", {})) : int_list(c, 1);
  const std::string axes = c.opset() >= 18 && c.has_input(3) ? c.I(3) : "";
  if (mode == "constant") {
    std::string gx;
    if (pads.value) {
      std::vector<int64_t> neg;
      for (int64_t p : *pads.value) neg.push_back(-p);
      gx = axes.empty() ? c.pad(g, neg) : c.op("Pad", {g, c.ints(neg), "", axes});
    } else {
      std::vector<std::string> in{g, c.mul(pads.name, c.ints({-1}))};
      if (!axes.empty()) in.insert(in.end(), {"", axes});
      gx = c.op("Pad", in);
    }
    c.set_GI(0, gx);
    if (c.needs_GI(2)) c.set_GI(2, reshape_like(c, c.sub(sum_all(c, g), sum_all(c, gx)), c.I(2)));
    return;
  }
  if (c.portable() && pads.value && axes.empty())
    if (std::string gx = pad_grad_portable(c, mode, *pads.value); !gx.empty()) return c.set_GI(0, gx);
  std::vector<std::string> in{g, c.shape_of(c.I(0)), pads.name};
  if (!axes.empty()) in.push_back(axes);
  c.set_GI(0, c.custom("PadGrad", in, 1, {sattr("mode", mode)})[0]);
}

// ================================================================ shape and data movement
void rules_shape(Table& t) {
  // ---- reshaping (gradient: reshape back)
  auto reshape_back = [](Ctx& c) { c.set_GI(0, reshape_like(c, c.GO(0), c.I(0))); };
  t.add("Reshape", reshape_back, {0});
  t.add("Flatten", reshape_back);
  t.add("Squeeze", reshape_back, {0});
  t.add("Unsqueeze", reshape_back, {0});
  t.add("Transpose", [](Ctx& c) {
    std::vector<int64_t> perm = c.attr_ints("perm", {});
    if (perm.empty()) {
      const int64_t r = c.rank(c.I(0));
      if (r < 0) c.fail("input rank unknown");
      for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
    }
    std::vector<int64_t> inv(perm.size(), -1);
    for (size_t i = 0; i < perm.size(); ++i) {
      if (perm[i] < 0 || perm[i] >= int64_t(perm.size()) || inv[size_t(perm[i])] >= 0)
        c.fail("perm ", shape_to_string(perm), " is not a permutation of [0, ", perm.size(), ")");
      inv[size_t(perm[i])] = int64_t(i);
    }
    c.set_GI(0, c.transpose(c.GO(0), inv));
  });

  // ---- broadcasting copies: the copies sum back
  t.add("Expand", [](Ctx& c) { c.set_GI_unbroadcast(0, c.GO(0)); }, {0});
  t.add("Tile", tile_rule, {0}, 6);

  // ---- Range: y_i = start + i delta (the limit only sets the length: zero gradient a.e.)
  t.add("Range", [](Ctx& c) {
    const std::string& g = c.GO(0);
    c.set_GI_unbroadcast(0, g);
    if (c.needs_GI(2)) {
      const std::string n = c.op("Size", {g});
      const std::string i = c.op("Range", {c.constant(Tensor::scalar<int64_t>(0)), n, c.constant(Tensor::scalar<int64_t>(1))});
      c.set_GI_unbroadcast(2, c.mul(g, c.cast_like(i, g)));
    }
  }, {0, 2});

  // ---- joining and cutting
  t.add("Concat", concat_rule);
  t.add("Split", [](Ctx& c) {  // outputs without a gradient contribute zeros
    std::vector<std::string> parts;
    for (size_t k = 0; k < c.num_outputs(); ++k) parts.push_back(c.GO_or_zeros(k));
    c.set_GI(0, concat(c, parts, norm_axis(c, c.attr_int("axis", 0), known_rank(c, c.I(0)))));
  }, {0});
  t.add("Slice", slice_rule, {0});
  t.add("Pad", pad_rule, {0, 2});

  // ---- masks and rearrangements
  t.add("Trilu", [](Ctx& c) {  // the same mask
    std::vector<std::string> in{c.GO(0)};
    if (c.has_input(1)) in.push_back(c.I(1));
    c.set_GI(0, c.op("Trilu", in, c.attrs()));
  }, {0});
  t.add("SpaceToDepth", [](Ctx& c) {  // inverse: DepthToSpace in DCR mode (the only mode before 11)
    std::vector<ir::Attribute> at{iattr("blocksize", c.attr_int("blocksize", 1))};
    if (c.opset() >= 11) at.push_back(sattr("mode", "DCR"));
    c.set_GI(0, c.op("DepthToSpace", {c.GO(0)}, at));
  });
  t.add("DepthToSpace", [](Ctx& c) {
    const int64_t b = c.attr_int("blocksize", 1);
    if (c.attr_string("mode", "DCR") == "DCR") return c.set_GI(0, c.op("SpaceToDepth", {c.GO(0)}, {iattr("blocksize", b)}));
    // CRD: dX[n, c*b*b + i*b + j, h, w] = g[n, c, h*b + i, w*b + j], by views that copy (0) or
    // infer (-1) dimensions, so that no shape arithmetic is needed.
    std::string v = c.reshape(c.GO(0), c.ints({0, 0, 0, -1, b}));                      // [N, c, H*b, W, b_j]
    v = c.reshape(c.transpose(v, {0, 1, 3, 4, 2}), c.ints({0, 0, 0, 0, -1, b}));  // [N, c, W, b_j, H, b_i]
    c.set_GI(0, reshape_like(c, c.transpose(v, {0, 1, 5, 3, 4, 2}), c.I(0)));     // [N, c, b_i, b_j, H, W]
  });
}

// dX = zeros with g added at the gathered positions: the standard scatter with reduction add from
// opset 16 (when `standard`), else the com.onnxtrain kernel (inputs shape(X), indices, g).
void scatter_add_rule(Ctx& c, const char* scatter, const char* grad_op, std::vector<ir::Attribute> attrs, bool standard) {
  if (standard && c.opset() >= 16) {
    attrs.push_back(sattr("reduction", "add"));
    return c.set_GI(0, c.op(scatter, {c.zeros_like(c.I(0)), c.I(1), c.GO(0)}, attrs));
  }
  c.set_GI(0, c.custom(grad_op, {c.shape_of(c.I(0)), c.I(1), c.GO(0)}, 1, attrs)[0]);
}

// Gather. Default: one GatherGrad node (the embedding backward). Portable from opset 16: the
// gradient viewed as X[:a] + [n] + X[a+1:] scatter-adds along the axis.
void gather_rule(Ctx& c) {
  const std::string &x = c.I(0), &idx = c.I(1), &g = c.GO(0);
  const int64_t axis = c.attr_int("axis", 0);
  if (!c.portable() || c.opset() < 16)
    return scatter_add_rule(c, "", "GatherGrad", {iattr("axis", axis)}, false);
  const int64_t r = known_rank(c, x), a = norm_axis(c, axis, r);
  const std::string sx = c.shape_of(x);
  std::vector<std::string> dims;
  if (a > 0) dims.push_back(c.slice(sx, {0}, {a}, {0}));
  dims.push_back(c.ints({-1}));
  if (a + 1 < r) dims.push_back(c.slice(sx, {a + 1}, {r}, {0}));
  const std::string gv = c.reshape(g, concat(c, dims, 0));
  std::vector<int64_t> view(size_t(r), 1);
  view[size_t(a)] = -1;
  const std::string iv = c.expand(c.reshape(idx, c.ints(view)), c.shape_of(gv));
  c.set_GI(0, c.op("ScatterElements", {c.zeros_like(x), iv, gv}, {iattr("axis", a), sattr("reduction", "add")}));
}

// ScatterND / ScatterElements: Y = X with U written (none), added or multiplied at the indexed
// positions; `gather` reads them back (GatherND / GatherElements, same attributes).
void scatter_rule(Ctx& c, const char* scatter, const char* gather) {
  const std::string &x = c.I(0), &idx = c.I(1), &u = c.I(2), &g = c.GO(0);
  std::vector<ir::Attribute> at;
  if (c.has_attr("axis")) at.push_back(iattr("axis", c.attr_int("axis", 0)));
  const std::string red = c.attr_string("reduction", "none");
  if (red == "none") {  // overwritten positions pass nothing to X
    if (c.needs_GI(0)) c.set_GI(0, c.op(scatter, {g, idx, c.zeros_like(u)}, at));
    if (c.needs_GI(2)) c.set_GI(2, c.op(gather, {g, idx}, at));
  } else if (red == "add") {
    c.set_GI(0, g);
    if (c.needs_GI(2)) c.set_GI(2, c.op(gather, {g, idx}, at));
  } else if (red == "mul") {  // Y = X * P, P = U scatter-multiplied into ones: dX = g P, dU = gather(g Y) / U
    if (c.needs_GI(0)) {
      std::vector<ir::Attribute> mul = at;
      mul.push_back(sattr("reduction", "mul"));
      c.set_GI(0, c.mul(g, c.op(scatter, {c.ones_like(x), idx, u}, mul)));
    }
    if (c.needs_GI(2)) c.set_GI(2, c.div(c.op(gather, {c.mul(g, c.O(0)), idx}, at), u));
  } else if (red == "max" || red == "min") {
    // Each indexed position holds the max (min) of X and its updates: the gradient goes to the
    // values equal to Y there, split evenly among ties (torch's scatter_reduce amax / amin with
    // include_self). count: X's hit plus the updates' hits scattered onto their positions.
    const std::string& y = c.O(0);
    const std::string hit_x = c.cast_like(c.op("Equal", {x, y}), x);
    const std::string hit_u = c.cast_like(c.op("Equal", {u, c.op(gather, {y, idx}, at)}), u);
    std::vector<ir::Attribute> sum = at;
    sum.push_back(sattr("reduction", "add"));
    const std::string share = c.div(g, c.op(scatter, {hit_x, idx, hit_u}, sum));
    if (c.needs_GI(0)) c.set_GI(0, c.mul(share, hit_x));
    if (c.needs_GI(2)) c.set_GI(2, c.mul(c.op(gather, {share, idx}, at), hit_u));
  } else {
    c.fail("reduction '", red, "' has no gradient rule");
  }
}

// ================================================================ indexing (Gather*, Scatter*), Resize, DepthToSpace
void rules_index(Table& t) {
  // ---- gathers: the gradient scatter-adds back (repeated indices accumulate)
  t.add("Gather", gather_rule, {0});
  t.add("GatherElements", [](Ctx& c) {
    scatter_add_rule(c, "ScatterElements", "GatherElementsGrad", {iattr("axis", c.attr_int("axis", 0))}, true);
  }, {0});
  t.add("GatherND", [](Ctx& c) {  // batch_dims > 0: no standard scatter addresses batches
    const int64_t b = c.attr_int("batch_dims", 0);
    scatter_add_rule(c, "ScatterND", "GatherNDGrad", b ? std::vector<ir::Attribute>{iattr("batch_dims", b)} : std::vector<ir::Attribute>{},
                     b == 0);
  }, {0});

  // ---- scatters
  t.add("ScatterND", [](Ctx& c) { scatter_rule(c, "ScatterND", "GatherND"); }, {0, 2});
  t.add("ScatterElements", [](Ctx& c) { scatter_rule(c, "ScatterElements", "GatherElements"); }, {0, 2});

  // ---- OneHot: y = on where the index hits, off elsewhere; only `values` is differentiable
  t.add("OneHot", [](Ctx& c) {
    const std::string& g = c.GO(0);
    const std::string hits = c.op("OneHot", {c.I(0), c.I(1), c.constant(float_pair(c, c.dtype(c.I(2)), 0, 1))},
                                  {iattr("axis", c.attr_int("axis", -1))});
    const std::string on = c.reshape(sum_all(c, c.mul(g, hits)), c.ints({1}));
    const std::string all = c.reshape(sum_all(c, g), c.ints({1}));
    c.set_GI(2, concat(c, {c.sub(all, on), on}, 0));
  }, {2});

  // ---- Resize: one ResizeGrad node (the forward's taps transposed), every mode and opset;
  // portable: interpolation matrices, when shapes and scales are static.
  t.add("Resize", [](Ctx& c) {
    if (c.portable())
      if (std::string gx = resize_grad_portable(c); !gx.empty()) return c.set_GI(0, gx);
    std::vector<std::string> in{c.GO(0)};
    for (size_t i = 1; i <= (c.opset() < 11 ? 1u : 3u); ++i) in.push_back(c.has_input(i) ? c.I(i) : "");
    in.push_back(c.shape_of(c.I(0)));
    std::vector<ir::Attribute> at = c.attrs();
    at.push_back(iattr("forward_opset", c.opset()));
    c.set_GI(0, c.custom("ResizeGrad", in, 1, at)[0]);
  }, {0}, 10);
}

// ---------------------------------------------------------------- recurrent, control flow helpers
// RNN, GRU, LSTM: the forward becomes com.onnxtrain <Op>Train (same outputs, plus the training
// reserve: pre-activations and states of every step), read by one <Op>Grad node that runs
// backpropagation through time (kernels in src/kernels/cpu/rnn.cpp). Custom operators in
// portable mode too: standard ONNX expresses BPTT only by unrolling.
void rnn_rule(Ctx& c) {
  const std::string& op = c.node().op_type;
  const bool lstm = op == "LSTM";
  const size_t num_in = lstm ? 8 : 6, num_out = lstm ? 3 : 2;
  std::vector<ir::Attribute> attrs;
  for (const auto& a : c.attrs())
    if (a.name != "layout") attrs.push_back(a);
  attrs.push_back(iattr("layout", c.opset() >= 14 ? c.attr_int("layout", 0) : 0));
  const std::string reserve = c.replace_forward(ops::kDomain, op + "Train", attrs, num_out, 1)[0];
  std::vector<std::string> in;
  for (size_t i = 0; i < num_in; ++i) in.push_back(c.has_input(i) ? c.I(i) : "");
  in.push_back(reserve);
  for (size_t k = 0; k < num_out; ++k) in.push_back(c.has_GO(k) ? c.GO(k) : "");
  const std::vector<size_t> to = lstm ? std::vector<size_t>{0, 1, 2, 3, 5, 6, 7} : std::vector<size_t>{0, 1, 2, 3, 5};
  const auto g = c.custom(op + "Grad", in, to.size(), attrs);
  for (size_t k = 0; k < to.size(); ++k) c.set_GI(to[k], g[k]);
}

// Appends op(in) -> out (names given: a subgraph's own values) through the subgraph's emitter.
void put(ir::Emitter& e, const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
         std::vector<ir::Attribute> attrs = {}) {
  ir::Node n;
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  e.append(std::move(n));
}

// Appends `v` to g's outputs through an Identity (outputs may be outer values, or repeat); `e`
// emits into g.
void add_output(ir::Emitter& e, ir::Graph& g, const std::string& v, const ir::TypeInfo* type) {
  const std::string o = e.add("Identity", {v}, {}, v + "_out");
  g.outputs.push_back(ir::ValueInfo{o, type ? *type : ir::TypeInfo(), ""});
}

// If: an If on the same condition whose branches recompute their forward and return the
// gradients of the outer values they read (zeros from a branch that does not use one).
void if_rule(Ctx& c) {
  std::vector<std::string> wrt;
  for (const auto& u : c.implicit_inputs())
    if (c.needs_grad(u)) wrt.push_back(u);
  if (wrt.empty()) return;
  std::vector<std::string> seeds;
  for (size_t k = 0; k < c.num_outputs(); ++k) seeds.push_back(c.has_GO(k) ? c.GO(k) : "");
  std::vector<ir::Attribute> branches;
  for (const char* name : {"then_branch", "else_branch"}) {
    const ir::Attribute* a = c.node().attr(name);
    if (!a || a->type != ir::AttrType::kGraph || !a->g) c.fail("missing ", name);
    auto sub = c.subgraph_gradient(*a->g, {}, seeds, wrt);
    auto g = std::make_shared<ir::Graph>();
    g->name = a->g->name + "_grad";
    g->nodes = std::move(sub.nodes);
    ir::Emitter branch(c.emit(), *g);
    for (size_t k = 0; k < wrt.size(); ++k) add_output(branch, *g, sub.grads[k], c.type(wrt[k]));
    branches.push_back(graph_attr(name, g));
  }
  const auto outs = c.op_n("If", {c.I(0)}, wrt.size(), branches);
  for (size_t k = 0; k < wrt.size(); ++k) c.set_grad(wrt[k], outs[k]);
}

// Loop: the forward Loop also stacks every iteration's loop-carried inputs and iteration number
// (extra scan outputs); a reverse Loop over the T recorded iterations recomputes the body at
// iteration k = T-1-j from the recorded inputs and carries the gradients of the float
// loop-carried values and the sums of the gradients of the outer values the body reads.
void loop_rule(Ctx& c) {
  const ir::Attribute* body_attr = c.node().attr("body");
  if (!body_attr || body_attr->type != ir::AttrType::kGraph || !body_attr->g) c.fail("missing body");
  const ir::Graph& body = *body_attr->g;
  const size_t N = c.num_inputs() - 2, K = c.num_outputs() - N;
  if (body.inputs.size() != N + 2 || body.outputs.size() != 1 + N + K) c.fail("body and node signatures differ");
  // Types of the body inputs; carried values keep their static shape only when the loop keeps it.
  std::vector<ir::TypeInfo> in_types{ir::TypeInfo::tensor(DType::kInt64, Shape{}),
                                     ir::TypeInfo::tensor(DType::kBool, Shape{})};
  std::vector<size_t> diff;  // float loop-carried values
  for (size_t n = 0; n < N; ++n) {
    ir::TypeInfo t = body.inputs[2 + n].type;
    if (const ir::TypeInfo* outer = c.type(c.I(2 + n))) {
      t = *outer;
      const ir::TypeInfo* fin = c.type(c.O(n));
      if (t.has_shape && !(fin && fin->has_shape && fin->to_string() == t.to_string()))
        for (auto& d : t.dims) d = ir::Dim{};
    }
    if (t.kind == ir::TypeInfo::Kind::kSequence || t.kind == ir::TypeInfo::Kind::kOptional)
      c.fail("loop-carried value ", n, " ('", c.I(2 + n), "') is a ", t.to_string(), ": only tensors are supported");
    in_types.push_back(t);
    if (t.elem == DType::kUndefined || dtype_is_float(t.elem)) diff.push_back(n);
  }

  // Forward variant: record v[n] and i of every iteration.
  auto fbody = std::make_shared<ir::Graph>(body);
  ir::Emitter fe(c.emit(), *fbody);
  for (size_t n = 0; n <= N; ++n) {
    const size_t input = n < N ? 2 + n : 0;
    fe.set_type(body.inputs[input].name, in_types[input]);
    const std::string rec = fe.add("Identity", {body.inputs[input].name}, {}, body.inputs[input].name + "_rec");
    fbody->outputs.push_back(ir::ValueInfo{rec, in_types[input], ""});
  }
  std::vector<ir::Attribute> fattrs;
  for (const auto& a : c.attrs())
    if (a.name != "body") fattrs.push_back(a);
  fattrs.push_back(graph_attr("body", fbody));
  const std::vector<std::string> rec = c.replace_forward("", "Loop", fattrs, N + K, N + 1);
  const std::string trips = c.op("Size", {rec[N]});
  const std::string last = c.op("Sub", {trips, c.constant(Tensor::scalar<int64_t>(1))});
  const std::string yes = c.constant(Tensor::scalar<bool>(true));

  std::vector<std::string> wrt;
  for (size_t n : diff) wrt.push_back(body.inputs[2 + n].name);
  std::vector<std::string> outer;
  for (const auto& u : c.implicit_inputs())
    if (c.needs_grad(u)) outer.push_back(u);
  wrt.insert(wrt.end(), outer.begin(), outer.end());

  // Reverse body: (j, cond, dv[diff], du[outer]) -> (true, dv', du').
  auto g = std::make_shared<ir::Graph>();
  g->name = body.name + "_grad";
  const std::string j = c.fresh_name("j"), k = c.fresh_name("k");
  g->inputs.push_back(ir::ValueInfo{j, in_types[0], ""});
  g->inputs.push_back(ir::ValueInfo{c.fresh_name("cond"), in_types[1], ""});
  std::vector<std::string> carried_in;
  for (const auto& w : wrt) {
    carried_in.push_back(c.fresh_name("d_" + w));
    const ir::TypeInfo* t = c.type(w);
    g->inputs.push_back(ir::ValueInfo{carried_in.back(), t ? *t : ir::TypeInfo(), ""});
  }
  for (size_t d = 0; d < diff.size(); ++d) g->inputs[2 + d].type = in_types[2 + diff[d]];
  ir::Emitter be(c.emit(), *g);
  be.note_types(*g);
  put(be, "Sub", {last, j}, {k});
  put(be, "Identity", {k}, {body.inputs[0].name});
  put(be, "Identity", {yes}, {body.inputs[1].name});
  for (size_t n = 0; n < N; ++n) put(be, "Gather", {rec[n], k}, {body.inputs[2 + n].name}, {iattr("axis", 0)});
  std::vector<std::string> seeds(1 + N + K);
  for (size_t d = 0; d < diff.size(); ++d) seeds[1 + diff[d]] = carried_in[d];
  for (size_t s = 0; s < K; ++s)
    if (c.has_GO(N + s)) seeds[1 + N + s] = be.add("Gather", {c.GO(N + s), k}, {iattr("axis", 0)}, "dscan");
  auto sub = c.subgraph_gradient(body, in_types, seeds, wrt);
  g->nodes.insert(g->nodes.end(), sub.nodes.begin(), sub.nodes.end());
  add_output(be, *g, yes, &in_types[1]);
  for (size_t w = 0; w < wrt.size(); ++w) {
    std::string v = sub.grads[w];
    if (w >= diff.size()) v = be.add("Add", {carried_in[w], sub.grads[w]}, {}, "acc_" + wrt[w]);  // outer value: sum over iterations
    add_output(be, *g, v, &g->inputs[2 + w].type);
  }

  std::vector<std::string> init{trips, ""};
  for (size_t d = 0; d < diff.size(); ++d) init.push_back(c.has_GO(diff[d]) ? c.GO(diff[d]) : c.zeros_like(c.O(diff[d])));
  for (const auto& u : outer) init.push_back(c.zeros_like(u));
  const auto outs = c.op_n("Loop", init, wrt.size(), {graph_attr("body", g)});
  for (size_t w = 0; w < wrt.size(); ++w) {
    if (w < diff.size()) c.set_GI(2 + diff[w], outs[w]);
    else c.set_grad(wrt[w], outs[w]);
  }
}

// ================================================================ recurrent, control flow
void rules_rnn_control(Table& t) {
  t.add("LSTM", rnn_rule, {0, 1, 2, 3, 5, 6, 7});
  t.add("GRU", rnn_rule, {0, 1, 2, 3, 5});
  t.add("RNN", rnn_rule, {0, 1, 2, 3, 5});
  t.add("If", if_rule);      // cond is boolean: gradients reach the outer values the branches read
  t.add("Loop", loop_rule);  // M and cond are integer/boolean
}

std::vector<Entry> build_table() {
  Table t;
  rules_elementwise(t);
  rules_linalg(t);
  rules_reduce(t);
  rules_norm_loss(t);
  rules_shape(t);
  rules_index(t);
  rules_rnn_control(t);
  return std::move(t.entries);
}

const std::vector<Entry>& table() {
  static const std::vector<Entry> t = build_table();
  return t;
}

}  // namespace

const GradRule* find_rule(const std::string& domain, const std::string& op, int64_t opset) {
  for (const auto& e : table())
    if (e.domain == domain && e.op == op && opset >= e.since && opset <= e.until) return &e.rule;
  return nullptr;
}

std::vector<std::pair<std::string, std::string>> rule_ops() {
  std::vector<std::pair<std::string, std::string>> r;
  for (const auto& e : table()) r.emplace_back(e.domain, e.op);
  return r;
}

}  // namespace onnxtrain::autodiff
