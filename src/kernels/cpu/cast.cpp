// Cast and CastLike: Y = X converted to another element type (numeric, bool, float16, bfloat16,
// string).
//   Cast(X; to)         Y: shape(X), dtype `to` (opset < 6: `to` is a type name such as "FLOAT")
//   CastLike(X, L)      Y: shape(X), L's dtype
// Numbers: float -> integer truncates toward zero and saturates (NaN -> 0); integer -> integer
// wraps; -> bool is `x != 0`.
// Strings follow numpy's astype(str): floats print their shortest round-trip digits, positional
// when 1e-4 <= |x| < 1e16 ("0.9767611", "123456790.0"), else scientific ("1e-05", "3.4e+38");
// "nan", "inf", "-inf"; bools "True"/"False". Parsing accepts surrounding blanks, a sign, "NaN",
// "INF", "infinity" (any case), and for integer targets either an integer or a float.
#include <charconv>

#include "kernels/cpu/elementwise_internal.h"

namespace onnxtrain::kernels::cpu {

namespace {

using namespace ew;

// ---------------------------------------------------------------- to string
/// Formats shortest digits `d` (no dot) with decimal exponent `exp` of |v| like numpy's str().
std::string format_digits(bool neg, const std::string& d, int exp, double absval) {
  std::string s = neg ? "-" : "";
  if (absval >= 1e-4 && absval < 1e16) {
    if (exp < 0) {
      s.append("0.").append(size_t(-exp - 1), '0').append(d);
    } else if (size_t(exp) + 1 >= d.size()) {
      s.append(d).append(size_t(exp) + 1 - d.size(), '0').append(".0");
    } else {
      s.append(d, 0, size_t(exp) + 1).append(".").append(d, size_t(exp) + 1);
    }
    return s;
  }
  s.append(d, 0, 1);
  if (d.size() > 1) s.append(".").append(d, 1);
  const int ae = exp < 0 ? -exp : exp;
  s.append(exp < 0 ? "e-" : "e+").append(ae < 10 ? "0" : "").append(std::to_string(ae));
  return s;
}

/// Splits to_chars' scientific output ("-9.767611e-01") into digits and exponent.
void split_scientific(const char* b, const char* e, std::string* digits, int* exp) {
  const char* p = b;
  if (*p == '-') ++p;
  digits->clear();
  for (; p < e && *p != 'e'; ++p)
    if (*p != '.') digits->push_back(*p);
  *exp = 0;
  if (p < e) {
    ++p;
    if (p < e && *p == '+') ++p;  // from_chars takes '-' but not '+'
    std::from_chars(p, e, *exp);
  }
  while (digits->size() > 1 && digits->back() == '0') digits->pop_back();
}

template <class F>
std::string float_to_string(F v) {
  double dv;
  if constexpr (is_half_v<F>) dv = static_cast<float>(v);
  else dv = v;
  if (std::isnan(dv)) return "nan";
  if (std::isinf(dv)) return dv < 0 ? "-inf" : "inf";
  if (dv == 0) return std::signbit(dv) ? "-0.0" : "0.0";
  char buf[64];
  std::to_chars_result r;
  if constexpr (is_half_v<F>) {
    // Fewest digits that read back as the same 16-bit value.
    for (int prec = 0; prec < 6; ++prec) {
      r = std::to_chars(buf, buf + sizeof buf, float(v), std::chars_format::scientific, prec);
      float back = 0;
      std::from_chars(buf, r.ptr, back);
      if (F(back).bits == v.bits) break;
    }
  } else {
    r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  }
  std::string digits;
  int exp;
  split_scientific(buf, r.ptr, &digits, &exp);
  return format_digits(dv < 0, digits, exp, std::fabs(dv));
}

template <class T>
std::string to_string_value(T v) {
  if constexpr (std::is_same_v<T, bool>) return v ? "True" : "False";
  else if constexpr (std::is_integral_v<T>) return std::to_string(v);
  else return float_to_string(v);
}

// ---------------------------------------------------------------- from string
bool parse_double(std::string_view s, double* out) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

template <class T>
T from_string_value(const std::string& s, const RunContext& ctx) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using W = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
    std::string_view v(s);
    while (!v.empty() && std::isspace(static_cast<unsigned char>(v.front()))) v.remove_prefix(1);
    while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.remove_suffix(1);
    if (!v.empty() && v.front() == '+') v.remove_prefix(1);
    W w;
    auto r = std::from_chars(v.data(), v.data() + v.size(), w);
    if (!v.empty() && r.ec == std::errc() && r.ptr == v.data() + v.size()) return static_cast<T>(w);
  }
  if constexpr (std::is_same_v<T, bool>) {
    if (s == "True" || s == "true" || s == "TRUE") return true;
    if (s == "False" || s == "false" || s == "FALSE") return false;
  }
  double d;
  if (!parse_double(s, &d)) ctx.fail("cannot parse '", s, "' as ", dtype_name(dtype_v<T>));
  return convert<T>(d);
}

