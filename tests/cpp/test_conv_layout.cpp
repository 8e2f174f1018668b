// The inference sessions' blocked activation layout (runtime::block_conv_layouts, src/runtime/
// conv_fusion.cpp; kernels com.onnxtrain NchwcConv, ReorderToNchwc, ReorderFromNchwc, NchwcMaxPool,
// NchwcAveragePool, NchwcGlobalAveragePool, NchwcChannels): which nodes the pass rewrites, and the sessions at
// kEnableAll against kDisableAll and a naive double-precision reference.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>

#include "core/parallel.h"
#include "ir/onnx_io.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/nchwc_direct.h"
#include "onnxtrain/session.h"
#include "ops/onnxtrain_ops.h"
#include "runtime/conv_fusion.h"
#include "test_util.h"

using namespace ot_test;
using onnxtrain::GraphOptimizationLevel;
using onnxtrain::InferenceSession;
using onnxtrain::SessionOptions;

namespace {

struct Builder {
  ir::Model m;
  std::map<std::string, std::vector<double>> values;
  std::mt19937 rng{21};

  Builder() {
    m.opsets[""] = 17;
    m.graph = std::make_shared<ir::Graph>();
  }
  void input(const std::string& name, const Shape& s) { m.graph->inputs.push_back(value_info(name, DType::kFloat32, s)); }
  void output(const std::string& name) { m.graph->outputs.push_back(value_info(name)); }
  std::string init(const std::string& name, const Shape& s) {
    Tensor t = random_tensor(DType::kFloat32, s, rng);
    values[name] = to_double(t);
    m.graph->initializers.emplace_back(name, t);
    return name;
  }
  // Conv of square kernel k, stride s, pad p (bias included), M output channels over C inputs.
  void conv(const std::string& x, const std::string& y, int64_t C, int64_t M, int64_t k, int64_t s, int64_t p,
            int64_t group = 1) {
    const std::string w = init(y + "_w", {M, C / group, k, k}), b = init(y + "_b", {M});
    m.graph->nodes.push_back(make_node("Conv", {x, w, b}, {y},
                                       {attr_ints("strides", {s, s}), attr_ints("pads", {p, p, p, p}),
                                        attr_int("group", group)}));
  }
  void node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
            std::vector<ir::Attribute> attrs = {}) {
    m.graph->nodes.push_back(make_node(op, std::move(in), std::move(out), std::move(attrs)));
  }
  // Op types after the inference passes (on a copy).
  std::map<std::string, int> rewritten_ops() const {
    ir::Model c = m;
    c.graph = std::make_shared<ir::Graph>(*m.graph);
    onnxtrain::runtime::fuse_conv_activations(c);
    onnxtrain::runtime::block_conv_layouts(c);
    std::map<std::string, int> ops;
    for (const auto& n : c.graph->nodes) ++ops[n.op_type];
    return ops;
  }
};

SessionOptions options(GraphOptimizationLevel level, int threads,
                       std::vector<std::pair<std::string, std::string>> config = {}) {
  SessionOptions o;
  o.graph_optimization_level = level;
  o.intra_op_num_threads = threads;
  o.config_entries = std::move(config);
  return o;
}

InferenceSession session(const std::string& bytes, GraphOptimizationLevel level, int threads,
                         std::vector<std::pair<std::string, std::string>> config = {}) {
  const SessionOptions o = options(level, threads, std::move(config));
  return InferenceSession(bytes.data(), bytes.size(), o);
}

// Conv in double over [N, C, H, W] (square kernel, stride, pad, groups), with bias.
std::vector<double> ref_conv(const std::vector<double>& x, const Shape& xs, const std::vector<double>& w,
                             const std::vector<double>& b, int64_t M, int64_t k, int64_t s, int64_t p, int64_t G,
                             Shape* ys) {
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
  const int64_t Cg = C / G, Mg = M / G;
  *ys = {N, M, OH, OW};
  std::vector<double> y(size_t(N * M * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double acc = b[size_t(m)];
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t u = 0; u < k; ++u)
              for (int64_t v = 0; v < k; ++v) {
                const int64_t r = i * s - p + u, q = j * s - p + v;
                if (r < 0 || r >= H || q < 0 || q >= W) continue;
                acc += x[size_t(((n * C + (m / Mg) * Cg + c) * H + r) * W + q)] * w[size_t(((m * Cg + c) * k + u) * k + v)];
              }
          y[size_t(((n * M + m) * OH + i) * OW + j)] = acc;
        }
  return y;
}

void relu(std::vector<double>& v) {
  for (double& e : v) e = std::max(e, 0.0);
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double e : v) m = std::max(m, std::abs(e));
  return m;
}

// Runs the model at kEnableAll and kDisableAll at 1 and 2 threads on x and compares every output
// with the unoptimized session's and with refs[k] (of shapes[k]) to 1e-5 relative + 1e-5 of the
// largest reference value.
void expect_outputs(const std::string& bytes, const Tensor& x, const std::vector<std::vector<double>>& refs,
                    const std::vector<Shape>& shapes) {
  for (int threads : {1, 2}) {
    InferenceSession fast = session(bytes, GraphOptimizationLevel::kEnableAll, threads);
    InferenceSession plain = session(bytes, GraphOptimizationLevel::kDisableAll, threads);
    const auto yf = fast.run({}, {{"x", x}}), yp = plain.run({}, {{"x", x}});
    ASSERT_EQ(yf.size(), refs.size());
    for (size_t k = 0; k < refs.size(); ++k) {
      const double atol = 1e-5 * max_abs(refs[k]);
      EXPECT_TRUE(all_close(yf[k], yp[k].shape(), to_double(yp[k]), 1e-5, atol)) << threads << " " << k;
      EXPECT_TRUE(all_close(yf[k], shapes[k], refs[k], 1e-5, atol)) << threads << " " << k;
    }
  }
}

}  // namespace

