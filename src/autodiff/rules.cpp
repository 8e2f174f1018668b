// THE table of gradient rules: one entry per operator (and opset range where semantics differ),
// a few lines each. Rules emit ONNX nodes through RuleContext; the builder owns the chain rule
// (accumulation, unbroadcasting, pruning). Notation: I(i) inputs, O(i) outputs, GO(i) gradient of
// output i, set_GI(i, g) gradient of input i.
#include <cmath>
#include <algorithm>
#include <limits>
#include <map>

#include "autodiff/rule_context.h"

namespace onnxtrain::autodiff {

namespace {

using Ctx = RuleContext;

ir::Attribute iattr(const char* name, int64_t v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kInt;
  a.i = v;
  return a;
}
ir::Attribute fattr(const char* name, float v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kFloat;
  a.f = v;
  return a;
}
ir::Attribute intsattr(const char* name, std::vector<int64_t> v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kInts;
  a.ints = std::move(v);
  return a;
}

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
  if (ra == 1) {  // A[K], B[..., K, N], Y[..., N]
    if (c.needs_GI(0)) {
      auto ga = c.squeeze(c.op("MatMul", {c.unsqueeze(g, {-2}), swap_last2(c, B, rb)}), {-2});  // [..., K]
      auto t = with_tail(c.type(c.O(0)), 1, last_dims(c.type(A), 1), dt);
      c.set_GI_unbroadcast_typed(0, ga, &t);
    }
    if (c.needs_GI(1)) {  // dB[..., K, N] = A[K,1] * g[..., 1, N]
      auto gb = c.op("MatMul", {c.unsqueeze(A, {1}), c.unsqueeze(g, {-2})});
      auto t = with_tail(c.type(c.O(0)), 1, last_dims(c.type(B), 2), dt);
      c.set_GI_unbroadcast_typed(1, gb, &t);
    }
    return;
  }
  if (rb == 1) {  // A[..., M, K], B[K], Y[..., M]
    if (c.needs_GI(0)) {  // dA = g[..., M, 1] * B[1, K]
      auto ga = c.op("MatMul", {c.unsqueeze(g, {-1}), c.unsqueeze(B, {0})});
      auto t = with_tail(c.type(c.O(0)), 1, last_dims(c.type(A), 2), dt);
      c.set_GI_unbroadcast_typed(0, ga, &t);
    }
    if (c.needs_GI(1)) {  // dB = sum over batch and M of A^T g
      auto gb = c.squeeze(c.op("MatMul", {swap_last2(c, A, ra), c.unsqueeze(g, {-1})}), {-1});  // [..., K]
      auto t = with_tail(c.type(c.O(0)), 1, last_dims(c.type(B), 1), dt);
      c.set_GI_unbroadcast_typed(1, gb, &t);
    }
    return;
  }
  if (c.needs_GI(0)) {
    auto ga = c.op("MatMul", {g, swap_last2(c, B, rb)});
    auto t = with_tail(c.type(c.O(0)), 2, last_dims(c.type(A), 2), dt);
    c.set_GI_unbroadcast_typed(0, ga, &t);
  }
  if (c.needs_GI(1)) {
    auto gb = c.op("MatMul", {swap_last2(c, A, ra), g});
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
    return c.op("Gemm", {a, b}, {iattr("transA", tA), iattr("transB", tB), fattr("alpha", alpha)});
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
  for (auto& a : axes)
    if (a < 0) a += r;
  std::sort(axes.begin(), axes.end());
  return axes;
}

// Expands a Reduce* output gradient back to the input's shape.
std::string reduce_back(Ctx& c, const std::string& g, bool axes_input) {
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
  t.add("Relu", [](Ctx& c) {
    c.set_GI(0, where_else_zero(c, c.op("Greater", {c.I(0), c.scalar_like(0.0, c.I(0))}), c.GO(0)));
  });
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
    std::string mask;
    if (!lo.empty()) mask = c.op("GreaterOrEqual", {x, lo});
    if (!hi.empty()) {
      std::string m2 = c.op("LessOrEqual", {x, hi});
      mask = mask.empty() ? m2 : c.op("And", {mask, m2});
    }
    c.set_GI(0, mask.empty() ? c.GO(0) : where_else_zero(c, mask, c.GO(0)));
  }, {0});
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
                         "Size", "NonZero", "ConstantOfShape", "Constant", "Range", "EyeLike", "RandomNormal",
                         "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial",
                         "BitShift"})
    t.zero(op);
}

