// MatMul, Gemm and Einsum against naive double-precision references on random shapes.
#include <algorithm>
#include <array>
#include <map>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/gemm_rows512.h"
#include "test_util.h"

using namespace ot_test;
namespace amx = onnxtrain::kernels::cpu::amx;

namespace {

std::string str(const Shape& s) { return onnxtrain::shape_to_string(s); }

// Tolerances per element type for sums of a few hundred products of values in [-1, 1].
double tol_for(DType dt) {
  return dt == DType::kFloat64 ? 1e-10 : dt == DType::kFloat16 || dt == DType::kBFloat16 ? 3e-2 : 1e-4;
}

// ---------------------------------------------------------------- MatMul
// numpy matmul in double: 1-D operands promoted and their dim dropped, batch dims broadcast.
std::vector<double> ref_matmul(const std::vector<double>& a, Shape sa, const std::vector<double>& b, Shape sb, Shape* out) {
  const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
  if (a1) sa.insert(sa.begin(), 1);
  if (b1) sb.push_back(1);
  const int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2), batch;
  const size_t r = std::max(ba.size(), bb.size());
  ba.insert(ba.begin(), r - ba.size(), 1);
  bb.insert(bb.begin(), r - bb.size(), 1);
  for (size_t i = 0; i < r; ++i) batch.push_back(std::max(ba[i], bb[i]));
  std::vector<double> y;
  const int64_t nb = onnxtrain::shape_numel(batch);
  for (int64_t bi = 0; bi < nb; ++bi) {
    auto idx = unravel(bi, batch);
    const int64_t oa = broadcast_index(idx, ba), ob = broadcast_index(idx, bb);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += a[size_t((oa * M + i) * K + k)] * b[size_t((ob * K + k) * N + j)];
        y.push_back(s);
      }
  }
  *out = batch;
  if (!a1) out->push_back(M);
  if (!b1) out->push_back(N);
  return y;
}

void check_matmul(DType dt, uint32_t seed, int trials) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> rank(1, 4), dim(1, 6), big(1, 40), coin(0, 2);
  for (int t = 0; t < trials; ++t) {
    const int64_t M = big(rng), K = big(rng), N = big(rng);
    const int ra = rank(rng), rb = rank(rng);
    Shape batch;
    for (int i = 0; i < std::max(ra, rb) - 2; ++i) batch.push_back(dim(rng));
    // [batch suffix (some dims 1: broadcast)..., rows, cols], or [K] for rank 1
    auto operand = [&](int r, int64_t rows, int64_t cols) {
      if (r == 1) return Shape{K};
      Shape s(batch.end() - std::max(0, r - 2), batch.end());
      for (auto& d : s)
        if (coin(rng) == 0) d = 1;
      s.push_back(rows);
      s.push_back(cols);
      return s;
    };
    const Shape sa = operand(ra, M, K), sb = operand(rb, K, N);
    Tensor a = random_tensor(dt, sa, rng), b = random_tensor(dt, sb, rng);
    if (dt == DType::kInt32 || dt == DType::kInt64 || dt == DType::kUInt32) {
      a = random_tensor(dt, sa, rng, 0, 5), b = random_tensor(dt, sb, rng, 0, 5);
    }
    Shape so;
    auto expect = ref_matmul(to_double(a), sa, to_double(b), sb, &so);
    RunOptions o;
    o.inputs_as_constants = t % 4 == 3;
    o.threads = t % 2 ? 2 : 1;
    auto y = run_node("MatMul", {a, b}, {}, o);
    const double tol = tol_for(dt);
    EXPECT_TRUE(all_close(y[0], so, expect, tol, tol))
        << "MatMul " << str(sa) << " @ " << str(sb) << " seed " << seed << " trial " << t;
  }
}

}  // namespace

TEST(Linalg, MatMulFloat) { check_matmul(DType::kFloat32, 11, 60); }
TEST(Linalg, MatMulDouble) { check_matmul(DType::kFloat64, 12, 30); }
TEST(Linalg, MatMulInt32) { check_matmul(DType::kInt32, 13, 20); }
TEST(Linalg, MatMulInt64) { check_matmul(DType::kInt64, 14, 20); }
TEST(Linalg, MatMulUInt32) { check_matmul(DType::kUInt32, 15, 10); }
TEST(Linalg, MatMulFloat16) { check_matmul(DType::kFloat16, 16, 30); }  // widened to float32
TEST(Linalg, MatMulBFloat16) { check_matmul(DType::kBFloat16, 17, 30); }  // oneDNN's bf16 matmul

