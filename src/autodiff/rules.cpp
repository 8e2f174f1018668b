// THE table of gradient rules: one entry per operator (and opset range where semantics differ),
// a few lines each. Rules emit ONNX nodes through RuleContext; the builder owns the chain rule
// (accumulation, unbroadcasting, pruning). Notation: I(i) inputs, O(i) outputs, GO(i) gradient of
// output i, set_GI(i, g) gradient of input i.
#include <cmath>
#include <algorithm>
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
    if (axes.empty()) {  // every axis reduced: g is a scalar, Expand broadcasts it
      return c.expand(g, c.shape_of(c.I(0)));
    }
    r = c.unsqueeze(g, axes);
  }
  return c.expand(r, c.shape_of(c.I(0)));
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

// ================================================================ reductions, softmax family, CumSum, TopK
void rules_reduce(Table& t) {
  // ---- reductions: broadcast the output gradient back over the reduced axes
  t.add("ReduceSum", [](Ctx& c) { c.set_GI(0, reduce_back(c, c.GO(0), c.opset() >= 13)); }, {0});
  t.add("ReduceMean", [](Ctx& c) {  // axes stay an attribute through opset 17
    const std::string g = reduce_back(c, c.GO(0), false);
    const std::string n = c.div(c.cast_like(c.op("Size", {c.I(0)}), c.I(0)), c.cast_like(c.op("Size", {c.O(0)}), c.I(0)));
    c.set_GI(0, c.div(g, n));
  }, {0});

}

// ================================================================ normalization, dropout, losses
void rules_norm_loss(Table& t) { (void)t; }

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
  const std::string reserve = c.replace_forward("com.onnxtrain", op + "Train", attrs, num_out, 1)[0];
  std::vector<std::string> in;
  for (size_t i = 0; i < num_in; ++i) in.push_back(c.has_input(i) ? c.I(i) : "");
  in.push_back(reserve);
  for (size_t k = 0; k < num_out; ++k) in.push_back(c.has_GO(k) ? c.GO(k) : "");
  const std::vector<size_t> to = lstm ? std::vector<size_t>{0, 1, 2, 3, 5, 6, 7} : std::vector<size_t>{0, 1, 2, 3, 5};
  const auto g = c.custom(op + "Grad", in, to.size(), attrs);
  for (size_t k = 0; k < to.size(); ++k) c.set_GI(to[k], g[k]);
}

ir::Attribute graph_attr(const char* name, std::shared_ptr<ir::Graph> g) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kGraph;
  a.g = std::move(g);
  return a;
}

ir::Node make_node(Ctx& c, const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                   std::vector<ir::Attribute> attrs = {}) {
  ir::Node n;
  n.op_type = op;
  n.name = c.fresh_name("grad_" + op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

// Appends `v` to g's outputs through an Identity (outputs may be outer values, or repeat).
void add_output(Ctx& c, ir::Graph& g, const std::string& v, const ir::TypeInfo* type) {
  const std::string o = c.fresh_name(v + "_out");
  g.nodes.push_back(make_node(c, "Identity", {v}, {o}));
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
    for (size_t k = 0; k < wrt.size(); ++k) add_output(c, *g, sub.grads[k], c.type(wrt[k]));
    branches.push_back(graph_attr(name, g));
  }
  const auto outs = c.op_n("If", {c.I(0)}, wrt.size(), branches);
  for (size_t k = 0; k < wrt.size(); ++k) {
    if (const ir::TypeInfo* t = c.type(wrt[k])) c.set_type(outs[k], *t);
    c.set_grad(wrt[k], outs[k]);
  }
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
  for (size_t n = 0; n <= N; ++n) {
    const size_t input = n < N ? 2 + n : 0;
    const std::string rec = c.fresh_name(body.inputs[input].name + "_rec");
    fbody->nodes.push_back(make_node(c, "Identity", {body.inputs[input].name}, {rec}));
    fbody->outputs.push_back(ir::ValueInfo{rec, in_types[input], ""});
  }
  std::vector<ir::Attribute> fattrs;
  for (const auto& a : c.attrs())
    if (a.name != "body") fattrs.push_back(a);
  fattrs.push_back(graph_attr("body", fbody));
  const std::vector<std::string> rec = c.replace_forward("", "Loop", fattrs, N + K, N + 1);
  const std::string trips = c.op("Size", {rec[N]});
  c.set_type(trips, ir::TypeInfo::tensor(DType::kInt64, Shape{}));
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
  g->nodes.push_back(make_node(c, "Sub", {last, j}, {k}));
  g->nodes.push_back(make_node(c, "Identity", {k}, {body.inputs[0].name}));
  g->nodes.push_back(make_node(c, "Identity", {yes}, {body.inputs[1].name}));
  for (size_t n = 0; n < N; ++n)
    g->nodes.push_back(make_node(c, "Gather", {rec[n], k}, {body.inputs[2 + n].name}, {iattr("axis", 0)}));
  std::vector<std::string> seeds(1 + N + K);
  for (size_t d = 0; d < diff.size(); ++d) seeds[1 + diff[d]] = carried_in[d];
  for (size_t s = 0; s < K; ++s)
    if (c.has_GO(N + s)) {
      seeds[1 + N + s] = c.fresh_name("dscan");
      g->nodes.push_back(make_node(c, "Gather", {c.GO(N + s), k}, {seeds[1 + N + s]}, {iattr("axis", 0)}));
    }
  auto sub = c.subgraph_gradient(body, in_types, seeds, wrt);
  g->nodes.insert(g->nodes.end(), sub.nodes.begin(), sub.nodes.end());
  add_output(c, *g, yes, &in_types[1]);
  for (size_t w = 0; w < wrt.size(); ++w) {
    std::string v = sub.grads[w];
    if (w >= diff.size()) {  // outer value: sum over iterations
      v = c.fresh_name("acc_" + wrt[w]);
      g->nodes.push_back(make_node(c, "Add", {carried_in[w], sub.grads[w]}, {v}));
    }
    add_output(c, *g, v, &g->inputs[2 + w].type);
  }

  std::vector<std::string> init{trips, ""};
  for (size_t d = 0; d < diff.size(); ++d) init.push_back(c.has_GO(diff[d]) ? c.GO(diff[d]) : c.zeros_like(c.O(diff[d])));
  for (const auto& u : outer) init.push_back(c.zeros_like(u));
  const auto outs = c.op_n("Loop", init, wrt.size(), {graph_attr("body", g)});
  for (size_t w = 0; w < wrt.size(); ++w) {
    c.set_type(outs[w], g->inputs[2 + w].type);
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
