// float32 products on AMX tiles (src/kernels/cpu/gemm_amx.h) against a double-precision reference:
// every transpose combination, edges of every size (rows, columns and K not multiples of the tile),
// padded strides, alpha and beta, infinities, NaNs and the largest floats, the same bits at 1 and 2
// threads, and kernels::cpu::gemm routing large products there. Skipped, with the reason, on CPUs
// without AMX-BF16.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_amx.h"
#include "test_util.h"

namespace cpu = onnxtrain::kernels::cpu;
namespace amx = onnxtrain::kernels::cpu::amx;

namespace {

constexpr const char* kNoAmx = "this CPU has no AMX-BF16 and AVX512-BF16 (or Linux did not grant the tile state)";

struct Problem {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
  int64_t lda, ldb, ldc;
  std::vector<float> A, B, C;

  Problem(bool ta_, bool tb_, int64_t M_, int64_t N_, int64_t K_, float alpha_, float beta_, uint32_t seed)
      : ta(ta_), tb(tb_), M(M_), N(N_), K(K_), alpha(alpha_), beta(beta_) {
    lda = (ta ? M : K) + 3;
    ldb = (tb ? K : N) + 5;
    ldc = N + 2;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    A.resize(size_t((ta ? K : M) * lda));
    B.resize(size_t((tb ? N : K) * ldb));
    C.resize(size_t(M * ldc));
    for (auto& x : A) x = u(rng);
    for (auto& x : B) x = u(rng);
    for (auto& x : C) x = u(rng);
  }
  double a(int64_t i, int64_t k) const { return ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)]; }
  double b(int64_t k, int64_t j) const { return tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)]; }
  std::vector<float> run() const {
    std::vector<float> c = C;
    EXPECT_TRUE(amx::gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, c.data(), ldc));
    return c;
  }
};

// Each element within (K / 8 + 4) float32 rounding units of the sum of |terms|: what a float32
// product gives. A single bfloat16 product misses by ~2^-9 of it, the three-product split (hi.hi,
// hi.mid, mid.hi) by ~2^-17: both fail here.
void expect_float32_accuracy(const Problem& p, const std::vector<float>& c) {
  const double u = std::ldexp(1.0, -24);
  for (int64_t i = 0; i < p.M; ++i) {
    for (int64_t j = 0; j < p.N; ++j) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < p.K; ++k) {
        s += p.a(i, k) * p.b(k, j);
        mag += std::fabs(p.a(i, k) * p.b(k, j));
      }
      const double c0 = p.C[size_t(i * p.ldc + j)];
      const double ref = p.alpha * s + (p.beta == 0.f ? 0.0 : p.beta * c0);
      const double bound = (double(p.K) / 8 + 4) * u * (std::fabs(p.alpha) * mag + std::fabs(p.beta * c0)) + 1e-30;
      ASSERT_LE(std::fabs(c[size_t(i * p.ldc + j)] - ref), bound)
          << "C[" << i << "," << j << "] of " << p.M << "x" << p.N << "x" << p.K << " ta=" << p.ta << " tb=" << p.tb
          << " alpha=" << p.alpha << " beta=" << p.beta;
    }
    for (int64_t j = p.N; j < p.ldc; ++j)  // the stride's padding is not written
      ASSERT_EQ(c[size_t(i * p.ldc + j)], p.C[size_t(i * p.ldc + j)]) << "pad C[" << i << "," << j << "]";
  }
}

}  // namespace