// ================================================================ linear algebra, convolution, pooling
void rules_linalg(Table& t) {
  // ---- linear algebra
  t.add("MatMul", matmul_rule);
  t.add("Gemm", gemm_rule);

}

// ---------------------------------------------------------------- helpers: reductions, softmax family
// Reduce* nodes of type `op` take their axes as input 1 (not an attribute) from this opset on.
bool axes_as_input(const std::string& op, int64_t opset) { return opset >= (op == "ReduceSum" ? 13 : 18); }
bool axes_as_input(Ctx& c) { return axes_as_input(c.node().op_type, c.opset()); }

// noop_with_empty_axes and no axes: the forward node is the identity.
bool reduce_is_noop(Ctx& c) {
  return axes_as_input(c) && c.attr_int("noop_with_empty_axes", 0) && reduced_axes(c, true).empty();
}

// A value shaped like the Reduce* output, with the reduced axes restored as 1 (keepdims = 0
// removed them) so that it broadcasts against the input. All axes reduced: a scalar broadcasts.
std::string keep_reduced(Ctx& c, const std::string& v) {
  if (c.attr_int("keepdims", 1)) return v;
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
  if (axes_as_input(c) && axes_as_input(type, c.opset()))  // pass the axes input through (may be computed)
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
    const std::string idx = c.forward_output(1, DType::kInt64);
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
    const auto d = c.custom("BatchNormalizationGrad", {g, x, c.I(1), c.I(3), c.I(4)}, training ? 3 : 5,
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
  if (axis < 0) axis += r;
  const DType stash = DType(c.attr_int("stash_type", 1));
  const std::string mean = c.forward_output(1, stash), inv = c.forward_output(2, stash);
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
  const std::string padded = c.opset() >= 11 ? c.op("Pad", {v, c.ints(pads)}) : c.op("Pad", {v}, {intsattr("pads", pads)});
  std::vector<std::string> terms;
  for (int64_t k = 0; k <= lo + hi; ++k) {  // channels [k, k + C) of the padded tensor
    const int64_t end = k == lo + hi ? std::numeric_limits<int64_t>::max() : k - lo - hi;
    terms.push_back(c.opset() >= 10 ? c.op("Slice", {padded, c.ints({k}), c.ints({end}), c.ints({1})})
                                    : c.op("Slice", {padded}, {intsattr("starts", {k}), intsattr("ends", {end}),
                                                               intsattr("axes", {1})}));
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
  const std::string mask = c.forward_output(1, c.opset() >= 10 ? DType::kBool : c.dtype(c.I(0)));
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
    const std::string lp = softmax ? c.forward_output(1, c.dtype(x)) : x;  // NLL: x only gives the shape
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

// ================================================================ shape and data movement
void rules_shape(Table& t) {
  // ---- reshaping (gradient: reshape back)
  auto reshape_back = [](Ctx& c) { c.set_GI(0, c.reshape(c.GO(0), c.shape_of(c.I(0)))); };
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
    std::vector<int64_t> inv(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inv[size_t(perm[i])] = int64_t(i);
    c.set_GI(0, c.transpose(c.GO(0), inv));
  });

}

// ================================================================ indexing (Gather*, Scatter*), Resize, DepthToSpace
void rules_index(Table& t) { (void)t; }

// ================================================================ recurrent, control flow
void rules_rnn_control(Table& t) { (void)t; }

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