// Runs a FusedMatMul node and expects an error naming `what`.
void expect_fused_matmul_error(std::vector<Tensor> in, std::vector<ir::Attribute> attrs, const char* what) {
  RunOptions o;
  o.domain = "com.onnxtrain";
  o.opset = 1;
  try {
    run_node("FusedMatMul", in, attrs, o);
    ADD_FAILURE() << "no error for " << what;
  } catch (const onnxtrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

// com.onnxtrain.FusedMatMul: the operands stored transposed (last two dims swapped) give the
// product of the untransposed ones, batch broadcast included; with C, C added to every row
// (oneDNN's bias argument in float32, a pass after the product in the other types), the weights
// sometimes constants of the plan (packed once).
std::vector<double> swap_last2(const std::vector<double>& v, const Shape& s, Shape* out) {
  const int64_t R = s[s.size() - 2], C = s.back(), n = int64_t(v.size()) / std::max<int64_t>(R * C, 1);
  std::vector<double> r(v.size());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j) r[size_t((b * C + j) * R + i)] = v[size_t((b * R + i) * C + j)];
  *out = s;
  std::swap((*out)[s.size() - 2], (*out)[s.size() - 1]);
  return r;
}

TEST(Linalg, FusedMatMulTransposedOperands) {
  std::mt19937 rng(21);
  std::uniform_int_distribution<int> rank(2, 4), dim(1, 4), big(1, 40), coin(0, 2);
  for (int t = 0; t < 48; ++t) {
    const int64_t M = big(rng), K = big(rng), N = big(rng);
    const int ra = rank(rng), rb = rank(rng);
    Shape batch;
    for (int i = 0; i < std::max(ra, rb) - 2; ++i) batch.push_back(dim(rng));
    auto operand = [&](int r, int64_t rows, int64_t cols) {
      Shape s(batch.end() - (r - 2), batch.end());
      for (auto& d : s)
        if (coin(rng) == 0) d = 1;
      s.push_back(rows), s.push_back(cols);
      return s;
    };
    const Shape sa = operand(ra, M, K), sb = operand(rb, K, N);
    const DType dt = t % 3 == 2 ? DType::kFloat64 : t % 5 == 4 ? DType::kFloat16 : DType::kFloat32;
    const std::vector<double> a = to_double(random_tensor(dt, sa, rng)), b = to_double(random_tensor(dt, sb, rng));
    Shape so;
    auto expect = ref_matmul(a, sa, b, sb, &so);
    const bool ta = t % 2 == 1, tb = (t / 2) % 2 == 1, with_c = t % 3 != 1;
    const float alpha = with_c ? 1.f : t % 4 < 2 ? 0.125f : -2.5f;  // scales the product (no C)
    for (double& e : expect) e *= alpha;
    const Tensor c = random_tensor(dt, {N}, rng);
    if (with_c) {
      const std::vector<double> cv = to_double(c);
      for (size_t i = 0; i < expect.size(); ++i) expect[i] += cv[i % size_t(N)];
    }
    Shape sta = sa, stb = sb;
    const std::vector<double> fa = ta ? swap_last2(a, sa, &sta) : a, fb = tb ? swap_last2(b, sb, &stb) : b;
    RunOptions o;
    o.domain = "com.onnxtrain";
    o.opset = 1;
    o.threads = 1 + t % 2;
    o.inputs_as_constants = t % 4 == 2;
    std::vector<Tensor> in{from_double(dt, sta, fa), from_double(dt, stb, fb)};
    if (with_c) in.push_back(c);
    auto y = run_node("FusedMatMul", in, {attr_int("transA", ta), attr_int("transB", tb), attr_float("alpha", alpha)}, o);
    EXPECT_TRUE(all_close(y[0], so, expect, tol_for(dt), tol_for(dt)))
        << "FusedMatMul " << alpha << " " << str(sta) << (ta ? "^T" : "") << " @ " << str(stb) << (tb ? "^T" : "")
        << (with_c ? " + C" : "") << " trial " << t;
  }
  const auto fails = expect_fused_matmul_error;
  std::mt19937 r2(3);
  const Tensor m34 = random_tensor(DType::kFloat32, {3, 4}, r2);
  fails({random_tensor(DType::kFloat32, {4}, r2), m34}, {}, "rank >= 2");
  fails({m34, m34}, {}, "inner dimensions differ");
  fails({m34, m34, random_tensor(DType::kFloat32, {3}, r2)}, {attr_int("transB", 1), attr_float("alpha", 2.f)},
        "alpha other than 1 with the bias C is not implemented");
  fails({m34, m34, random_tensor(DType::kFloat32, {4}, r2)}, {attr_int("transB", 1)}, "bias C must be float [3], got float [4]");
  fails({m34, m34, random_tensor(DType::kFloat64, {3}, r2)}, {attr_int("transB", 1)}, "bias C must be float [3], got double [3]");
}

// A rank-3 tensor's values permuted: out[i0, i1, i2] = v[i_perm...], out shape s[perm].
std::vector<double> permute3(const std::vector<double>& v, const Shape& s, const std::vector<int>& perm, Shape* out) {
  *out = {s[size_t(perm[0])], s[size_t(perm[1])], s[size_t(perm[2])]};
  const int64_t st[3] = {s[1] * s[2], s[2], 1};
  std::vector<double> r(v.size());
  size_t k = 0;
  for (int64_t i = 0; i < (*out)[0]; ++i)
    for (int64_t j = 0; j < (*out)[1]; ++j)
      for (int64_t l = 0; l < (*out)[2]; ++l) {
        const int64_t idx[3] = {i, j, l};
        int64_t src = 0;
        for (int d = 0; d < 3; ++d) src += idx[d] * st[perm[d]];
        r[k++] = v[size_t(src)];
      }
  return r;
}

// FusedMatMul's transBatchA / transBatchB (onnxruntime's: a rank-3 operand's first axis moved
// behind its batch axis, before transA / transB) and transBatchY (the product stored with its row
// axis first) against the naive product of the permuted operands, trial t choosing the flags (its
// bits), 2-D operands broadcast over the batch, the bias C, alpha and the thread count.
static void fused_matmul_trans_batch_trial(int t, int64_t nb, int64_t M, int64_t K, int64_t N, DType dt,
                                           std::mt19937& rng) {
  const bool tba = t & 1, tbb = t & 2, ta = t & 4, tb = t & 8, tby = t & 16 || (!tba && !tbb);
  const bool a2 = !tba && t % 3 == 0, b2 = !tbb && !a2 && t % 5 == 0, with_c = t % 4 == 1;
  // Logical operands [nb, M, K], [nb, K, N] (2-D: [M, K], [K, N]); their storage undoes the flags.
  const Shape la = a2 ? Shape{M, K} : Shape{nb, M, K}, lb = b2 ? Shape{K, N} : Shape{nb, K, N};
  const std::vector<double> va = to_double(random_tensor(dt, la, rng)), vb = to_double(random_tensor(dt, lb, rng));
  Shape so;
  auto expect = ref_matmul(va, la, vb, lb, &so);
  const float alpha = with_c || t % 3 == 0 ? 1.f : 0.25f;
  for (double& e : expect) e *= alpha;
  const Tensor c = random_tensor(dt, {N}, rng);
  if (with_c) {
    const std::vector<double> cv = to_double(c);
    for (size_t i = 0; i < expect.size(); ++i) expect[i] += cv[i % size_t(N)];
  }
  // Stored = logical permuted by the inverse of what the flags read: trans swaps the last two
  // axes, then transBatch moves axis 0 behind the batch axis.
  auto store = [&](const std::vector<double>& v, const Shape& s, bool trans_batch, bool trans, Shape* out) {
    if (s.size() == 2) {
      if (!trans) return *out = s, v;
      Shape o3;
      auto r = permute3(v, {1, s[0], s[1]}, {0, 2, 1}, &o3);
      *out = {o3[1], o3[2]};
      return r;
    }
    Shape s1 = s;
    std::vector<double> r = v;
    if (trans) r = permute3(r, s, {0, 2, 1}, &s1);
    Shape s2 = s1;
    if (trans_batch) r = permute3(r, s1, {1, 0, 2}, &s2);
    *out = s2;
    return r;
  };
  Shape sa, sb;
  const std::vector<double> fa = store(va, la, tba, ta, &sa), fb = store(vb, lb, tbb, tb, &sb);
  if (tby) {  // [nb, M, N] stored as [M, nb, N]
    Shape s2;
    expect = permute3(expect, so, {1, 0, 2}, &s2);
    so = s2;
  }
  RunOptions o;
  o.domain = "com.onnxtrain";
  o.opset = 1;
  o.threads = 1 + t % 2;
  std::vector<Tensor> in{from_double(dt, sa, fa), from_double(dt, sb, fb)};
  if (with_c) in.push_back(c);
  auto y = run_node("FusedMatMul", in,
                    {attr_int("transA", ta), attr_int("transB", tb), attr_int("transBatchA", tba),
                     attr_int("transBatchB", tbb), attr_int("transBatchY", tby), attr_float("alpha", alpha)},
                    o);
  EXPECT_TRUE(all_close(y[0], so, expect, tol_for(dt), tol_for(dt)))
      << "trial " << t << ": " << str(sa) << " tbA " << tba << " tA " << ta << " @ " << str(sb) << " tbB " << tbb << " tB "
      << tb << " tbY " << tby << (with_c ? " + C" : "");
}

// Every flag combination, sizes on both sides of the tiny-product cut, float32, float64 and float16.
TEST(Linalg, FusedMatMulTransBatch) {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int> small(1, 6), big(1, 48);
  for (int t = 0; t < 96; ++t) {
    const int64_t nb = small(rng), M = (t % 7 ? big : small)(rng), K = big(rng), N = big(rng);
    const DType dt = t % 6 == 5 ? DType::kFloat64 : t % 11 == 10 ? DType::kFloat16 : DType::kFloat32;
    fused_matmul_trans_batch_trial(t, nb, M, K, N, dt, rng);
  }
  std::mt19937 r2(5);
  const auto fails = expect_fused_matmul_error;
  fails({random_tensor(DType::kFloat32, {3, 4}, r2), random_tensor(DType::kFloat32, {4, 5}, r2)},
        {attr_int("transBatchA", 1)}, "needs an operand of rank 3");
  fails({random_tensor(DType::kFloat32, {2, 3, 4}, r2), random_tensor(DType::kFloat32, {2, 2, 4, 5}, r2)},
        {attr_int("transBatchB", 1)}, "rank 2 or 3");
  fails({random_tensor(DType::kFloat32, {2, 3, 4}, r2), random_tensor(DType::kFloat32, {4, 3, 5}, r2)},
        {attr_int("transBatchB", 1)}, "batch dimensions differ");
}

// Attention-sized float32 products (every side 64 or more: one product a thread on the AMX tiles
// where the CPU has them, amx::pays_batched; oneDNN's batched kernel elsewhere): every flag
// combination, sides that are not multiples of the tile (70, 97), K of 64 (two tile steps: the
// prefetch runs into the next rows), one and two threads, the bias and alpha.
TEST(Linalg, FusedMatMulTransBatchAttentionSizes) {
  std::mt19937 rng(31);
  std::uniform_int_distribution<int> heads(2, 5);
  const int64_t sides[][3] = {{128, 64, 128}, {70, 97, 64}, {64, 64, 64}, {97, 128, 70}};
  for (int t = 0; t < 32; ++t) {
    const int64_t* s = sides[t % 4];
    ASSERT_EQ(amx::available(), amx::pays_batched(s[0], s[2], s[1]));
    fused_matmul_trans_batch_trial(t, heads(rng), s[0], s[1], s[2], DType::kFloat32, rng);
  }
}

// MatMul of random float32 operands of shapes sa and sb on two threads against the naive double
// product.
static void expect_matmul_matches_reference(const Shape& sa, const Shape& sb, std::mt19937& rng) {
  Tensor a = random_tensor(DType::kFloat32, sa, rng), b = random_tensor(DType::kFloat32, sb, rng);
  Shape so;
  auto e = ref_matmul(to_double(a), sa, to_double(b), sb, &so);
  RunOptions o;
  o.threads = 2;
  EXPECT_TRUE(all_close(run_node("MatMul", {a, b}, {}, o)[0], so, e, 1e-4, 1e-4)) << str(sa) << " @ " << str(sb);
}

TEST(Linalg, MatMulLarge) {  // large enough for oneDNN's blocked paths and both threads
  std::mt19937 rng(17);
  for (auto [sa, sb] : std::vector<std::pair<Shape, Shape>>{{{130, 257}, {257, 129}},
                                                            {{3, 1, 65, 70}, {4, 70, 33}},
                                                            {{70, 65}, {2, 65, 71}}})
    expect_matmul_matches_reference(sa, sb, rng);
}

// Plain float32 weights with a 4 KiB-multiple row stride (N = 1024) go through oneDNN's blocked
// layout, reordered each run (reorder_plain_weights): MatMul over a batch and 2-D, and Gemm with
// A transposed (a weight gradient's form), against the naive double products, on two threads.
TEST(Linalg, PlainWeightsWithAPageStrideReordered) {
  std::mt19937 rng(19);
  for (auto [sa, sb] : std::vector<std::pair<Shape, Shape>>{{{40, 1024}, {1024, 1024}}, {{2, 20, 1200}, {1200, 1024}}})
    expect_matmul_matches_reference(sa, sb, rng);
  // Gemm(A^T, B): A [1200, 30] read transposed, B [1200, 1024].
  Tensor a = random_tensor(DType::kFloat32, {1200, 30}, rng), b = random_tensor(DType::kFloat32, {1200, 1024}, rng);
  Shape sat;
  const std::vector<double> at = swap_last2(to_double(a), {1200, 30}, &sat);
  Shape so;
  auto e = ref_matmul(at, sat, to_double(b), {1200, 1024}, &so);
  RunOptions o;
  o.threads = 2;
  EXPECT_TRUE(all_close(run_node("Gemm", {a, b}, {attr_int("transA", 1)}, o)[0], so, e, 1e-4, 1e-4));
}

TEST(Linalg, MatMulEmpty) {
  Tensor a = Tensor::zeros(DType::kFloat32, {2, 0, 3}), b = Tensor::zeros(DType::kFloat32, {3, 4});
  auto y = run_node("MatMul", {a, b});
  EXPECT_EQ(y[0].shape(), (Shape{2, 0, 4}));
  std::mt19937 rng(18);
  Tensor c = random_tensor(DType::kFloat32, {2, 0}, rng), d = random_tensor(DType::kFloat32, {0, 3}, rng);
  EXPECT_TRUE(all_close(run_node("MatMul", {c, d})[0], {2, 3}, std::vector<double>(6, 0.0), 0, 0));
}

TEST(Linalg, MatMulErrorsNameNode) {
  auto expect_error = [](const Tensor& a, const Tensor& b, const char* what) {
    try {
      run_node("MatMul", {a, b});
      ADD_FAILURE() << "expected an error: " << what;
    } catch (const onnxtrain::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("node_MatMul"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error(Tensor::zeros(DType::kFloat32, {2, 3}), Tensor::zeros(DType::kFloat32, {4, 5}), "inner dimensions");
  expect_error(Tensor::zeros(DType::kFloat32, {2, 2, 3}), Tensor::zeros(DType::kFloat32, {3, 3, 5}), "broadcast");
  expect_error(Tensor::zeros(DType::kFloat32, {2, 3}), Tensor::zeros(DType::kFloat64, {3, 5}), "element types");
  expect_error(Tensor::zeros(DType::kFloat32, {}), Tensor::zeros(DType::kFloat32, {3}), "rank");
}

// ---------------------------------------------------------------- Gemm
namespace {
// Gemm's output in double: alpha op(a) @ op(b) + beta c (c of shape sc broadcast; none: 0).
std::vector<double> ref_gemm(const Tensor& a, const Tensor& b, const Tensor* c, const Shape& sc, bool ta, bool tb,
                             float alpha, float beta) {
  const int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1), N = tb ? b.dim(0) : b.dim(1);
  const auto av = to_double(a), bv = to_double(b), cv = c ? to_double(*c) : std::vector<double>{};
  std::vector<double> e;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += av[size_t(ta ? k * M + i : i * K + k)] * bv[size_t(tb ? j * K + k : k * N + j)];
      e.push_back(double(alpha) * s + double(beta) * (c ? cv[size_t(broadcast_index({i, j}, sc))] : 0.0));
    }
  return e;
}
}  // namespace

TEST(Linalg, GemmRandom) {
  const uint32_t seed = 21;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dim(1, 50), coin(0, 1), cshape(0, 6);
  for (int t = 0; t < 60; ++t) {
    const DType dt = t % 5 == 4 ? DType::kFloat64 : t % 7 == 6 ? DType::kInt64 : t % 6 == 5 ? DType::kBFloat16
                     : t % 8 == 3                                                    ? DType::kFloat16
                                                                                     : DType::kFloat32;
    const int64_t M = dim(rng), N = dim(rng), K = dim(rng);
    const bool ta = coin(rng), tb = coin(rng);
    const float alpha = dt == DType::kInt64 ? 1.f : std::uniform_real_distribution<float>(-2, 2)(rng);
    const float beta = dt == DType::kInt64 ? 1.f : std::uniform_real_distribution<float>(-2, 2)(rng);
    const int cs = cshape(rng);  // 0: none, 1: scalar, 2: [N], 3: [1, N], 4: [M, 1], 5: [M, N], 6: [1]
    const Shape sc = cs == 1 ? Shape{} : cs == 2 ? Shape{N} : cs == 3 ? Shape{1, N} : cs == 4 ? Shape{M, 1}
                     : cs == 5 ? Shape{M, N} : Shape{1};
    const double lo = dt == DType::kInt64 ? -4 : -1, hi = dt == DType::kInt64 ? 4 : 1;
    Tensor a = random_tensor(dt, ta ? Shape{K, M} : Shape{M, K}, rng, lo, hi);
    Tensor b = random_tensor(dt, tb ? Shape{N, K} : Shape{K, N}, rng, lo, hi);
    Tensor c = cs ? random_tensor(dt, sc, rng, lo, hi) : Tensor();
    const std::vector<double> e = ref_gemm(a, b, cs ? &c : nullptr, sc, ta, tb, alpha, beta);
    RunOptions o;
    o.opset = t % 3 == 0 ? 11 : 13;
    o.inputs_as_constants = t % 4 == 1;
    o.threads = 1 + t % 2;
    std::vector<Tensor> in = {a, b};
    if (cs) in.push_back(c);
    auto y = run_node("Gemm", in,
                      {attr_int("transA", ta), attr_int("transB", tb), attr_float("alpha", alpha), attr_float("beta", beta)}, o);
    // bfloat16 / float16: inputs exact, fp32 accumulation, one rounding of the output (8 / 11 bits).
    const double tol = dt == DType::kFloat64 ? 1e-9 : dt == DType::kInt64 ? 0 : dt == DType::kBFloat16 ? 1e-2
                       : dt == DType::kFloat16 ? 2e-3 : 1e-4;
    EXPECT_TRUE(all_close(y[0], {M, N}, e, tol, tol)) << dtype_name(dt) << " Gemm M=" << M << " N=" << N << " K=" << K << " ta=" << ta
                                                      << " tb=" << tb << " C" << str(sc) << " seed " << seed
                                                      << " trial " << t;
  }
}

namespace {
// Gemm(a, b, c) (transA ta, transB tb, alpha, beta; C of shape sc) against a double reference at 1
// and 2 threads (inputs as constants with `consts`), and exactly `nans` NaN outputs.
void check_gemm_case(const Tensor& a, const Tensor& b, const Tensor& c, const Shape& sc, bool ta, bool tb, float alpha,
                     float beta, bool consts, int64_t nans) {
  const int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1), N = tb ? b.dim(0) : b.dim(1);
  const std::vector<double> e = ref_gemm(a, b, &c, sc, ta, tb, alpha, beta);
  for (int threads : {1, 2}) {
    RunOptions o;
    o.threads = threads;
    o.inputs_as_constants = consts;
    auto y = run_node("Gemm", {a, b, c},
                      {attr_int("transA", ta), attr_int("transB", tb), attr_float("alpha", alpha), attr_float("beta", beta)},
                      o);
    const std::string what = "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                             " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " threads " + std::to_string(threads);
    EXPECT_TRUE(all_close(y[0], {M, N}, e, 1e-4, 2e-4)) << what;
    int64_t found = 0;
    for (int64_t i = 0; i < M * N; ++i) found += std::isnan(y[0].data<float>()[i]) ? 1 : 0;
    EXPECT_EQ(found, nans) << what;
  }
}
}  // namespace

// One to five rows of A (a classifier at batch 1..4, a regression head's weight gradient: the
// matrix-vector path, which streams B instead of oneDNN's packed product, sums in registers for up
// to 16 columns; five rows go through oneDNN again): transposed and plain B, K and N around the
// 8-lane, 4-row and 1024-column tiles, products under and over the tiny size, C broadcast, alpha
// and beta, 1 and 2 threads, against a double reference; a NaN in B reaches exactly its column.
TEST(Linalg, GemmFewRowsMatchesReference) {
  std::mt19937 rng(33);
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {1, 1000, 2048}, {1, 1100, 37}, {2, 513, 300}, {3, 77, 1031}, {4, 1030, 129}, {5, 300, 200}, {1, 9, 2000},
      {1, 16, 50}, {1, 10, 1000}, {1, 3, 7}};
  int trial = 0;
  for (const auto& [M, N, K] : shapes)
    for (int tb = 0; tb < 2; ++tb) {
      ++trial;
      const bool ta = M == 1 && trial % 3 == 0;
      const float alpha = trial % 2 ? 1.f : -0.75f, beta = trial % 4 < 2 ? 1.f : 0.5f;
      Tensor a = random_tensor(DType::kFloat32, ta ? Shape{K, M} : Shape{M, K}, rng);
      Tensor b = random_tensor(DType::kFloat32, tb ? Shape{N, K} : Shape{K, N}, rng);
      const Shape sc = trial % 2 ? Shape{N} : Shape{M, N};
      Tensor c = random_tensor(DType::kFloat32, sc, rng);
      const int64_t nan_col = N / 2;
      b.data<float>()[tb ? nan_col * K + K - 1 : (K - 1) * N + nan_col] = std::nanf("");
      check_gemm_case(a, b, c, sc, ta, tb, alpha, beta, trial % 2 == 0, M);
    }
}

