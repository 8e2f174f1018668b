// The CUDA provider's kernel math on the host, without a GPU: the optimizer update rules
// (kernels/cuda/optimizer_rules.h: __host__ __device__, built from the node's attributes as the
// CUDA kernel builds them) applied here element by element must give the CPU provider's optimizer
// kernels' results bit for bit, for every algorithm the CUDA provider runs, float32 and float64,
// the first and a later step, with a gradient scale. (On the device the rules round each operation
// explicitly, so they compute the same bits there; gpu_check's suite rerun checks that.) Compiled
// with -ffp-contract=off, as the CPU kernels are: no contraction the rules do not write.
// CUDA builds only (the rules' header needs CUDA's headers).
#ifdef ONNXTRAIN_WITH_CUDA
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kernels/cuda/broadcast.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cudnn.h"
#include "kernels/cuda/optimizer_rules.h"
#include "kernels/cuda/pool_rules.h"
#include "ops/optimizers.h"
#include "test_util.h"

using namespace onnxtrain;
using namespace onnxtrain::kernels::cuda;

namespace {

struct Case {
  std::string op;
  std::vector<ir::Attribute> attrs;
};

// The attributes of com.onnxtrain optimizer `op` as its kernels read them.
kernels::shape::OptimizerAttrs optimizer_attrs(const std::string& op, const std::vector<ir::Attribute>& attrs) {
  ir::Node node = ot_test::make_node(op, {}, {}, attrs);
  node.domain = "com.onnxtrain";
  const OpsetMap opsets{{"com.onnxtrain", 1}};
  const ExecOptions eo;
  const KernelInfo info(node, 1, opsets, eo);
  return kernels::shape::read_optimizer_attrs(info, *ops::find_optimizer_spec(op));
}

template <class T>
void check_case(const Case& c, int64_t t, uint32_t seed) {
  const ops::OptimizerSpec& spec = *ops::find_optimizer_spec(c.op);
  const size_t S = spec.states.size();
  std::mt19937 rng(seed);
  const DType dt = dtype_v<T>;
  const Tensor w = ot_test::random_tensor(dt, {37}, rng), g = ot_test::random_tensor(dt, {37}, rng);
  std::vector<Tensor> s;
  for (size_t k = 0; k < S; ++k) s.push_back(ot_test::random_tensor(dt, {37}, rng, k + 1 == S && S > 1 ? 0.0 : -1.0, 1.0));
  if (spec.algorithm == ops::OptimizerAlgorithm::kAdagrad) s[0] = ot_test::random_tensor(dt, {37}, rng, 0.0, 1.0);
  const float lr = 0.0625f;
  const double grad_scale = 0.37;
  std::vector<Tensor> in = {Tensor::scalar<float>(lr), Tensor::scalar<int64_t>(t), Tensor::scalar<double>(grad_scale), w, g};
  for (const Tensor& x : s) in.push_back(x);
  ot_test::RunOptions o;
  o.domain = "com.onnxtrain";
  o.num_outputs = 1 + S;
  const std::vector<Tensor> cpu = ot_test::run_node(c.op, in, c.attrs, o);

  // The rule as the CUDA kernel builds it, from the attributes as its kernel reads them.
  const kernels::shape::OptimizerAttrs at = optimizer_attrs(c.op, c.attrs);
  auto apply = [&](const auto& rule) {
    const T* W = w.data<T>();
    const T* G = g.data<T>();
    for (int64_t i = 0; i < w.numel(); ++i) {
      const T a = S > 0 ? s[0].data<T>()[i] : T(0), b = S > 1 ? s[1].data<T>()[i] : T(0);
      const Updated<T> u = apply_rule(rule, W[i], G[i], T(grad_scale), a, b);
      const T want[3] = {u.w, u.s0, u.s1};
      for (size_t k = 0; k <= S; ++k)
        ASSERT_EQ(std::memcmp(&want[k], &cpu[k].data<T>()[i], sizeof(T)), 0)
            << c.op << " " << dtype_name(dt) << " step " << t << ": output " << k << " element " << i << ": host rule "
            << want[k] << ", CPU kernel " << cpu[k].data<T>()[i] << " (seed " << seed << ")";
    }
  };
  switch (spec.algorithm) {
    case ops::OptimizerAlgorithm::kSgd: apply(sgd_rule<T>(at, lr)); break;
    case ops::OptimizerAlgorithm::kMomentum: apply(momentum_rule<T>(at, lr, t)); break;
    case ops::OptimizerAlgorithm::kAdam: apply(adam_rule<T>(at, lr, t, false)); break;
    case ops::OptimizerAlgorithm::kAdamW: apply(adam_rule<T>(at, lr, t, true)); break;
    case ops::OptimizerAlgorithm::kAdagrad: apply(adagrad_rule<T>(at, lr, t)); break;
    default: FAIL() << c.op << " has no CUDA rule";
  }
}

}  // namespace