// Conv(3 -> 24) + Relu reads the plain input, Conv(24 -> 40) + Relu, a residual Conv(40 -> 40) +
// Add + Relu, MaxPool with a window wider than the input (the plain loops' fallback), AveragePool,
// GlobalAveragePool, and two graph outputs, one mid-chain and one read by Transpose too.
TEST(ConvLayout, OddChannelChainMatchesReferenceAndUnoptimized) {
  Builder b;
  const Shape xs{2, 3, 11, 9};
  b.input("x", xs);
  b.conv("x", "c1", 3, 24, 3, 1, 1);
  b.node("Relu", {"c1"}, {"r1"});
  b.conv("r1", "c2", 24, 40, 3, 2, 1);
  b.node("Relu", {"c2"}, {"r2"});
  b.conv("r2", "c3", 40, 40, 1, 1, 0);
  b.node("Add", {"c3", "r2"}, {"a3"});
  b.node("Relu", {"a3"}, {"r3"});
  b.node("AveragePool", {"r3"}, {"p1"}, {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {1, 1})});
  b.node("MaxPool", {"p1"}, {"p2"}, {attr_ints("kernel_shape", {7, 7}), attr_ints("pads", {3, 3, 3, 3})});
  b.node("GlobalAveragePool", {"p2"}, {"g"});
  b.node("Transpose", {"r2"}, {"t"}, {attr_ints("perm", {0, 1, 3, 2})});
  b.output("g"), b.output("r2"), b.output("t");
  const auto ops = b.rewritten_ops();
  EXPECT_EQ(ops.at("NchwcConv"), 3);
  EXPECT_EQ(ops.at("NchwcMaxPool"), 1);
  EXPECT_EQ(ops.at("NchwcAveragePool"), 1);
  EXPECT_EQ(ops.at("NchwcGlobalAveragePool"), 1);
  EXPECT_EQ(ops.at("ReorderFromNchwc"), 2);  // g, and r2 (graph output and Transpose's input)
  EXPECT_EQ(ops.count("ReorderToNchwc"), 0u);  // 3 input channels: the first Conv reads them plain
  EXPECT_EQ(ops.count("Conv") + ops.count("FusedConv") + ops.count("MaxPool"), 0u);

  std::mt19937 rng(4);
  const Tensor x = random_tensor(DType::kFloat32, xs, rng);
  // The reference in double.
  Shape s1, s2, s3;
  auto r1 = ref_conv(to_double(x), xs, b.values["c1_w"], b.values["c1_b"], 24, 3, 1, 1, 1, &s1);
  relu(r1);
  auto r2 = ref_conv(r1, s1, b.values["c2_w"], b.values["c2_b"], 40, 3, 2, 1, 1, &s2);
  relu(r2);
  auto r3 = ref_conv(r2, s2, b.values["c3_w"], b.values["c3_b"], 40, 1, 1, 0, 1, &s3);
  for (size_t i = 0; i < r3.size(); ++i) r3[i] = std::max(r3[i] + r2[i], 0.0);
  const int64_t N = s3[0], C = s3[1], H = s3[2], W = s3[3];
  std::vector<double> g(size_t(N * C));
  for (int64_t nc = 0; nc < N * C; ++nc) {
    // AveragePool 2x2 stride 1 -> [H-1, W-1]; MaxPool 7x7 pad 3 over it; the global mean.
    const int64_t PH = H - 1, PW = W - 1;
    std::vector<double> p1(size_t(PH * PW));
    for (int64_t i = 0; i < PH; ++i)
      for (int64_t j = 0; j < PW; ++j) {
        const double* a = &r3[size_t(nc * H * W)];
        p1[size_t(i * PW + j)] = (a[i * W + j] + a[i * W + j + 1] + a[(i + 1) * W + j] + a[(i + 1) * W + j + 1]) / 4;
      }
    double sum = 0;
    for (int64_t i = 0; i < PH; ++i)
      for (int64_t j = 0; j < PW; ++j) {
        double mx = -1e300;
        for (int64_t u = std::max<int64_t>(0, i - 3); u <= std::min(PH - 1, i + 3); ++u)
          for (int64_t v = std::max<int64_t>(0, j - 3); v <= std::min(PW - 1, j + 3); ++v) mx = std::max(mx, p1[size_t(u * PW + v)]);
        sum += mx;
      }
    g[size_t(nc)] = sum / double(PH * PW);
  }
  const std::string bytes = ir::serialize_model(b.m);
  for (int threads : {1, 2}) {
    InferenceSession fast = session(bytes, GraphOptimizationLevel::kEnableAll, threads);
    InferenceSession plain = session(bytes, GraphOptimizationLevel::kDisableAll, threads);
    const auto yf = fast.run({}, {{"x", x}}), yp = plain.run({}, {{"x", x}});
    ASSERT_EQ(yf.size(), 3u);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_TRUE(all_close(yf[i], yp[i].shape(), to_double(yp[i]), 1e-5, 1e-5)) << "output " << i << ", " << threads;
    EXPECT_TRUE(all_close(yf[0], {N, C, 1, 1}, g, 1e-5, 1e-5));
    EXPECT_TRUE(all_close(yf[1], s2, r2, 1e-5, 1e-5));
  }
}

// A SqueezeNet-style Concat of two convolutions (16-channel multiples: stays blocked), a depthwise
// and a 16-channel-group convolution (blocked) and an 8-channel-group one (plain: the chain ends and
// a later convolution starts another through ReorderToNchwc).
TEST(ConvLayout, ConcatAndGroupedConvolutions) {
  Builder b;
  const Shape xs{3, 16, 10, 10};
  b.input("x", xs);
  b.conv("x", "s", 16, 16, 1, 1, 0);
  b.conv("s", "e1", 16, 32, 1, 1, 0);
  b.conv("s", "e3", 16, 16, 3, 1, 1);
  b.node("Concat", {"e1", "e3"}, {"cat"}, {attr_int("axis", 1)});
  b.conv("cat", "dw", 48, 48, 3, 2, 1, 48);
  b.conv("dw", "g16", 48, 48, 3, 1, 1, 3);
  b.conv("g16", "g8", 48, 48, 3, 1, 1, 6);
  b.conv("g8", "last", 48, 32, 3, 1, 1);
  b.output("last");
  const auto ops = b.rewritten_ops();
  EXPECT_EQ(ops.at("NchwcConv"), 6);
  EXPECT_EQ(ops.at("Conv"), 1);
  EXPECT_EQ(ops.at("Concat"), 1);
  EXPECT_EQ(ops.at("ReorderToNchwc"), 2);  // x, g8
  EXPECT_EQ(ops.at("ReorderFromNchwc"), 2);  // g16 for g8, last
  std::mt19937 rng(8);
  const Tensor x = random_tensor(DType::kFloat32, xs, rng);
  Shape ss, s1, s3, sd, s16, s8, sl;
  const auto rs = ref_conv(to_double(x), xs, b.values["s_w"], b.values["s_b"], 16, 1, 1, 0, 1, &ss);
  const auto r1 = ref_conv(rs, ss, b.values["e1_w"], b.values["e1_b"], 32, 1, 1, 0, 1, &s1);
  const auto r3 = ref_conv(rs, ss, b.values["e3_w"], b.values["e3_b"], 16, 3, 1, 1, 1, &s3);
  std::vector<double> cat;
  const int64_t plane = s1[2] * s1[3];
  for (int64_t n = 0; n < xs[0]; ++n) {
    cat.insert(cat.end(), r1.begin() + n * 32 * plane, r1.begin() + (n + 1) * 32 * plane);
    cat.insert(cat.end(), r3.begin() + n * 16 * plane, r3.begin() + (n + 1) * 16 * plane);
  }
  const auto rd = ref_conv(cat, {xs[0], 48, s1[2], s1[3]}, b.values["dw_w"], b.values["dw_b"], 48, 3, 2, 1, 48, &sd);
  const auto r16 = ref_conv(rd, sd, b.values["g16_w"], b.values["g16_b"], 48, 3, 1, 1, 3, &s16);
  const auto r8 = ref_conv(r16, s16, b.values["g8_w"], b.values["g8_b"], 48, 3, 1, 1, 6, &s8);
  const auto rl = ref_conv(r8, s8, b.values["last_w"], b.values["last_b"], 32, 3, 1, 1, 1, &sl);
  // Five float32 layers of random weights: outputs of ~100 from sums of terms of ~1000, so the
  // tolerances scale with the largest output (float32 rounding of the sums, in oneDNN's orders).
  double scale = 0;
  for (double v : rl) scale = std::max(scale, std::abs(v));
  const std::string bytes = ir::serialize_model(b.m);
  for (int threads : {1, 2}) {
    InferenceSession fast = session(bytes, GraphOptimizationLevel::kEnableAll, threads);
    InferenceSession plain = session(bytes, GraphOptimizationLevel::kDisableAll, threads);
    const Tensor yf = fast.run({}, {{"x", x}})[0], yp = plain.run({}, {{"x", x}})[0];
    EXPECT_TRUE(all_close(yf, yp.shape(), to_double(yp), 1e-5, 2e-5 * scale)) << threads;
    EXPECT_TRUE(all_close(yf, sl, rl, 1e-5, 2e-5 * scale)) << threads;
  }
}