// Five to eight rows against constant weights (an MLP at batch 8, at inference: the weights packed
// into 32-column panels for the AVX-512 kernel where the CPU has it, oneDNN elsewhere): N around
// the panel (32, a partial last panel, several), K from 1 up, transposed and plain B, C as the bias
// row (added by the kernel), C of [M, N] and beta 0.5 (oneDNN), alpha != 1 (oneDNN), 1 and 2
// threads, against a double reference; a NaN in B reaches exactly its column.
TEST(Linalg, GemmFiveToEightRowsWithConstantWeightsMatchesReference) {
  std::mt19937 rng(81);
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {8, 512, 784}, {8, 256, 512}, {5, 32, 300}, {6, 45, 7}, {7, 100, 129}, {8, 33, 1}, {8, 64, 64}};
  int trial = 0;
  for (const auto& [M, N, K] : shapes)
    for (int tb = 0; tb < 2; ++tb)
      for (int c_kind = 0; c_kind < 3; ++c_kind) {
        ++trial;
        const float alpha = c_kind == 2 && tb ? 0.5f : 1.f, beta = c_kind == 1 ? 0.5f : 1.f;
        Tensor a = random_tensor(DType::kFloat32, Shape{M, K}, rng);
        Tensor b = random_tensor(DType::kFloat32, tb ? Shape{N, K} : Shape{K, N}, rng);
        const Shape sc = c_kind == 1 ? Shape{M, N} : Shape{N};
        Tensor c = random_tensor(DType::kFloat32, sc, rng);
        const int64_t nan_col = trial % N;
        b.data<float>()[tb ? nan_col * K + K / 2 : (K / 2) * N + nan_col] = std::nanf("");
        check_gemm_case(a, b, c, sc, false, tb, alpha, beta, true, M);
      }
}