// ---------------------------------------------------------------- kernel
template <class From, class To>
void cast_range(const From* x, To* y, int64_t n, const RunContext& ctx) {
  if constexpr (std::is_same_v<To, std::string> && std::is_same_v<From, std::string>) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i];
  } else if constexpr (std::is_same_v<To, std::string>) {
    for (int64_t i = 0; i < n; ++i) y[i] = to_string_value(x[i]);
  } else if constexpr (std::is_same_v<From, std::string>) {
    for (int64_t i = 0; i < n; ++i) y[i] = from_string_value<To>(x[i], ctx);
  } else if constexpr (std::is_same_v<From, float> && is_half_v<To>) {
    narrow(x, y, n);
  } else if constexpr (is_half_v<From> && std::is_same_v<To, float>) {
    widen(x, y, n);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = convert<To>(x[i]);
  }
}

class CastKernel final : public Kernel {
 public:
  /// like = true: CastLike (target dtype from input 1).
  CastKernel(const KernelInfo& info, bool like) : like_(like) {
    if (!like_) to_ = shape::read_cast_to(info);
  }
  void prepare(PrepareContext& ctx) override {
    to_ = shape::cast_target(ctx, like_, to_);
    if (ctx.input_dtype(0) == to_) ctx.set_output_alias(0, 0, ctx.input_shape(0));
    else ctx.set_output(0, to_, ctx.input_shape(0));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (x.dtype() == to_) {
      if (!ctx.output_aliases_input(0, 0)) y.copy_from(x);
      return;
    }
    dispatch<AllTypes>(x.dtype(), ctx.node(), [&]<class From>() {
      dispatch<AllTypes>(to_, ctx.node(), [&]<class To>() {
        const From* a = x.data<From>();
        To* b = y.data<To>();
        // Numeric casts run at ~0.15 ns an element: a second thread (woken from sleep, the passive
        // OpenMP wait policy) pays off only past ~2^18 elements each (bf16 MLP at 2 threads: its 23
        // casts took 0.74 ms per step with 16k-element chunks, 0.18 ms on one thread).
        const int64_t grain = std::is_same_v<From, std::string> || std::is_same_v<To, std::string> ? 16384 : (1 << 18);
        parallel_for(x.numel(), grain, [&](int64_t s, int64_t e) { cast_range(a + s, b + s, e - s, ctx); });
      });
    });
  }

 private:
  bool like_;
  DType to_ = DType::kUndefined;
};

}  // namespace

void register_cast(KernelRegistry& r) {
  r.add("Cast", 1, kMaxOpsetAll, [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<CastKernel>(i, false);
  });
  r.add("CastLike", 15, kMaxOpsetAll, [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<CastKernel>(i, true);
  });
}

}  // namespace onnxtrain::kernels::cpu