TEST(CudaHostRules, OptimizerRulesMatchTheCpuKernelsBitForBit) {
  using ot_test::attr_float;
  using ot_test::attr_int;
  const std::vector<Case> cases = {
      {"SGDOptimizer", {}},
      {"SGDOptimizer", {attr_float("lambda", 0.01f)}},
      {"MomentumOptimizer", {attr_float("momentum", 0.8f)}},
      {"MomentumOptimizer", {attr_float("lambda", 0.02f), attr_int("nesterov", 1)}},
      {"AdamOptimizer", {}},
      {"AdamOptimizer", {attr_float("lambda", 0.25f), attr_int("do_bias_correction", 0)}},
      {"AdamWOptimizer", {}},
      {"AdamWOptimizer", {attr_float("lambda", 0.05f), attr_float("epsilon", 1e-6f)}},
      {"AdagradOptimizer", {attr_float("lr_decay", 0.1f)}},
  };
  uint32_t seed = 4100;
  for (const Case& c : cases)
    for (int64_t t : {int64_t(1), int64_t(3)}) {
      check_case<float>(c, t, seed++);
      check_case<double>(c, t, seed++);
    }
}

// LAMB on the host as the CUDA kernels compute it (optimizer_rules.h: LambRule's moments and
// direction, lamb_coef), with each tensor's norms summed chunk by chunk of 8192 as the CPU kernel
// sums them (the device sums a chunk as a tree: only the norms' last bits can differ there), must
// give the CPU LambOptimizer's weights and moments bit for bit: two tensors (one of three chunks),
// float32 and float64, with and without bias correction, weight decay and a clamped ratio.
template <class T>
void check_lamb(const std::vector<ir::Attribute>& attrs, int64_t t, uint32_t seed) {
  std::mt19937 rng(seed);
  const DType dt = dtype_v<T>;
  const std::vector<int64_t> sizes = {37, 2 * 8192 + 100};
  std::vector<Tensor> w, g, m, v;
  for (int64_t n : sizes) {
    w.push_back(ot_test::random_tensor(dt, {n}, rng));
    g.push_back(ot_test::random_tensor(dt, {n}, rng));
    m.push_back(ot_test::random_tensor(dt, {n}, rng, -0.1, 0.1));
    v.push_back(ot_test::random_tensor(dt, {n}, rng, 0.0, 0.1));
  }
  const float lr = 0.03125f;
  const double grad_scale = 0.75;
  std::vector<Tensor> in = {Tensor::scalar<float>(lr), Tensor::scalar<int64_t>(t), Tensor::scalar<double>(grad_scale)};
  for (const auto* group : {&w, &g, &m, &v}) in.insert(in.end(), group->begin(), group->end());
  ot_test::RunOptions o;
  o.domain = "com.onnxtrain";
  o.num_outputs = 6;
  const std::vector<Tensor> cpu = ot_test::run_node("LambOptimizer", in, attrs, o);
  const kernels::shape::OptimizerAttrs at = optimizer_attrs("LambOptimizer", attrs);
  const LambRule<T> rule = lamb_rule<T>(at, t);
  for (size_t k = 0; k < sizes.size(); ++k) {
    const int64_t n = sizes[k];
    std::vector<T> m2(static_cast<size_t>(n)), v2(static_cast<size_t>(n));
    double w2 = 0, r2 = 0;
    for (int64_t lo = 0; lo < n; lo += 8192) {
      double wn = 0, rn = 0;  // one chunk, in order
      for (int64_t i = lo; i < std::min<int64_t>(lo + 8192, n); ++i) {
        const T wi = w[k].data<T>()[i];
        T r;
        const Updated<T> u = rule.moments(wi, op_mul(g[k].data<T>()[i], T(grad_scale)), m[k].data<T>()[i], v[k].data<T>()[i], &r);
        m2[size_t(i)] = u.s0, v2[size_t(i)] = u.s1;
        wn = op_fma(double(wi), double(wi), wn);
        rn = op_fma(double(r), double(r), rn);
      }
      w2 += wn, r2 += rn;
    }
    const T a = T(lamb_coef(w2, r2, double(lr), at.ratio_min, at.ratio_max));
    for (int64_t i = 0; i < n; ++i) {
      const T want[3] = {rule.apply(a, m2[size_t(i)], v2[size_t(i)], w[k].data<T>()[i]), m2[size_t(i)], v2[size_t(i)]};
      for (size_t out = 0; out < 3; ++out)
        ASSERT_EQ(std::memcmp(&want[out], &cpu[out * 2 + k].data<T>()[i], sizeof(T)), 0)
            << dtype_name(dt) << " step " << t << " tensor " << k << " output " << out << " element " << i << ": host "
            << want[out] << ", CPU " << cpu[out * 2 + k].data<T>()[i] << " (seed " << seed << ")";
    }
  }
}