// The few-rows kernel itself (where the CPU runs AVX-512): every row count 1 to 8, a partial last
// panel, a range of panels, C's columns outside that range untouched; against a double reference.
TEST(Linalg, FewRowsKernelMatchesReference) {
  namespace rows512 = onnxtrain::kernels::cpu::rows512;
  if (!rows512::available()) GTEST_SKIP() << "the CPU has no AVX-512F";
  std::mt19937 rng(82);
  const int64_t N = 75, K = 37;  // three panels, the last of 11 columns
  for (int64_t M = 1; M <= 8; ++M)
    for (int tb = 0; tb < 2; ++tb)
      for (bool with_bias : {false, true}) {
        Tensor a = random_tensor(DType::kFloat32, Shape{M, K}, rng);
        Tensor b = random_tensor(DType::kFloat32, tb ? Shape{N, K} : Shape{K, N}, rng);
        Tensor bias = random_tensor(DType::kFloat32, Shape{N}, rng);
        std::vector<float> packed(size_t(rows512::packed_floats(K, N)) + 16);
        float* p = packed.data() + (16 - (reinterpret_cast<uintptr_t>(packed.data()) % 64) / 4) % 16;  // 64-byte aligned
        rows512::pack(tb, K, N, b.data<float>(), tb ? K : N, p);
        std::vector<float> y(size_t(M * N), -7.f);
        rows512::product(M, K, N, a.data<float>(), K, p, with_bias ? bias.data<float>() : nullptr, y.data(), N, 1, 3);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            const float got = y[size_t(m * N + n)];
            if (n < rows512::kPanel) {  // panel 0 was not asked for
              EXPECT_EQ(got, -7.f) << "M=" << M << " column " << n;
              continue;
            }
            double e = with_bias ? bias.data<float>()[n] : 0.0, mag = std::abs(e);
            for (int64_t k = 0; k < K; ++k) {
              const double t = double(a.data<float>()[m * K + k]) * (tb ? b.data<float>()[n * K + k] : b.data<float>()[k * N + n]);
              e += t;
              mag += std::abs(t);
            }
            EXPECT_NEAR(got, e, 1e-6 * mag + 1e-7) << "M=" << M << " tb=" << tb << " row " << m << " column " << n;
          }
      }
}