// ShuffleNet-v2's channel arithmetic on 20 + 20 channels (no multiple of 16): a Concat, the channel
// shuffle (Reshape [N, 2, 20, H, W] -> Transpose 0 2 1 3 4 -> Reshape), the chunk's two Slices, a
// convolution of the second and the Concat of the first with it. All of it runs blocked as
// com.onnxtrain NchwcChannels gathers composed through one another: the gather of the convolved
// Slice and the second Concat's are the only two that run.
TEST(ConvLayout, ShuffleConcatAndSlicesBecomeGathers) {
  Builder b;
  const Shape xs{2, 16, 7, 7};
  b.input("x", xs);
  b.conv("x", "c1", 16, 20, 1, 1, 0);
  b.conv("x", "c2", 16, 20, 3, 1, 1);
  b.node("Concat", {"c1", "c2"}, {"cat"}, {attr_int("axis", 1)});
  auto ints = [&](const std::string& name, std::vector<int64_t> v) {
    const int64_t n = int64_t(v.size());
    b.m.graph->initializers.emplace_back(name, Tensor::from_vector<int64_t>({n}, std::move(v)));
    return name;
  };
  b.node("Reshape", {"cat", ints("split_shape", {2, 2, 20, 7, 7})}, {"r"});
  b.node("Transpose", {"r"}, {"t"}, {attr_ints("perm", {0, 2, 1, 3, 4})});
  b.node("Reshape", {"t", ints("flat_shape", {2, 40, 7, 7})}, {"sh"});
  b.node("Slice", {"sh", ints("s0", {0}), ints("e0", {20}), ints("ax", {1})}, {"s1"});
  b.node("Slice", {"sh", ints("s1b", {-20}), ints("e1", {1000}), ints("ax1", {-3})}, {"s2"});
  b.conv("s2", "c3", 20, 20, 3, 1, 1);
  b.node("Concat", {"s1", "c3"}, {"cat2"}, {attr_int("axis", 1)});
  b.conv("cat2", "out", 40, 24, 1, 1, 0);
  b.output("out");
  const auto ops = b.rewritten_ops();
  EXPECT_EQ(ops.at("NchwcConv"), 4);
  EXPECT_EQ(ops.at("NchwcChannels"), 2);
  for (const char* gone : {"Concat", "Reshape", "Transpose", "Slice", "Conv"}) EXPECT_EQ(ops.count(gone), 0u) << gone;
  EXPECT_EQ(ops.at("ReorderToNchwc"), 1);    // x
  EXPECT_EQ(ops.at("ReorderFromNchwc"), 1);  // out

  std::mt19937 rng(6);
  const Tensor x = random_tensor(DType::kFloat32, xs, rng);
  Shape s1, s2, s3, so;
  const auto r1 = ref_conv(to_double(x), xs, b.values["c1_w"], b.values["c1_b"], 20, 1, 1, 0, 1, &s1);
  const auto r2 = ref_conv(to_double(x), xs, b.values["c2_w"], b.values["c2_b"], 20, 3, 1, 1, 1, &s2);
  const int64_t N = 2, plane = 49;
  // Channel c of the concatenation of a (ca channels) and b; shuffled channel k 2 + g is cat's g 20 + k.
  auto channel = [&](const std::vector<double>& a, int64_t ca, const std::vector<double>& bb, int64_t cb, int64_t n, int64_t c) {
    return c < ca ? &a[size_t((n * ca + c) * plane)] : &bb[size_t((n * cb + c - ca) * plane)];
  };
  std::vector<double> sh(size_t(N * 40 * plane));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < 20; ++k)
      for (int64_t g = 0; g < 2; ++g)
        std::copy_n(channel(r1, 20, r2, 20, n, g * 20 + k), plane, &sh[size_t((n * 40 + k * 2 + g) * plane)]);
  std::vector<double> first(size_t(N * 20 * plane)), second(first.size());
  for (int64_t n = 0; n < N; ++n) {
    std::copy_n(&sh[size_t(n * 40 * plane)], 20 * plane, &first[size_t(n * 20 * plane)]);
    std::copy_n(&sh[size_t((n * 40 + 20) * plane)], 20 * plane, &second[size_t(n * 20 * plane)]);
  }
  const auto r3 = ref_conv(second, {N, 20, 7, 7}, b.values["c3_w"], b.values["c3_b"], 20, 3, 1, 1, 1, &s3);
  std::vector<double> cat2(size_t(N * 40 * plane));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < 40; ++c) std::copy_n(channel(first, 20, r3, 20, n, c), plane, &cat2[size_t((n * 40 + c) * plane)]);
  const auto ro = ref_conv(cat2, {N, 40, 7, 7}, b.values["out_w"], b.values["out_b"], 24, 1, 1, 0, 1, &so);
  expect_outputs(ir::serialize_model(b.m), x, {ro}, {so});
}

// What stays plain: a Clip whose range excludes 0 (it would write the padded channels), a Sigmoid,
// an Add that broadcasts, float64; a model without convolutions is untouched. (Add(c, c) is no
// fusion: the Conv output has two readers; it stays blocked, same-shaped.)
TEST(ConvLayout, LeavesWhatItMust) {
  Builder b;
  b.input("x", {1, 16, 6, 6});
  b.conv("x", "c1", 16, 16, 3, 1, 1);
  b.node("Add", {"c1", "c1"}, {"d"});
  b.m.graph->initializers.emplace_back("lo", Tensor::from_vector<float>({}, {0.1f}));
  b.node("Clip", {"d", "lo", ""}, {"k"});  // Clip(0) = 0.1
  b.node("Sigmoid", {"k"}, {"s"});
  b.node("Add", {"s", b.init("bias", {16, 1, 1})}, {"a"});
  b.output("a");
  const auto ops = b.rewritten_ops();
  EXPECT_EQ(ops.at("NchwcConv"), 1);
  EXPECT_EQ(ops.at("Add"), 2);
  EXPECT_EQ(ops.at("Clip"), 1);
  EXPECT_EQ(ops.at("ReorderToNchwc"), 1);
  EXPECT_EQ(ops.at("ReorderFromNchwc"), 1);
  Builder none;
  none.input("x", {1, 4});
  none.node("Relu", {"x"}, {"y"});
  none.output("y");
  EXPECT_EQ(none.rewritten_ops(), (std::map<std::string, int>{{"Relu", 1}}));
  ir::Model m = b.m;
  m.graph = std::make_shared<ir::Graph>(*b.m.graph);
  m.graph->inputs[0].type = ir::TypeInfo::tensor(DType::kFloat64, {1, 16, 6, 6});
  std::mt19937 r64(1);
  for (auto& [name, t] : m.graph->initializers) t = random_tensor(DType::kFloat64, t.shape(), r64);
  EXPECT_EQ(onnxtrain::runtime::block_conv_layouts(m), 0u);
  std::mt19937 rng(2);
  const Tensor x = random_tensor(DType::kFloat32, {1, 16, 6, 6}, rng);
  const std::string bytes = ir::serialize_model(b.m);
  const Tensor yf = session(bytes, GraphOptimizationLevel::kEnableAll, 1).run({}, {{"x", x}})[0];
  const Tensor yp = session(bytes, GraphOptimizationLevel::kDisableAll, 1).run({}, {{"x", x}})[0];
  EXPECT_TRUE(all_close(yf, yp.shape(), to_double(yp), 1e-5, 1e-6));
}