TEST(CudaHostRules, LambRuleMatchesTheCpuKernelBitForBit) {
  using ot_test::attr_float;
  using ot_test::attr_int;
  const std::vector<std::vector<ir::Attribute>> cases = {
      {},
      {attr_float("lambda", 0.01f), attr_int("do_bias_correction", 1)},
      {attr_float("ratio_min", 0.5f), attr_float("ratio_max", 0.75f), attr_float("epsilon", 1e-8f)},
  };
  uint32_t seed = 5200;
  for (const auto& attrs : cases)
    for (int64_t t : {int64_t(1), int64_t(4)}) {
      check_lamb<float>(attrs, t, seed++);
      check_lamb<double>(attrs, t, seed++);
    }
}

// Broadcast offsets (kernels/cuda/broadcast.h), the 32-bit and the 64-bit division paths, against
// the multi-index computed digit by digit from the most significant dim.
TEST(CudaHostRules, StridedOffsetNarrowAndWide) {
  std::mt19937 rng(77);
  auto naive = [](int64_t i, int rank, const int64_t* dims, const int64_t* strides) {
    int64_t below = 1, off = 0;
    for (int d = 0; d < rank; ++d) below *= dims[d];
    for (int d = 0; d < rank; ++d) {
      below /= dims[d];
      off += (i / below) * strides[d];
      i %= below;
    }
    return off;
  };
  for (int c = 0; c < 200; ++c) {
    const int rank = 1 + int(rng() % 5);
    int64_t dims[kMaxDims], strides[kMaxDims], n = 1;
    for (int d = 0; d < rank; ++d) dims[d] = 1 + int64_t(rng() % 9), strides[d] = int64_t(rng() % 50), n *= dims[d];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t want = naive(i, rank, dims, strides);
      ASSERT_EQ(strided_offset(i, rank, dims, strides, true), want) << c << " " << i;
      ASSERT_EQ(strided_offset(i, rank, dims, strides, false), want) << c << " " << i;
    }
  }
  // Near 2^32 elements (narrow holds below it) and beyond (only the 64-bit path).
  const int64_t big[2] = {65536, 65535}, st[2] = {1, 70000};
  for (int64_t i : {int64_t(0), int64_t(65534), int64_t(65535) * 65536 - 1, int64_t(4000000000)})
    EXPECT_EQ(strided_offset(i, 2, big, st, true), naive(i, 2, big, st)) << i;
  const int64_t huge[2] = {100000, 100000};
  for (int64_t i : {int64_t(0), int64_t(9999999999), int64_t(5000000001)})
    EXPECT_EQ(strided_offset(i, 2, huge, st, false), naive(i, 2, huge, st)) << i;
}