// One to five columns of op(B) (a regression or binary classification head: the dot-product
// path, eight rows of A at a time; five columns and plain B with several columns go through
// oneDNN): rows and K around the 8-row block and the 8-lane tail, products under and over the tiny
// size, C of each broadcast shape (one row in the epilogue, [M, N] and [M, 1] first), alpha and
// beta (0 included), 1 and 2 threads, against a double reference; a NaN in A reaches exactly its row. Then kernels::cpu::gemm itself with A's and C's rows padded (lda > K,
// ldc > N), beta == 0 over garbage in C.
TEST(Linalg, GemmFewColumnsMatchesReference) {
  std::mt19937 rng(35);
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {1000, 1, 10}, {1001, 1, 10}, {7, 3, 5}, {9, 4, 17}, {5000, 2, 40}, {3001, 1, 300}, {17, 2, 8}, {300, 5, 7},
      {2000, 4, 33}};
  int trial = 0;
  // C of one row ([N], [1, N], one value) goes into the dot products' epilogue; C [M, N] and [M, 1]
  // are broadcast into Y first.
  for (const auto& [M, N, K] : shapes)
    for (int tb = 0; tb < 2; ++tb)
      for (int cs = 0; cs < 5; ++cs) {
        ++trial;
        const float alpha = trial % 2 ? 1.f : -0.75f, beta = std::array{1.f, 0.5f, 0.f}[size_t(trial % 3)];
        Tensor a = random_tensor(DType::kFloat32, {M, K}, rng);
        Tensor b = random_tensor(DType::kFloat32, tb ? Shape{N, K} : Shape{K, N}, rng);
        const Shape sc = std::array{Shape{N}, Shape{1, N}, Shape{}, Shape{M, N}, Shape{M, 1}}[size_t(cs)];
        Tensor c = random_tensor(DType::kFloat32, sc, rng);
        const int64_t nan_row = M / 2;
        a.data<float>()[nan_row * K + K - 1] = std::nanf("");
        check_gemm_case(a, b, c, sc, false, tb, alpha, beta, trial / 3 % 2 == 0, N);
      }
  // padded rows: A [M, K] inside [M, K + 3], C [M, N] inside [M, N + 2]
  for (const auto& [M, N, K] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{19, 3, 9}, {64, 1, 16}, {13, 4, 3}}) {
    const int64_t lda = K + 3, ldc = N + 2;
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> A(size_t(M * lda)), B(size_t(N * K)), C(size_t(M * ldc), std::nanf(""));
    for (auto& v : A) v = u(rng);
    for (auto& v : B) v = u(rng);
    onnxtrain::kernels::cpu::gemm(false, true, M, N, K, 2.f, A.data(), lda, B.data(), K, 0.f, C.data(), ldc);
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < K; ++k) sum += double(A[size_t(i * lda + k)]) * B[size_t(j * K + k)];
        EXPECT_NEAR(C[size_t(i * ldc + j)], 2 * sum, 1e-5 * (1 + std::abs(2 * sum))) << "M=" << M << " row " << i;
      }
      EXPECT_TRUE(std::isnan(C[size_t(i * ldc + N)])) << "C's padding written, row " << i;
    }
  }
}