TEST(AmxGemm, MatchesDoubleReferenceAtFloat32Accuracy) {
  if (!amx::available()) GTEST_SKIP() << kNoAmx;
  struct Shape {
    int64_t M, N, K;
  };
  // Edges: 1 row / column / K; 15, 17, 33 (tile and panel edges); K spanning several K blocks.
  const Shape shapes[] = {{1, 1, 1}, {100, 70, 90}, {33, 17, 1}, {15, 47, 31}, {67, 129, 300}, {64, 64, 600}};
  uint32_t seed = 1;
  for (const Shape& s : shapes)
    for (int t = 0; t < 4; ++t) {
      const Problem p(t & 1, t & 2, s.M, s.N, s.K, 1.f, 0.f, seed++);
      expect_float32_accuracy(p, p.run());
    }
  // alpha and beta: beta 1 and 0.5 with alpha 1; alpha 2 with beta 0 (C's old contents ignored);
  // K of one block and of two (alpha scales each block of C after its last K block).
  for (const auto& ab : {std::pair{1.f, 1.f}, std::pair{1.f, 0.5f}, std::pair{2.f, 0.f}})
    for (const int64_t K : {100, 1000}) {
      const Problem p(false, true, 70, 90, K, ab.first, ab.second, seed++);
      expect_float32_accuracy(p, p.run());
    }
  // alpha != 1 with beta != 0 is declined, C untouched.
  Problem p(false, false, 8, 8, 8, 2.f, 1.f, seed++);
  std::vector<float> c = p.C;
  EXPECT_FALSE(amx::gemm(false, false, 8, 8, 8, 2.f, p.A.data(), p.lda, p.B.data(), p.ldb, 1.f, c.data(), p.ldc));
  EXPECT_EQ(c, p.C);
}

TEST(AmxGemm, SpecialValuesPropagateAsInFloat32) {
  if (!amx::available()) GTEST_SKIP() << kNoAmx;
  // A [2, 3] @ B [3, 2] with beta 0 over a C full of NaN (ignored).
  const float inf = std::numeric_limits<float>::infinity(), big = std::numeric_limits<float>::max();
  const float A[] = {inf, 1.f, 0.f,  // row 0: inf
                     big, 0.5f, 0.f};  // row 1: the largest float (its bf16 rounding would overflow)
  const float B[] = {0.5f, std::nanf(""),  // column 1: NaN in row 0
                     1.f, 1.f,  //
                     1.f, 1.f};
  float C[4];
  std::fill(C, C + 4, std::nanf(""));
  ASSERT_TRUE(amx::gemm(false, false, 2, 2, 3, 1.f, A, 3, B, 2, 0.f, C, 2));
  EXPECT_EQ(C[0], inf);  // inf * 0.5 + 1
  EXPECT_TRUE(std::isnan(C[1]));  // inf * NaN
  EXPECT_EQ(C[2], big * 0.5f + 0.5f);  // exact: big / 2 (the 0.5 is below its last place)
  EXPECT_TRUE(std::isnan(C[3]));  // big * NaN
  // Just below where the split's rounding overflows (0x7F7F8000): split on the tiles, exact.
  uint32_t bits = 0x7F7F7FFFu;
  float near_max;
  std::memcpy(&near_max, &bits, sizeof near_max);
  const float An[] = {near_max, 0.5f, 0.f}, Bn[] = {0.5f, 1.f, 1.f};
  float cn = std::nanf("");
  ASSERT_TRUE(amx::gemm(false, false, 1, 1, 3, 1.f, An, 3, Bn, 1, 0.f, &cn, 1));
  EXPECT_EQ(cn, near_max * 0.5f + 0.5f);
  // An infinity times values whose lower parts are zero (1 and 2 are bfloat16 numbers): the zero
  // parts times the infinity would be NaN; float32 says inf.
  const float a[] = {1.f, 2.f}, b[] = {inf, 1.f};
  float c = std::nanf("");
  ASSERT_TRUE(amx::gemm(false, false, 1, 1, 2, 1.f, a, 2, b, 1, 0.f, &c, 1));
  EXPECT_EQ(c, inf);
  // beta != 0 with an infinity: declined (float32 computes it), C untouched.
  c = 1.f;
  EXPECT_FALSE(amx::gemm(false, false, 1, 1, 2, 1.f, a, 2, b, 1, 1.f, &c, 1));
  EXPECT_EQ(c, 1.f);
  cpu::gemm(false, false, 1, 1, 2, 1.f, a, 2, b, 1, 1.f, &c, 1);
  EXPECT_EQ(c, inf);
  // beta != 0 with the largest float (finite, but its split is not taken): declined too, not
  // recomputed over C's accumulated contents.
  const float huge[] = {big, 0.5f}, half[] = {0.5f, 2.f};
  c = 1.f;
  EXPECT_FALSE(amx::gemm(false, false, 1, 1, 2, 1.f, huge, 2, half, 1, 1.f, &c, 1));
  EXPECT_EQ(c, 1.f);
  cpu::gemm(false, false, 1, 1, 2, 1.f, huge, 2, half, 1, 1.f, &c, 1);
  EXPECT_EQ(c, big * 0.5f + 2.f);
}