// EfficientNet's patterns: SiLU as Mul(c, Sigmoid(c)) over 24 channels (8 padded) folded into the
// convolution (its SiLU activation), a squeeze-and-excitation scale Mul(a, Sigmoid(Conv(
// GlobalAveragePool(a)))) broadcast from [N, C, 1, 1], blocked; a Sigmoid read by a Conv stays
// behind a ReorderFromNchwc (its padded channels are not zero), against a double reference and the
// unoptimized session.
TEST(ConvLayout, SigmoidGatesStayBlocked) {
  Builder b;
  const Shape xs{2, 16, 6, 6};
  b.input("x", xs);
  b.conv("x", "c1", 16, 24, 3, 1, 1);
  b.node("Sigmoid", {"c1"}, {"s1"});
  b.node("Mul", {"c1", "s1"}, {"a"});
  b.node("GlobalAveragePool", {"a"}, {"g"});
  b.conv("g", "e", 24, 24, 1, 1, 0);
  b.node("Sigmoid", {"e"}, {"se"});
  b.node("Mul", {"a", "se"}, {"y"});
  b.conv("y", "c2", 24, 16, 3, 1, 1);
  b.node("Sigmoid", {"c2"}, {"t"});
  b.conv("t", "c3", 16, 16, 1, 1, 0);
  b.output("c2");
  b.output("c3");
  const auto ops = b.rewritten_ops();
  EXPECT_EQ(ops.at("NchwcConv"), 3);  // c1, e, c2
  EXPECT_EQ(ops.at("Conv"), 1);       // c3 reads the Sigmoid plain
  EXPECT_EQ(ops.at("Sigmoid"), 2);   // se, t: s1 and its Mul are c1's SiLU
  EXPECT_EQ(ops.at("Mul"), 1);
  EXPECT_EQ(ops.at("ReorderToNchwc"), 1);    // x
  EXPECT_EQ(ops.at("ReorderFromNchwc"), 2);  // c2 (graph output), t (for c3)
  auto sigmoid = [](std::vector<double> v) {
    for (double& e : v) e = 1 / (1 + std::exp(-e));
    return v;
  };
  std::mt19937 rng(5);
  const Tensor x = random_tensor(DType::kFloat32, xs, rng);
  Shape s1, se, s2, s3;
  const auto c1 = ref_conv(to_double(x), xs, b.values["c1_w"], b.values["c1_b"], 24, 3, 1, 1, 1, &s1);
  const auto sg = sigmoid(c1);
  std::vector<double> a(c1.size()), g(size_t(s1[0] * 24));
  const int64_t plane = s1[2] * s1[3];
  for (size_t i = 0; i < a.size(); ++i) a[i] = c1[i] * sg[i];
  for (size_t i = 0; i < a.size(); ++i) g[i / size_t(plane)] += a[i] / double(plane);
  const auto e = sigmoid(ref_conv(g, {s1[0], 24, 1, 1}, b.values["e_w"], b.values["e_b"], 24, 1, 1, 0, 1, &se));
  std::vector<double> y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] * e[i / size_t(plane)];
  const auto c2 = ref_conv(y, s1, b.values["c2_w"], b.values["c2_b"], 16, 3, 1, 1, 1, &s2);
  const auto c3 = ref_conv(sigmoid(c2), s2, b.values["c3_w"], b.values["c3_b"], 16, 1, 1, 0, 1, &s3);
  expect_outputs(ir::serialize_model(b.m), x, {c2, c3}, {s2, s3});
}