TEST(Linalg, GemmErrorsNameNode) {
  Tensor a = Tensor::zeros(DType::kFloat32, {2, 3}), b = Tensor::zeros(DType::kFloat32, {3, 4});
  auto expect_error = [](const std::vector<Tensor>& in, int64_t opset, const char* what) {
    RunOptions o;
    o.opset = opset;
    try {
      run_node("Gemm", in, {}, o);
      ADD_FAILURE() << "expected an error: " << what;
    } catch (const onnxtrain::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("node_Gemm"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error({a, Tensor::zeros(DType::kFloat32, {4, 4})}, 13, "inner dimensions");
  expect_error({a, b, Tensor::zeros(DType::kFloat32, {3, 4})}, 13, "does not broadcast");
  // Gemm before opset 11 requires C: the node's arity is checked against the ONNX schema.
  try {
    RunOptions o;
    o.opset = 9;
    run_node("Gemm", {a, b}, {}, o);
    ADD_FAILURE() << "expected an error: C is required at opset 9";
  } catch (const onnxtrain::InvalidGraph& e) {
    EXPECT_NE(std::string(e.what()).find("node_Gemm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("schema allows 3 to 3"), std::string::npos) << e.what();
  }
  expect_error({Tensor::zeros(DType::kFloat32, {2, 3, 1}), b}, 13, "2-D");
  expect_error({a, b, Tensor::zeros(DType::kFloat32, {4})}, 6, "does not broadcast");  // opset 6: broadcast=0
}

TEST(Linalg, GemmLegacyBroadcastAttribute) {
  Tensor a = Tensor::from_vector<float>({1, 2}, {1, 2}), b = Tensor::from_vector<float>({2, 2}, {1, 0, 0, 1});
  Tensor c = Tensor::from_vector<float>({2}, {10, 20});
  RunOptions o;
  o.opset = 6;
  auto y = run_node("Gemm", {a, b, c}, {attr_int("broadcast", 1)}, o);
  EXPECT_TRUE(all_close(y[0], {1, 2}, {11, 22}, 0, 0));
}

// ---------------------------------------------------------------- Einsum
// Naive einsum in double: loops over every assignment of every label.
std::vector<double> ref_einsum(std::string eq, const std::vector<Tensor>& in, Shape* out_shape) {
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  // Expand the ellipsis into labels '0'.. (right-aligned), then evaluate.
  std::string lhs = eq.substr(0, eq.find("->"));
  std::vector<std::string> terms;
  size_t p = 0;
  for (size_t q; (q = lhs.find(',', p)) != std::string::npos; p = q + 1) terms.push_back(lhs.substr(p, q - p));
  terms.push_back(lhs.substr(p));
  size_t ell = 0;
  for (size_t i = 0; i < terms.size(); ++i)
    if (terms[i].find("...") != std::string::npos) ell = std::max(ell, in[i].rank() - (terms[i].size() - 3));
  auto expand = [&](const std::string& t, size_t n) {
    const size_t e = t.find("...");
    if (e == std::string::npos) return t;
    std::string mid;
    for (size_t k = ell - n; k < ell; ++k) mid += char('0' + k);
    return t.substr(0, e) + mid + t.substr(e + 3);
  };
  for (size_t i = 0; i < terms.size(); ++i)
    terms[i] = expand(terms[i], terms[i].find("...") == std::string::npos ? 0 : in[i].rank() - (terms[i].size() - 3));
  std::string out;
  if (eq.find("->") != std::string::npos) {
    out = expand(eq.substr(eq.find("->") + 2), ell);
  } else {
    std::map<char, int> count;
    for (auto& t : terms)
      for (char c : t) ++count[c];
    for (size_t k = 0; k < ell; ++k) out += char('0' + k);
    for (auto [c, n] : count)
      if (n == 1 && !(c >= '0' && c <= '9')) out += c;
  }
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i)
    for (size_t d = 0; d < terms[i].size(); ++d) size[terms[i][d]] = std::max(size[terms[i][d]], in[i].dim(d));
  std::string labels;
  Shape all;
  for (auto [c, n] : size) labels += c, all.push_back(n);
  out_shape->clear();
  for (char c : out) out_shape->push_back(size[c]);
  std::vector<double> y(size_t(onnxtrain::shape_numel(*out_shape)), 0.0);
  std::vector<std::vector<double>> vals;
  for (auto& t : in) vals.push_back(to_double(t));
  const int64_t total = onnxtrain::shape_numel(all);
  for (int64_t f = 0; f < total; ++f) {
    auto idx = unravel(f, all);
    auto at = [&](char c) { return idx[labels.find(c)]; };
    double prod = 1;
    for (size_t i = 0; i < terms.size(); ++i) {
      std::vector<int64_t> ii;
      for (size_t d = 0; d < terms[i].size(); ++d) ii.push_back(in[i].dim(d) == 1 ? 0 : at(terms[i][d]));
      // repeated labels must agree (diagonal): the assignment gives one value per label already
      prod *= vals[i][size_t(ravel(ii, in[i].shape()))];
    }
    std::vector<int64_t> oi;
    for (char c : out) oi.push_back(at(c));
    y[size_t(ravel(oi, *out_shape))] += prod;
  }
  return y;
}

TEST(Linalg, EinsumEquations) {
  struct Case {
    std::string eq;
    std::vector<Shape> shapes;
  };
  const std::vector<Case> cases = {
      {"ij,jk->ik", {{5, 7}, {7, 3}}},
      {"ij,jk", {{5, 7}, {7, 3}}},
      {"bij,bjk->bik", {{3, 4, 5}, {3, 5, 6}}},
      {"bij,bkj->bik", {{3, 4, 5}, {3, 6, 5}}},
      {"bji,bjk->bik", {{3, 5, 4}, {3, 5, 6}}},
      {"ij->ji", {{4, 6}}},
      {"ii->i", {{5, 5}}},
      {"ii", {{5, 5}}},
      {"ij->", {{4, 6}}},
      {"i,i", {{7}, {7}}},
      {"i,j->ij", {{3}, {4}}},
      {"ij,ij->ij", {{3, 4}, {3, 4}}},
      {"ij,ij->i", {{3, 4}, {3, 4}}},
      {"bn,anm,bm->ba", {{2, 3}, {4, 3, 5}, {2, 5}}},
      {"abc,cd", {{2, 3, 4}, {4, 5}}},
      {"abc,cd->dba", {{2, 3, 4}, {4, 5}}},
      {"...ij,...jk->...ik", {{2, 3, 4, 5}, {3, 5, 6}}},
      {"...ij,...jk", {{2, 1, 4, 5}, {3, 5, 6}}},
      {"...ii->...i", {{2, 3, 4, 4}}},
      {"b...,b...->b...", {{2, 3, 4}, {2, 3, 4}}},
      {"ij,jk,kl->il", {{3, 4}, {4, 5}, {5, 2}}},
      {"iij,jk->ik", {{3, 3, 4}, {4, 2}}},
      {"ijk,ikj->i", {{2, 3, 4}, {2, 4, 3}}},
      {"bhqd,bhkd->bhqk", {{2, 3, 5, 8}, {2, 3, 6, 8}}},
      {"ab,cd->", {{2, 3}, {4, 5}}},
      {"i,i->", {{1}, {6}}},
      {"Ab,bC->CA", {{3, 4}, {4, 2}}},
      {" ij , jk -> ik ", {{2, 3}, {3, 4}}},
  };
  const uint32_t seed = 31;
  std::mt19937 rng(seed);
  int t = 0;
  for (const auto& c : cases) {
    for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
      std::vector<Tensor> in;
      for (const auto& s : c.shapes) in.push_back(random_tensor(dt, s, rng, -3, 3));
      Shape so;
      auto e = ref_einsum(c.eq, in, &so);
      RunOptions o;
      o.opset = 12;
      o.inputs_as_constants = ++t % 5 == 0;
      o.threads = 1 + t % 2;
      auto y = run_node("Einsum", in, {attr_string("equation", c.eq)}, o);
      const double tol = dt == DType::kFloat32 ? 1e-4 : 1e-9;
      EXPECT_TRUE(all_close(y[0], so, e, tol, tol)) << "'" << c.eq << "' " << onnxtrain::dtype_name(dt) << " seed " << seed;
    }
  }
}

TEST(Linalg, EinsumErrorsNameNode) {
  auto expect_error = [](const std::string& eq, const std::vector<Tensor>& in, const char* what) {
    try {
      run_node("Einsum", in, {attr_string("equation", eq)});
      ADD_FAILURE() << "expected an error for " << eq;
    } catch (const onnxtrain::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("node_Einsum"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  Tensor a = Tensor::zeros(DType::kFloat32, {2, 3}), b = Tensor::zeros(DType::kFloat32, {4, 5});
  expect_error("ij,jk->ik", {a, b}, "disagree");
  expect_error("ij->ik", {a}, "not an input label");
  expect_error("ijk->i", {a}, "does not match input");
  expect_error("ij,jk", {a}, "operand terms");
  expect_error("i.j->i", {a}, "ellipsis");
  expect_error("i$->i", {a}, "invalid character");
  expect_error("ii->i", {a}, "different sizes");
}