TEST(AmxGemm, SameBitsAtOneAndTwoThreads) {
  if (!amx::available()) GTEST_SKIP() << kNoAmx;
  const Problem p(true, false, 300, 260, 290, 1.f, 0.f, 99);
  std::vector<float> one, two;
  {
    onnxtrain::ThreadScope scope(1);
    one = p.run();
  }
  {
    onnxtrain::ThreadScope scope(2);
    two = p.run();
  }
  EXPECT_EQ(one, two);
}

TEST(AmxGemm, LargeProductsGoThroughTheTiles) {
  if (!amx::available()) GTEST_SKIP() << kNoAmx;
  onnxtrain::ThreadScope scope(1);
  // pays() sends the product to the tiles, and cpu::gemm gives amx::gemm's bits.
  auto through_tiles = [](const Problem& p) {
    ASSERT_TRUE(amx::pays(p.M, p.N, p.K)) << p.M << "x" << p.K << "x" << p.N;
    std::vector<float> via_gemm = p.C;
    cpu::gemm(p.ta, p.tb, p.M, p.N, p.K, 1.f, p.A.data(), p.lda, p.B.data(), p.ldb, 0.f, via_gemm.data(), p.ldc);
    EXPECT_EQ(via_gemm, p.run()) << p.M << "x" << p.K << "x" << p.N;
  };
  through_tiles(Problem(false, true, 512, 512, 512, 1.f, 0.f, 7));
  // 128 columns beside 2048 rows (BERT-tiny's products) go there as well.
  through_tiles(Problem(false, false, 2048, 128, 512, 1.f, 0.f, 11));
  EXPECT_FALSE(amx::pays(128, 128, 128));  // small products stay with oneDNN's float32 kernels
  EXPECT_FALSE(amx::pays(128, 784, 512));  // 128 rows with short other sides too
}

// ---- 1x1 convolutions over the blocked layout (amx::Pointwise) ---------------------------------