// MobileNet-v3's patterns: HardSwish after a convolution (read by it alone) folded into it as its
// "HardSwish" activation (oneDNN's hardswish post-op), over 24 channels (8 padded) and a depthwise
// convolution; a squeeze-and-excitation gate Mul(h, HardSigmoid(Conv(Relu(Conv(
// GlobalAveragePool(h)))))); a HardSwish of a value also read elsewhere (a graph output) stays a
// blocked node of its own (HardSwish(0) = 0 keeps the padding zero); against a double reference
// and the unoptimized session.
TEST(ConvLayout, HardSwishFoldsIntoConvolutions) {
  Builder b;
  const Shape xs{2, 16, 7, 7};
  b.input("x", xs);
  b.conv("x", "c1", 16, 24, 1, 1, 0);
  b.node("HardSwish", {"c1"}, {"h1"});
  b.conv("h1", "d", 24, 24, 3, 2, 1, 24);
  b.node("HardSwish", {"d"}, {"h2"});
  b.node("GlobalAveragePool", {"h2"}, {"g"});
  b.conv("g", "e1", 24, 16, 1, 1, 0);
  b.node("Relu", {"e1"}, {"r"});
  b.conv("r", "e2", 16, 24, 1, 1, 0);
  b.node("HardSigmoid", {"e2"}, {"se"}, {attr_float("alpha", float(1.0 / 6.0)), attr_float("beta", 0.5f)});
  b.node("Mul", {"h2", "se"}, {"y"});
  b.conv("y", "c3", 24, 32, 1, 1, 0);
  b.node("HardSwish", {"c3"}, {"h3"});
  b.output("h3");
  b.output("c3");
  const auto ops = b.rewritten_ops();
  EXPECT_EQ(ops.at("NchwcConv"), 5);  // c1, d, e1 (+ Relu), e2, c3
  EXPECT_EQ(ops.at("HardSwish"), 1);  // h3: c3 is also a graph output
  EXPECT_EQ(ops.at("HardSigmoid"), 1);
  EXPECT_EQ(ops.at("Mul"), 1);
  EXPECT_EQ(ops.at("ReorderToNchwc"), 1);    // x
  EXPECT_EQ(ops.at("ReorderFromNchwc"), 2);  // h3, c3
  auto hardswish = [](std::vector<double> v) {
    for (double& e : v) e = e * std::max(0.0, std::min(1.0, e / 6 + 0.5));
    return v;
  };
  std::mt19937 rng(6);
  const Tensor x = random_tensor(DType::kFloat32, xs, rng);
  Shape s1, sd, s_e1, s_e2, s3;
  const auto h1 = hardswish(ref_conv(to_double(x), xs, b.values["c1_w"], b.values["c1_b"], 24, 1, 1, 0, 1, &s1));
  const auto h2 = hardswish(ref_conv(h1, s1, b.values["d_w"], b.values["d_b"], 24, 3, 2, 1, 24, &sd));
  const int64_t plane = sd[2] * sd[3];
  std::vector<double> g(size_t(sd[0] * 24));
  for (size_t i = 0; i < h2.size(); ++i) g[i / size_t(plane)] += h2[i] / double(plane);
  auto r = ref_conv(g, {sd[0], 24, 1, 1}, b.values["e1_w"], b.values["e1_b"], 16, 1, 1, 0, 1, &s_e1);
  relu(r);
  auto se = ref_conv(r, s_e1, b.values["e2_w"], b.values["e2_b"], 24, 1, 1, 0, 1, &s_e2);
  for (double& e : se) e = std::max(0.0, std::min(1.0, e / 6 + 0.5));
  std::vector<double> y(h2.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = h2[i] * se[i / size_t(plane)];
  const auto c3 = ref_conv(y, sd, b.values["c3_w"], b.values["c3_b"], 32, 1, 1, 0, 1, &s3);
  expect_outputs(ir::serialize_model(b.m), x, {hardswish(c3), c3}, {s3, s3});
}

// Pad folded into the AveragePool or Conv reading it (runtime::fold_pads, at extended and all):
// Inception-v3's Pad(1) + AveragePool 3x3 (becomes pads 1, count_include_pad 1), DenseNet's
// all-zero Pad + AveragePool 2x2, a Pad with a zero value input + Conv with pads of its own; and the
// Pads that stay: before a MaxPool, with value 1.5, in reflect mode, on the channel axis, read
// twice, before an AveragePool with pads of its own and count_include_pad 0, or wider than the
// window. Every output against the unoptimized session (which runs the Pads) and the first against
// a double reference.
TEST(ConvLayout, PadsFoldIntoPoolsAndConvolutions) {
  Builder b;
  const Shape xs{2, 16, 7, 7};
  b.input("x", xs);
  auto pads = [&](const std::string& name, std::vector<int64_t> v) {
    Tensor t = Tensor::empty(DType::kInt64, {int64_t(v.size())});
    std::copy(v.begin(), v.end(), t.data<int64_t>());
    b.m.graph->initializers.emplace_back(name, t);
    return name;
  };
  const std::string p1 = pads("p1", {0, 0, 1, 1, 0, 0, 1, 1}), p0 = pads("p0", {0, 0, 0, 0, 0, 0, 0, 0}),
                    p2 = pads("p2", {0, 0, 0, 2, 0, 0, 1, 0}), pc = pads("pc", {0, 1, 0, 0, 0, 0, 0, 0}),
                    p3 = pads("p3", {0, 0, 3, 3, 0, 0, 3, 3});
  Tensor zero = Tensor::empty(DType::kFloat32, {}), other = Tensor::empty(DType::kFloat32, {});
  zero.data<float>()[0] = 0.f;
  other.data<float>()[0] = 1.5f;
  b.m.graph->initializers.emplace_back("zero", zero);
  b.m.graph->initializers.emplace_back("other", other);
  const auto k3 = attr_ints("kernel_shape", {3, 3});
  b.node("Pad", {"x", p1}, {"a"});  // folded
  b.node("AveragePool", {"a"}, {"y1"}, {k3});
  b.node("Pad", {"x", p0}, {"d"});  // folded (all zero)
  b.node("AveragePool", {"d"}, {"y2"}, {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2})});
  b.node("Pad", {"x", p2, "zero"}, {"c"});  // folded into the Conv's pads
  const std::string w = b.init("w", {16, 16, 3, 3});
  b.node("Conv", {"c", w}, {"y3"}, {attr_ints("pads", {1, 0, 0, 1})});
  b.node("Pad", {"x", p1}, {"m"});  // MaxPool: stays
  b.node("MaxPool", {"m"}, {"y4"}, {k3});
  b.node("Pad", {"x", p1, "other"}, {"v"});  // value 1.5: stays
  b.node("AveragePool", {"v"}, {"y5"}, {k3});
  b.node("Pad", {"x", p1}, {"r"}, {attr_string("mode", "reflect")});  // stays
  b.node("AveragePool", {"r"}, {"y6"}, {k3});
  b.node("Pad", {"x", pc}, {"ch"});  // channel axis: stays
  b.node("AveragePool", {"ch"}, {"y7"}, {k3});
  b.node("Pad", {"x", p1}, {"t"});  // read twice: stays
  b.node("AveragePool", {"t"}, {"y8"}, {k3});
  b.node("Relu", {"t"}, {"y9"});
  b.node("Pad", {"x", p1}, {"o"});  // own pads, count_include_pad 0: stays
  b.node("AveragePool", {"o"}, {"y10"}, {k3, attr_ints("pads", {1, 1, 1, 1})});
  b.node("Pad", {"x", p3}, {"wide"});  // 3 + 0 >= the 3-wide window: stays
  b.node("AveragePool", {"wide"}, {"y11"}, {k3});
  const std::vector<std::string> outs = {"y1", "y2", "y3", "y4", "y5", "y6", "y7", "y8", "y9", "y10", "y11"};
  for (const auto& o : outs) b.output(o);

  ir::Model c = b.m;
  c.graph = std::make_shared<ir::Graph>(*b.m.graph);
  EXPECT_EQ(onnxtrain::runtime::fold_pads(c), 3u);
  int pads_left = 0;
  for (const auto& n : c.graph->nodes) {
    pads_left += n.op_type == "Pad";
    if (n.outputs[0] == "y1") {
      EXPECT_EQ(n.inputs[0], "x");
      EXPECT_EQ(n.attr("pads")->ints, (std::vector<int64_t>{1, 1, 1, 1}));
      EXPECT_EQ(n.attr("count_include_pad")->i, 1);
    }
    if (n.outputs[0] == "y2") {
      EXPECT_EQ(n.inputs[0], "x");
      EXPECT_EQ(n.attr("count_include_pad"), nullptr);  // nothing padded
    }
    if (n.outputs[0] == "y3") {
      EXPECT_EQ(n.inputs[0], "x");
      EXPECT_EQ(n.attr("pads")->ints, (std::vector<int64_t>{1, 2, 1, 1}));
    }
  }
  EXPECT_EQ(pads_left, 7);

  std::mt19937 rng(8);
  const Tensor x = random_tensor(DType::kFloat32, xs, rng);
  // y1: the 3x3 mean over x padded by one zero on each side, zeros counted.
  const auto xv = to_double(x);
  std::vector<double> y1;
  for (int64_t nc = 0; nc < 32; ++nc)
    for (int64_t i = 0; i < 7; ++i)
      for (int64_t j = 0; j < 7; ++j) {
        double s = 0;
        for (int64_t u = i - 1; u <= i + 1; ++u)
          for (int64_t v = j - 1; v <= j + 1; ++v)
            if (u >= 0 && u < 7 && v >= 0 && v < 7) s += xv[size_t((nc * 7 + u) * 7 + v)];
        y1.push_back(s / 9);
      }
  const std::string bytes = ir::serialize_model(b.m);
  for (int threads : {1, 2}) {
    const auto plain = session(bytes, GraphOptimizationLevel::kDisableAll, threads).run({}, {{"x", x}});
    for (auto level : {GraphOptimizationLevel::kEnableExtended, GraphOptimizationLevel::kEnableAll}) {
      const auto y = session(bytes, level, threads).run({}, {{"x", x}});
      ASSERT_EQ(y.size(), outs.size());
      for (size_t k = 0; k < outs.size(); ++k)
        EXPECT_TRUE(all_close(y[k], plain[k].shape(), to_double(plain[k]), 1e-5, 1e-5)) << outs[k] << " " << threads;
      EXPECT_TRUE(all_close(y[0], {2, 16, 7, 7}, y1, 1e-5, 1e-6)) << threads;
    }
  }
}

