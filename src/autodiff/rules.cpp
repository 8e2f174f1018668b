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