namespace {

// A convolution over the blocked layout: x [N][ceil(C/16)][IH * IW][16], y (holding Z)
// [N][ceil(M/16)][P = OH * OW][16], output pixel (oh, ow) reading input (oh * sh, ow * sw); padded
// channels zero; w [M][C], bias [M].
struct Pointwise {
  int64_t N, C, M, CB, MB;
  amx::Pointwise::Geometry g;
  int64_t P;
  std::vector<float> x, w, bias, z;
  Pointwise(int64_t N_, int64_t C_, int64_t M_, int64_t IH, int64_t IW, int64_t s, uint32_t seed)
      : N(N_), C(C_), M(M_), CB((C_ + 15) / 16), MB((M_ + 15) / 16), g{IH, IW, (IH - 1) / s + 1, (IW - 1) / s + 1, s, s},
        P(g.OH * g.OW) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    x.assign(size_t(N * CB * IH * IW * 16), 0.f);
    z.assign(size_t(N * MB * P * 16), 0.f);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t q = 0; q < IH * IW; ++q)
        for (int64_t c = 0; c < C; ++c) x[size_t(((n * CB + c / 16) * IH * IW + q) * 16 + c % 16)] = u(rng);
      for (int64_t p = 0; p < P; ++p)
        for (int64_t m = 0; m < M; ++m) z[yi(n, m, p)] = u(rng);
    }
    w.resize(size_t(M * C));
    bias.resize(size_t(M));
    for (auto& v : w) v = u(rng);
    for (auto& v : bias) v = u(rng);
  }
  // x's element read for output pixel p.
  size_t xi(int64_t n, int64_t c, int64_t p) const {
    const int64_t q = (p / g.OW) * g.sh * g.IW + (p % g.OW) * g.sw;
    return size_t(((n * CB + c / 16) * g.IH * g.IW + q) * 16 + c % 16);
  }
  size_t yi(int64_t n, int64_t m, int64_t p) const { return size_t(((n * MB + m / 16) * P + p) * 16 + m % 16); }
  // Output (n, m, pixel p) before the activation in double — bias, Z with `sum`, the products — and
  // the sum of those terms' magnitudes (the error bound's scale).
  std::pair<double, double> reference(int64_t n, int64_t m, int64_t p, bool sum) const {
    double s = bias[size_t(m)], mag = std::fabs(s);
    if (sum) s += z[yi(n, m, p)], mag += std::fabs(z[yi(n, m, p)]);
    for (int64_t k = 0; k < C; ++k) {
      const double t = double(x[xi(n, k, p)]) * w[size_t(m * C + k)];
      s += t, mag += std::fabs(t);
    }
    return {s, mag};
  }
  std::vector<float> run(amx::Pointwise::Act act, float alpha, float beta, bool sum) const {
    auto k = amx::Pointwise::make(C, M, w.data(), act, alpha, beta, sum);
    EXPECT_TRUE(k != nullptr);
    std::vector<float> y = sum ? z : std::vector<float>(z.size(), -7.f);
    if (k) k->run(x.data(), N, g, bias.data(), y.data());
    return y;
  }
};

double activate(double v, amx::Pointwise::Act act, double alpha, double beta) {
  switch (act) {
    case amx::Pointwise::Act::kNone: return v;
    case amx::Pointwise::Act::kRelu: return std::max(v, 0.0);
    case amx::Pointwise::Act::kLeakyRelu: return v < 0 ? alpha * v : v;
    case amx::Pointwise::Act::kClip: return std::min(std::max(v, alpha), beta);
    default: ADD_FAILURE() << "no reference for this activation";
  }
  return v;
}

}  // namespace

// Against a double reference, every element within (C / 8 + 4) float32 rounding units of the sum
// of |terms| (bias and Z included): channels not multiples of the tile's 32 (an odd number of
// input blocks, an output panel half past the last block, padded output channels, which stay
// zero), pixels not multiples of 32, two images, several pixel blocks, stride 2 (odd and even
// sizes), each activation, with and without Z; the same bits at 1 and 2 threads (2 threads split
// the output panels at batch 1).
TEST(AmxPointwise, MatchesDoubleReferenceAtFloat32Accuracy) {
  if (!amx::available()) GTEST_SKIP() << kNoAmx;
  using Act = amx::Pointwise::Act;
  struct Case {
    int64_t N, C, M, IH, IW, s;
    Act act;
    float alpha, beta;
    bool sum;
  };
  const double u = std::ldexp(1.0, -24);
  for (const Case& c : {Case{1, 80, 144, 7, 10, 1, Act::kRelu, 0, 0, true}, Case{2, 64, 128, 10, 20, 1, Act::kNone, 0, 0, false},
                        Case{1, 300, 40, 3, 11, 1, Act::kLeakyRelu, 0.1f, 0, true},
                        Case{1, 1100, 64, 15, 10, 1, Act::kClip, -0.5f, 0.5f, false},
                        Case{1, 256, 512, 15, 20, 1, Act::kRelu, 0, 0, false}, Case{2, 96, 160, 15, 13, 2, Act::kRelu, 0, 0, true},
                        Case{1, 64, 256, 28, 28, 2, Act::kNone, 0, 0, false}}) {
    SCOPED_TRACE(std::to_string(c.N) + "x" + std::to_string(c.C) + "->" + std::to_string(c.M) + " over " +
                 std::to_string(c.IH) + "x" + std::to_string(c.IW) + " stride " + std::to_string(c.s));
    const Pointwise p(c.N, c.C, c.M, c.IH, c.IW, c.s, 5);
    std::vector<float> one, two;
    {
      onnxtrain::ThreadScope scope(1);
      one = p.run(c.act, c.alpha, c.beta, c.sum);
    }
    {
      onnxtrain::ThreadScope scope(2);
      two = p.run(c.act, c.alpha, c.beta, c.sum);
    }
    EXPECT_EQ(one, two);
    for (int64_t n = 0; n < p.N; ++n)
      for (int64_t q = 0; q < p.P; ++q)
        for (int64_t m = 0; m < p.MB * 16; ++m) {
          const float got = one[p.yi(n, m, q)];
          if (m >= p.M) {
            ASSERT_EQ(got, 0.f) << "padded channel " << m;
            continue;
          }
          const auto [s, mag] = p.reference(n, m, q, c.sum);
          ASSERT_LE(std::fabs(got - activate(s, c.act, c.alpha, c.beta)), (double(p.C) / 8 + 4) * u * mag)
              << "n " << n << " m " << m << " pixel " << q;
        }
  }
}