// The layout reorders themselves (whole blocks through register transposes, the rest element by
// element) against the layout's definition: element (n, c, p) at [n, c / 16, p, c % 16], padded
// channels zero; every mix of whole and partial blocks and of 8-pixel runs and tails, 1-2 threads.
TEST(ConvLayout, ReordersMatchTheLayoutsDefinition) {
  namespace nchwc = onnxtrain::kernels::cpu::nchwc;
  for (int threads : {1, 2}) {
    onnxtrain::ThreadScope scope(threads);
    for (int64_t C : {1, 3, 16, 21, 32, 40})
      for (int64_t HW : {1, 7, 8, 9, 50}) {
        const int64_t N = 2, CB = nchwc::blocks(C);
        std::vector<float> x(size_t(N * C * HW)), blocked(size_t(N * CB * HW * 16), -1.f), back(x.size(), -1.f);
        for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) + 0.5f;
        nchwc::to_blocked(x.data(), blocked.data(), N, C, HW);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t c = 0; c < CB * 16; ++c)
            for (int64_t p = 0; p < HW; ++p) {
              const float want = c < C ? x[size_t((n * C + c) * HW + p)] : 0.f;
              ASSERT_EQ(blocked[size_t(((n * CB + c / 16) * HW + p) * 16 + c % 16)], want)
                  << "C " << C << " HW " << HW << " n " << n << " c " << c << " p " << p;
            }
        nchwc::from_blocked(blocked.data(), back.data(), N, C, HW);
        ASSERT_EQ(back, x) << "C " << C << " HW " << HW << " threads " << threads;
      }
  }
}

// Blocked 3x3 stride-1 convolutions (oneDNN's Winograd kernels by default; the direct kernels with
// config entry session.conv_winograd = "0"): padded channels (24 -> 40), the residual sum and Relu
// as post-ops, no activation; both against a double reference and the unoptimized session, and
// not bitwise the same (the two paths sum in different orders: both ran).
TEST(ConvLayout, WinogradConvolutionsMatchTheReference) {
  Builder b;
  const Shape xs{2, 24, 13, 11};
  b.input("x", xs);
  b.conv("x", "c1", 24, 40, 3, 1, 1);
  b.node("Relu", {"c1"}, {"r1"});
  b.conv("r1", "c2", 40, 40, 3, 1, 1);
  b.node("Add", {"c2", "r1"}, {"a2"});
  b.node("Relu", {"a2"}, {"r2"});
  b.conv("r2", "c3", 40, 64, 3, 1, 1);
  b.output("r2"), b.output("c3");
  EXPECT_EQ(b.rewritten_ops().at("NchwcConv"), 3);

  std::mt19937 rng(9);
  const Tensor x = random_tensor(DType::kFloat32, xs, rng);
  Shape s1, s2, s3;
  auto r1 = ref_conv(to_double(x), xs, b.values["c1_w"], b.values["c1_b"], 40, 3, 1, 1, 1, &s1);
  relu(r1);
  auto r2 = ref_conv(r1, s1, b.values["c2_w"], b.values["c2_b"], 40, 3, 1, 1, 1, &s2);
  for (size_t i = 0; i < r2.size(); ++i) r2[i] = std::max(r2[i] + r1[i], 0.0);
  const auto c3 = ref_conv(r2, s2, b.values["c3_w"], b.values["c3_b"], 64, 3, 1, 1, 1, &s3);
  const std::string bytes = ir::serialize_model(b.m);
  expect_outputs(bytes, x, {r2, c3}, {s2, s3});

  InferenceSession direct = session(bytes, GraphOptimizationLevel::kEnableAll, 1, {{"session.conv_winograd", "0"}});
  InferenceSession wino = session(bytes, GraphOptimizationLevel::kEnableAll, 1);
  const auto yd = direct.run({}, {{"x", x}}), yw = wino.run({}, {{"x", x}});
  EXPECT_TRUE(all_close(yd[1], s3, c3, 1e-5, 1e-5 * max_abs(c3)));
  const auto dd = to_double(yd[1]), dw = to_double(yw[1]);
  EXPECT_NE(dd, dw) << "session.conv_winograd changed nothing: one of the two paths did not run";

  const SessionOptions bad = options(GraphOptimizationLevel::kEnableAll, 1, {{"session.conv_winograd", "2"}});
  EXPECT_THROW(InferenceSession(bytes.data(), bytes.size(), bad), onnxtrain::InvalidArgument);
}

// session.conv_winograd "auto" (the default), where the CPU runs the direct kernel (AVX-512): for a
// convolution with few channels (16 -> 32: h = C*M/(C+M) = 10.7) over more than 8K output pixels,
// the direct kernel at one and two threads; with as few channels over 143 pixels, Winograd at one
// thread; with more channels (48 -> 80) over 143 pixels, Winograd at one thread and, with few
// output pixels a thread and unequal channel counts, the direct kernel at two. "Direct" is bit for
// bit what "0" gives, and "1" keeps Winograd everywhere (not bit for bit the direct results: both
// paths ran).
TEST(ConvLayout, WinogradAutoPicksTheDirectKernelForSmallLayers) {
  if (!onnxtrain::kernels::cpu::nchwc512::available()) GTEST_SKIP() << "no AVX-512F: auto always takes Winograd here";
  struct Case {
    int64_t C, M, H, W;
    bool wino_1t, wino_2t;  // what "auto" should pick
  };
  for (const Case& c : {Case{16, 32, 91, 91, false, false}, Case{16, 32, 13, 11, true, false}, Case{48, 80, 13, 11, true, false}}) {
    SCOPED_TRACE(std::to_string(c.C) + " -> " + std::to_string(c.M) + " channels, " + std::to_string(c.H * c.W) + " pixels");
    Builder b;
    const Shape xs{1, c.C, c.H, c.W};
    b.input("x", xs);
    b.conv("x", "c", c.C, c.M, 3, 1, 1);
    b.output("c");
    std::mt19937 rng(12);
    const Tensor x = random_tensor(DType::kFloat32, xs, rng);
    const std::string bytes = ir::serialize_model(b.m);
    auto run = [&](int threads, const char* mode) {
      std::vector<std::pair<std::string, std::string>> config;
      if (mode) config.emplace_back("session.conv_winograd", mode);
      return to_double(session(bytes, GraphOptimizationLevel::kEnableAll, threads, config).run({}, {{"x", x}})[0]);
    };
    Shape ys;
    const auto ref = ref_conv(to_double(x), xs, b.values["c_w"], b.values["c_b"], c.M, 3, 1, 1, 1, &ys);
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::to_string(threads) + " threads");
      const auto got = run(threads, threads == 1 ? nullptr : "auto"), wino = run(threads, "1"), direct = run(threads, "0");
      const bool want_wino = threads == 1 ? c.wino_1t : c.wino_2t;
      EXPECT_NE(wino, direct);
      EXPECT_EQ(got, want_wino ? wino : direct);
      const double tol = 1e-5 * max_abs(ref);
      for (const auto* y : {&got, &wino, &direct})
        for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR((*y)[i], ref[i], tol) << i;
    }
  }
}