// Which operands the four-at-a-time elementwise kernels read with one access (quad_read), and the
// premise each class rests on, checked against Bcast::offset for every group of four outputs:
// kQuadSame and kQuadRow read four consecutive, aligned elements, kQuadSpread one for the four.
TEST(CudaHostRules, QuadReadsMatchTheOffsets) {
  alignas(64) static float buf[64];
  struct Case {
    Shape out, a, b;
    int how_b;
  };
  const std::vector<Case> cases = {
      {{4, 8}, {4, 8}, {4, 8}, kQuadSame},     {{4, 8}, {4, 8}, {8}, kQuadRow},
      {{4, 8}, {4, 8}, {4, 1}, kQuadSpread},   {{4, 8}, {4, 8}, {1}, kQuadOne},
      {{4, 6}, {4, 6}, {6}, kQuadNone},        {{2, 3, 8}, {2, 3, 8}, {3, 8}, kQuadRow},
      {{2, 3, 8}, {2, 3, 8}, {2, 1, 8}, kQuadRow}, {{2, 3, 4}, {2, 3, 4}, {2, 3, 1}, kQuadSpread},
      {{3, 4, 2}, {3, 4, 2}, {3, 1, 2}, kQuadNone}};
  for (const Case& c : cases) {
    Bcast g;
    ASSERT_TRUE(make_bcast(c.out, {c.a, c.b}, &g));
    EXPECT_EQ(quad_read(g, 0, buf, sizeof(float)), kQuadSame) << shape_to_string(c.b);
    const int how = quad_read(g, 1, buf, sizeof(float));
    EXPECT_EQ(how, c.how_b) << shape_to_string(c.out) << " " << shape_to_string(c.b);
    if (how == kQuadSame || how == kQuadRow) {
      EXPECT_EQ(quad_read(g, 1, buf + 1, sizeof(float)), kQuadNone);
    }
    const int64_t n = shape_numel(c.out);
    for (int64_t e = 0; e + 3 < n && how != kQuadNone; e += 4)
      for (int64_t j = 0; j < 4; ++j) {
        const int64_t want = how == kQuadSame ? e + j : how == kQuadOne ? 0 : g.offset(1, e + j);
        const int64_t got = how == kQuadSame ? e + j : how == kQuadOne ? 0 : g.offset(1, e) + (how == kQuadRow ? j : 0);
        ASSERT_EQ(got, want) << shape_to_string(c.b) << " at " << e + j;
        if (how == kQuadRow) {
          EXPECT_EQ(g.offset(1, e) % 4, 0);
        }
      }
  }
}
// cuDNN's convolution descriptors (kernels/cuda/cudnn.h: host objects, made without a device) for
// the geometries the Conv tests use: cuDNN's own output-shape computation must give the node's
// output (shape/window.h) for 1-D (as 2-D of height 1), 2-D and 3-D convolutions with strides,
// dilations, symmetric pads, auto_pad and groups, in every float type; what cuDNN cannot take
// (asymmetric pads, ConvTranspose, empty channels) is declined with the reason.
TEST(CudaHostRules, CudnnDescribesTheConvolutionGeometry) {
  std::string why;
  const CudnnApi* a = cudnn_api(&why);
  if (!a) GTEST_SKIP() << why;
  struct Case {
    Shape x, w;
    std::vector<ir::Attribute> attrs;
    std::string refusal;  // empty: cuDNN takes it
  };
  using ot_test::attr_int;
  using ot_test::attr_ints;
  using ot_test::attr_string;
  const std::vector<Case> cases = {
      {{2, 3, 9}, {4, 3, 3}, {}, ""},
      {{2, 4, 11}, {6, 2, 3}, {attr_int("group", 2), attr_ints("strides", {2}), attr_ints("pads", {1, 1})}, ""},
      {{1, 3, 10}, {2, 3, 4}, {attr_ints("dilations", {3})}, ""},
      {{2, 3, 7, 6}, {5, 3, 3, 3}, {attr_ints("pads", {1, 1, 1, 1})}, ""},
      {{2, 6, 9, 8}, {6, 1, 3, 3}, {attr_int("group", 6), attr_ints("strides", {2, 2}), attr_ints("pads", {1, 1, 1, 1})}, ""},
      {{1, 4, 12, 10}, {8, 4, 3, 2}, {attr_ints("dilations", {2, 3}), attr_ints("strides", {1, 2})}, ""},
      {{2, 3, 8, 8}, {4, 3, 3, 3}, {attr_string("auto_pad", "SAME_UPPER")}, ""},
      {{2, 3, 8, 8}, {4, 3, 2, 2}, {attr_string("auto_pad", "SAME_UPPER")}, "asymmetric pads"},
      {{2, 3, 8, 8}, {4, 3, 3, 3}, {attr_ints("pads", {0, 1, 1, 0})}, "asymmetric pads"},
      {{1, 2, 5, 6, 7}, {3, 2, 2, 3, 3}, {attr_ints("pads", {1, 1, 1, 1, 1, 1}), attr_ints("strides", {1, 2, 2})}, ""},
      {{2, 0, 5, 5}, {4, 0, 3, 3}, {}, "empty"},
  };
  for (const Case& c : cases)
    for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64}) {
      ir::Node node = ot_test::make_node("Conv", {"x", "w"}, {"y"}, c.attrs);
      const OpsetMap opsets{{"", 17}};
      const ExecOptions eo;
      const KernelInfo info(node, 17, opsets, eo);
      kernels::shape::ConvShape p;
      p.read(info, false);
      std::vector<PrepareContext::In> ins = {{.kind = Value::Kind::kTensor, .dtype = dt, .shape = c.x, .value = nullptr},
                                             {.kind = Value::Kind::kTensor, .dtype = dt, .shape = c.w, .value = nullptr}};
      PrepareContext ctx(node, 17, eo, ins, 1);
      p.resolve(ctx, c.x, c.w);
      ConvDescs d;
      const std::string got = d.make(*a, p, c.x, c.w, dt);
      const std::string at = shape_to_string(c.x) + " * " + shape_to_string(c.w) + " " + dtype_name(dt);
      if (c.refusal.empty()) {
        EXPECT_EQ(got, "") << at << " -> " << shape_to_string(p.y);
        EXPECT_EQ(d.strict, dt == DType::kFloat32 && !tf32_allowed()) << at;
      } else {
        EXPECT_NE(got.find(c.refusal), std::string::npos) << at << ": " << got;
      }
    }
}
// The CUDA pooling kernels' per-element bodies (kernels/cuda/pool_rules.h) run here over every
// output and input must give the CPU provider's MaxPool (value and Indices), AveragePool and their
// gradients: bit for bit in float64 (the CPU's loops; the same terms in the same order), within
// 1e-6 in float32 where the CPU runs oneDNN. Geometries: 1-D to 3-D, strides, dilations, asymmetric
// pads, ceil_mode, count_include_pad, the global pools; inputs with many ties (values on a grid of
// 0.5, half of them 0, as after a ReLU) so that "the first maximum" is exercised.
TEST(CudaHostRules, PoolingBodiesMatchTheCpuKernels) {
  using ot_test::attr_int;
  using ot_test::attr_ints;
  struct Case {
    Shape x;
    std::vector<ir::Attribute> attrs;
    bool global = false;
  };
  const std::vector<Case> cases = {
      {{2, 3, 11}, {attr_ints("kernel_shape", {3}), attr_ints("strides", {2})}},
      {{1, 2, 9}, {attr_ints("kernel_shape", {2}), attr_ints("dilations", {3}), attr_ints("pads", {1, 2})}},
      {{2, 2, 8, 7}, {attr_ints("kernel_shape", {3, 3}), attr_ints("strides", {2, 2}), attr_ints("pads", {1, 1, 1, 1})}},
      {{1, 3, 7, 9}, {attr_ints("kernel_shape", {2, 3}), attr_ints("strides", {2, 1}), attr_ints("pads", {0, 1, 1, 2}),
                      attr_int("ceil_mode", 1), attr_int("count_include_pad", 1)}},
      {{1, 2, 10, 10}, {attr_ints("kernel_shape", {3, 2}), attr_ints("dilations", {2, 2}), attr_int("ceil_mode", 1)}},
      {{1, 2, 4, 5, 6}, {attr_ints("kernel_shape", {2, 2, 3}), attr_ints("strides", {1, 2, 2}),
                         attr_ints("pads", {1, 0, 1, 0, 1, 1}), attr_int("count_include_pad", 1)}},
      {{2, 3, 5, 4}, {}, true},
  };
  std::mt19937 rng(7);
  for (const Case& c : cases)
    for (DType dt : {DType::kFloat64, DType::kFloat32})
      for (const char* kind : {"Max", "Average"}) {
        const bool max = kind[0] == 'M';
        const std::string op = std::string(c.global ? "Global" : "") + kind + "Pool";
        std::vector<double> xv(size_t(shape_numel(c.x)));
        for (double& v : xv) v = std::uniform_int_distribution<int>(0, 1)(rng) ? 0.5 * std::uniform_int_distribution<int>(-3, 6)(rng) : 0.0;
        const Tensor x = ot_test::from_double(dt, c.x, xv);
        std::vector<ir::Attribute> attrs = c.attrs;
        // The CPU's loops (not oneDNN) compute MaxPool when Indices are asked for.
        ot_test::RunOptions fo;
        fo.num_outputs = max && !c.global ? 2 : 1;
        const std::vector<Tensor> cpu = ot_test::run_node(op, {x}, attrs, fo);
        const Tensor& y = cpu[0];
        ir::Node node = ot_test::make_node(op, {"x"}, {"y"}, attrs);
        const OpsetMap opsets{{"", 17}};
        const ExecOptions eo;
        const KernelInfo info(node, 17, opsets, eo);
        kernels::shape::PoolShape p;
        p.read(info, max ? kernels::shape::PoolKind::kMax : kernels::shape::PoolKind::kAvg, c.global, false);
        std::vector<PrepareContext::In> ins = {{.kind = Value::Kind::kTensor, .dtype = dt, .shape = c.x, .value = nullptr}};
        PrepareContext ctx(node, 17, eo, ins, 1);
        p.resolve(ctx, c.x);
        const PoolGeo g = pool_geo(p.g);
        const std::string at = op + " " + shape_to_string(c.x) + " " + dtype_name(dt);
        const double tol = dt == DType::kFloat64 ? 0.0 : 1e-6;
        const std::vector<double> yc = ot_test::to_double(y);
        std::vector<int64_t> arg(size_t(y.numel()));
        auto body = [&]<class T>() {
          const auto ld = [](const T* q, int64_t j) { return q[j]; };
          const T* xp = x.data<T>();
          for (int64_t i = 0; i < y.numel(); ++i) {
            T v;
            if (max) {
              arg[size_t(i)] = max_pool_at(g, xp, i, ld, &v);
              if (!c.global) {
                ASSERT_EQ(cpu[1].data<int64_t>()[i], (i / g.pout) * g.pin + arg[size_t(i)]) << at << " Indices at " << i;
              }
            } else {
              v = avg_pool_at<T>(g, xp, i, p.include_pad, ld);
            }
            ASSERT_NEAR(double(v), yc[size_t(i)], tol * std::max(1.0, std::abs(yc[size_t(i)]))) << at << " at " << i;
          }
          // The gradients, dY random.
          const Tensor dy = ot_test::random_tensor(dt, y.shape(), rng);
          for (bool relu : {false, true}) {
            if (relu && (!max || c.global)) continue;
            std::vector<ir::Attribute> ga = attrs;
            if (relu) ga.push_back(attr_int("relu_mask", 1));
            ot_test::RunOptions go;
            go.domain = "com.onnxtrain";
            const std::vector<double> dxc = ot_test::to_double(ot_test::run_node(op + "Grad", {dy, x}, ga, go)[0]);
            for (int64_t i = 0; i < x.numel(); ++i) {
              const T v = max ? max_pool_grad_at<T>(g, xp, dy.data<T>(), arg.data(), i, relu, ld)
                              : avg_pool_grad_at<T>(g, dy.data<T>(), i, p.include_pad, ld);
              ASSERT_NEAR(double(v), dxc[size_t(i)], tol * std::max(1.0, std::abs(dxc[size_t(i)])))
                  << at << " gradient" << (relu ? " (relu_mask)" : "") << " at " << i;
            }
          }
        };
        if (dt == DType::kFloat64) body.template operator()<double>();
        else body.template operator()<float>();
      }
}
#endif  // ONNXTRAIN_WITH_CUDA