// A pixel block holding an infinity or NaN is computed in float32: the pixels that read them give
// float32's infinities and NaNs (0 * inf = NaN nowhere else), the block's other pixels stay within
// the bound. Weights the split does not take, and Clip(1, 6) with padded output channels (which
// would no longer be zero), are refused.
TEST(AmxPointwise, SpecialValuesAsInFloat32) {
  if (!amx::available()) GTEST_SKIP() << kNoAmx;
  using Act = amx::Pointwise::Act;
  Pointwise p(1, 64, 128, 10, 10, 1, 8);
  const float inf = std::numeric_limits<float>::infinity();
  p.x[p.xi(0, 3, 10)] = inf;                    // pixel 10: +-inf in every output channel
  p.x[p.xi(0, 40, 20)] = std::nanf("");         // pixel 20: NaN everywhere
  for (auto& v : p.w) v = std::fabs(v) + 0.01f;  // positive weights: inf * w = +inf
  const auto y = p.run(Act::kNone, 0, 0, false);
  const double u = std::ldexp(1.0, -24);
  for (int64_t q = 0; q < p.P; ++q)
    for (int64_t m = 0; m < p.M; ++m) {
      const float got = y[p.yi(0, m, q)];
      if (q == 10) {
        ASSERT_EQ(got, inf) << m;
      } else if (q == 20) {
        ASSERT_TRUE(std::isnan(got)) << m;
      } else {
        const auto [s, mag] = p.reference(0, m, q, false);
        ASSERT_LE(std::fabs(got - s), (double(p.C) / 8 + 4) * u * mag) << "pixel " << q << " m " << m;
      }
    }
  std::vector<float> w = p.w;
  w[17] = std::nanf("");
  EXPECT_EQ(amx::Pointwise::make(p.C, p.M, w.data(), Act::kNone, 0, 0, false), nullptr);
  w[17] = inf;
  EXPECT_EQ(amx::Pointwise::make(p.C, p.M, w.data(), Act::kNone, 0, 0, false), nullptr);
  EXPECT_EQ(amx::Pointwise::make(p.C, 40, p.w.data(), Act::kClip, 1.f, 6.f, false), nullptr);
  EXPECT_NE(amx::Pointwise::make(p.C, 48, p.w.data(), Act::kClip, 1.f, 6.f, false), nullptr);  // no padded channels
  // the direct kernels' HardSwish and SiLU are not this kernel's: refused, never applied as None
  EXPECT_EQ(amx::Pointwise::make(p.C, 48, p.w.data(), Act::kHardSwish, 0, 0, false), nullptr);
  EXPECT_EQ(amx::Pointwise::make(p.C, 48, p.w.data(), Act::kSiLU, 0, 0, false), nullptr);
}