// dnnl_util::wino_2x3_verdict on the scratchpads oneDNN 2.6's F(2x2, 3x3) kernel booked for the
// bench's layers (2 MB of second-level cache): Inception-v3's 80 -> 192 at 71x71 (one block of 703
// tiles: 13.5 MB a thread) goes to the next kernel at 1 and 2 threads, and with a 1 MB cache too;
// its 448 -> 384 at 8x8 (blocks of 4 tiles, 11 MB of weights) to the direct one at one thread but
// not at two (one block of 16 tiles); ResNet's 512 -> 512 at 7x7 (24 tiles), 256 -> 256 at 14x14
// (42), and the small weights of Inception's 64 -> 96 at 35x35 (4 tiles a block at two threads)
// stay. The boundaries: a thread's part just over / at twice the cache; 15 / 16 tiles.
TEST(ConvLayout, Winograd2x3VerdictFollowsItsBlocking) {
  using onnxtrain::kernels::cpu::dnnl_util::Wino2x3;
  using onnxtrain::kernels::cpu::dnnl_util::wino_2x3_verdict;
  const double l2 = 2 << 20;
  auto tiles = [](double t, int64_t C, int64_t M, int threads) { return 64.0 * double(C + M) * t * threads; };
  EXPECT_EQ(wino_2x3_verdict(13534208, 1, 80, 192, l2), Wino2x3::kNextImpl);
  EXPECT_EQ(wino_2x3_verdict(27060224, 2, 80, 192, l2), Wino2x3::kNextImpl);
  EXPECT_EQ(wino_2x3_verdict(13534208, 1, 80, 192, l2 / 2), Wino2x3::kNextImpl);
  EXPECT_EQ(wino_2x3_verdict(434176, 1, 448, 384, l2), Wino2x3::kDirect);
  EXPECT_EQ(wino_2x3_verdict(tiles(24, 448, 384, 2), 2, 448, 384, l2), Wino2x3::kKeep);
  EXPECT_EQ(wino_2x3_verdict(tiles(24, 512, 512, 1), 1, 512, 512, l2), Wino2x3::kKeep);
  EXPECT_EQ(wino_2x3_verdict(tiles(42, 256, 256, 1), 1, 256, 256, l2), Wino2x3::kKeep);
  EXPECT_EQ(wino_2x3_verdict(tiles(8, 64, 96, 2), 2, 64, 96, l2), Wino2x3::kKeep);
  EXPECT_EQ(wino_2x3_verdict(tiles(15.9, 256, 256, 1), 1, 256, 256, l2), Wino2x3::kDirect);
  EXPECT_EQ(wino_2x3_verdict(tiles(16, 256, 256, 1), 1, 256, 256, l2), Wino2x3::kKeep);
  EXPECT_EQ(wino_2x3_verdict(2 * l2 + 64, 1, 80, 192, l2), Wino2x3::kNextImpl);
  EXPECT_EQ(wino_2x3_verdict(2 * l2, 1, 80, 192, l2), Wino2x3::kKeep);
  EXPECT_EQ(wino_2x3_verdict(4 * l2, 2, 80, 192, l2), Wino2x3::kKeep);
  EXPECT_EQ(wino_2x3_verdict(tiles(8, 24, 40, 1), 1, 24, 40, l2), Wino2x3::kKeep);  // channels rounded up to 32, 48
}

// The layers the verdict moves, end to end: Inception-v3's 80 -> 192 over 73x73 (no pad) and 448 -> 384
// over 8x8 (pad 1), "auto" against a double reference at 1 and 2 threads; where oneDNN's 2x3 kernel
// blocks the 448 -> 384 one in small blocks (the verdict on its own scratchpad), "auto" is the direct
// kernel bit for bit, else Winograd (not the direct results); "1" keeps Winograd everywhere.
TEST(ConvLayout, WinogradAutoAvoidsTheSlowBlockingsOf2x3) {
  if (!onnxtrain::kernels::cpu::nchwc512::available()) GTEST_SKIP() << "no AVX-512F: auto always takes Winograd here";
  namespace dnnl_util = onnxtrain::kernels::cpu::dnnl_util;
  struct Case {
    int64_t C, M, H, pad;
  };
  for (const Case& c : {Case{80, 192, 73, 0}, Case{448, 384, 8, 1}}) {
    SCOPED_TRACE(std::to_string(c.C) + " -> " + std::to_string(c.M) + " over " + std::to_string(c.H) + "x" + std::to_string(c.H));
    Builder b;
    const Shape xs{1, c.C, c.H, c.H};
    b.input("x", xs);
    b.conv("x", "c", c.C, c.M, 3, 1, c.pad);
    b.output("c");
    std::mt19937 rng(21);
    const Tensor x = random_tensor(DType::kFloat32, xs, rng);
    const std::string bytes = ir::serialize_model(b.m);
    Shape ys;
    const auto ref = ref_conv(to_double(x), xs, b.values["c_w"], b.values["c_b"], c.M, 3, 1, c.pad, 1, &ys);
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::to_string(threads) + " threads");
      auto run = [&](const char* mode) {
        std::vector<std::pair<std::string, std::string>> config;
        if (mode) config.emplace_back("session.conv_winograd", mode);
        return to_double(session(bytes, GraphOptimizationLevel::kEnableAll, threads, config).run({}, {{"x", x}})[0]);
      };
      const auto got = run(nullptr), direct = run("0"), forced = run("1");
      EXPECT_NE(forced, direct) << "\"1\" did not keep Winograd";
      const double tol = 1e-5 * max_abs(ref);
      for (const auto* y : {&got, &direct, &forced})
        for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR((*y)[i], ref[i], tol) << i;
      if (c.C != 448 || threads != 1) continue;
      // What oneDNN's 2x3 kernel books for this layer at one thread.
      onnxtrain::ThreadScope scope(1);
      using tag = dnnl::memory::format_tag;
      const auto dt = dnnl::memory::data_type::f32;
      const dnnl::memory::desc xd({1, c.C, c.H, c.H}, dt, tag::nChw16c), yd({1, c.M, c.H, c.H}, dt, tag::nChw16c),
          wd({c.M, c.C, 3, 3}, dt, tag::any), bd({c.M}, dt, tag::x);
      const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_winograd,
                                                 xd, wd, bd, yd, {1, 1}, {c.pad, c.pad}, {c.pad, c.pad});
      const dnnl::convolution_forward::primitive_desc pd(desc, dnnl_util::default_attr(), dnnl_util::cpu_engine());
      const std::string impl = pd.impl_info_str();
      const bool small_blocks =
          impl.find("wino_2x3") != std::string::npos &&
          dnnl_util::wino_2x3_verdict(double(pd.scratchpad_desc().get_size()), 1, c.C, c.M,
                                      double(dnnl_util::l2_cache_bytes())) == dnnl_util::Wino2x3::kDirect;
      if (small_blocks) EXPECT_EQ(got, direct) << impl;
      else EXPECT_NE(got, direct) << impl;
    }
  }
}

// 1x1 convolutions large enough for the AMX tiles (amx::Pointwise::pays), after a 3x3 one that
// makes their input blocked: 256 -> 512 channels over 28x28 with Relu, and 256 -> 512 at stride 2
// (ResNet's downsampling, 14x14 out) without: against a double reference of the chain, and bit for
// bit what amx::Pointwise gives on the blocked copy of the 3x3 layer's output (so the session ran
// them there), at 1 and 2 threads.
TEST(ConvLayout, PointwiseConvolutionsRunOnTheAmxTiles) {
  namespace amx = onnxtrain::kernels::cpu::amx;
  namespace nchwc = onnxtrain::kernels::cpu::nchwc;
  if (!amx::available()) GTEST_SKIP() << "this CPU has no AMX-BF16 (or Linux did not grant the tile state)";
  const int64_t C0 = 16, C = 256, M = 512, H = 28, H2 = 14;
  Builder b;
  const Shape xs{1, C0, H, H};
  b.input("x", xs);
  b.conv("x", "c1", C0, C, 3, 1, 1);
  b.node("Relu", {"c1"}, {"r1"});
  b.conv("r1", "c2", C, M, 1, 1, 0);
  b.node("Relu", {"c2"}, {"r2"});
  b.conv("r1", "c3", C, M, 1, 2, 0);
  b.output("r1"), b.output("r2"), b.output("c3");
  std::mt19937 rng(31);
  const Tensor x = random_tensor(DType::kFloat32, xs, rng);
  const std::string bytes = ir::serialize_model(b.m);
  Shape s1, s2, s3;
  auto r1 = ref_conv(to_double(x), xs, b.values["c1_w"], b.values["c1_b"], C, 3, 1, 1, 1, &s1);
  relu(r1);
  auto r2 = ref_conv(r1, s1, b.values["c2_w"], b.values["c2_b"], M, 1, 1, 0, 1, &s2);
  relu(r2);
  const auto c3 = ref_conv(r1, s1, b.values["c3_w"], b.values["c3_b"], M, 1, 2, 0, 1, &s3);
  const auto& inits = b.m.graph->initializers;
  ASSERT_EQ(inits[2].second.shape(), (Shape{M, C, 1, 1}));
  ASSERT_EQ(inits[4].second.shape(), (Shape{M, C, 1, 1}));
  for (int threads : {1, 2}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    onnxtrain::ThreadScope scope(threads);
    ASSERT_TRUE(amx::Pointwise::pays(H * H, C, M, threads));
    ASSERT_TRUE(amx::Pointwise::pays(H2 * H2, C, M, threads));
    const auto y = session(bytes, GraphOptimizationLevel::kEnableAll, threads).run({}, {{"x", x}});
    EXPECT_TRUE(all_close(y[1], s2, r2, 1e-5, 1e-5 * max_abs(r2)));
    EXPECT_TRUE(all_close(y[2], s3, c3, 1e-5, 1e-5 * max_abs(c3)));
    std::vector<float> xb(size_t(C * H * H));
    nchwc::to_blocked(y[0].data<float>(), xb.data(), 1, C, H * H);
    struct Layer {
      size_t w, out;
      int64_t OH, stride;
      amx::Pointwise::Act act;
    };
    for (const Layer& l : {Layer{2, 1, H, 1, amx::Pointwise::Act::kRelu}, Layer{4, 2, H2, 2, amx::Pointwise::Act::kNone}}) {
      auto k = amx::Pointwise::make(C, M, inits[l.w].second.data<float>(), l.act, 0.f, 0.f, false);
      ASSERT_TRUE(k != nullptr);
      std::vector<float> yb(size_t(M * l.OH * l.OH)), want(yb.size());
      k->run(xb.data(), 1, amx::Pointwise::Geometry{H, H, l.OH, l.OH, l.stride, l.stride}, inits[l.w + 1].second.data<float>(),
             yb.data());
      nchwc::from_blocked(yb.data(), want.data(), 1, M, l.OH * l.OH);
      const float* got = y[l.out].data<float>();
      EXPECT_TRUE(std::equal(want.begin(), want.end(), got)) << "the session's 1x1 convolution (stride " << l.stride
                                                             << ") did not run on the tiles";
    }
  }
}

// NchwcMaxPool (2-D: its own 16-lane loop) against the plain MaxPool on the same values, bit for bit:
// strides, dilation, pads wider on one side, ceil_mode, a window wider than the input, windows
// entirely in the padding; values with NaN, +-inf and -FLT_MAX, whose maxima follow the plain
// MaxPool's (oneDNN's: from the lowest float, NaN passed over), at 1 and 2 threads.
TEST(ConvLayout, BlockedMaxPoolMatchesThePlainOneBitForBit) {
  namespace nchwc = onnxtrain::kernels::cpu::nchwc;
  const int64_t N = 2, C = 32, H = 9, W = 10;
  std::mt19937 rng(3);
  Tensor x = random_tensor(DType::kFloat32, {N, C, H, W}, rng);
  float* xv = x.data<float>();
  const float specials[] = {std::nanf(""), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::infinity(), std::numeric_limits<float>::lowest()};
  for (int64_t i = 0; i < x.numel(); ++i)
    if (rng() % 7 == 0) xv[i] = specials[rng() % 4];
  for (int64_t i = 0; i < H * W; ++i) xv[i] = -std::numeric_limits<float>::infinity();  // a plane of -inf ...
  for (int64_t i = H * W; i < 2 * H * W; i += 2) xv[i] = std::nanf("");                 // ... and one half NaN
  Tensor xb = Tensor::empty(DType::kFloat32, nchwc::blocked_shape(x.shape()));
  nchwc::to_blocked(xv, xb.data<float>(), N, C, H * W);
  struct Geometry {
    const char* name;
    std::vector<ir::Attribute> attrs;
  };
  const std::vector<Geometry> cases = {
      {"3x3 s2 p1 ceil", {attr_ints("kernel_shape", {3, 3}), attr_ints("strides", {2, 2}), attr_ints("pads", {1, 1, 1, 1}),
                          attr_int("ceil_mode", 1)}},
      {"2x2 s2", {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2})}},
      {"3x3 dilation 2 p1", {attr_ints("kernel_shape", {3, 3}), attr_ints("dilations", {2, 2}), attr_ints("pads", {1, 1, 1, 1})}},
      {"7x7 p3 (wider than the input)", {attr_ints("kernel_shape", {7, 7}), attr_ints("pads", {3, 3, 3, 3})}},
      {"3x2 s3x1 pads 2,0,0,1", {attr_ints("kernel_shape", {3, 2}), attr_ints("strides", {3, 1}), attr_ints("pads", {2, 0, 0, 1})}},
      {"1x3 s1x3 pads 0,2,0,2 (windows in the pads)", {attr_ints("kernel_shape", {1, 3}), attr_ints("strides", {1, 3}),
                                                        attr_ints("pads", {0, 2, 0, 2})}},
  };
  for (const Geometry& c : cases)
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(c.name) + ", " + std::to_string(threads) + " threads");
      ot_test::RunOptions plain_opts;
      plain_opts.threads = threads;
      const Tensor want = run_node("MaxPool", {x}, c.attrs, plain_opts)[0];
      ot_test::RunOptions blocked_opts = plain_opts;
      blocked_opts.domain = onnxtrain::ops::kDomain;
      const Tensor got = run_node("NchwcMaxPool", {xb}, c.attrs, blocked_opts)[0];
      ASSERT_EQ(got.shape(), nchwc::blocked_shape(want.shape()));
      Tensor back = Tensor::empty(DType::kFloat32, want.shape());
      nchwc::from_blocked(got.data<float>(), back.data<float>(), want.dim(0), want.dim(1), want.dim(2) * want.dim(3));
      EXPECT_TRUE(same_bits(back, want));
      for (int64_t i = 0; i < want.numel(); ++i)
        if (std::memcmp(back.data<float>() + i, want.data<float>() + i, 4) != 0) {
          ADD_FAILURE() << "first difference at " << i << ": " << back.data<float>()[i] << " vs " << want.data<float>()[i];
          break;
        }
    }
}
