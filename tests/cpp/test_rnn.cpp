// LSTM, GRU and RNN against a naive double-precision reference (per batch entry, per step,
// per unit loops) on random sizes: every direction, both layouts, sequence_lens, initial states,
// peepholes, clip, input_forget, linear_before_reset, several activation sets, float32 and float64.
#include <cmath>
#include <sstream>

#include "onnxtrain/error.h"
#include "test_util.h"

using namespace ot_test;

namespace onnxtrain::kernels::cpu {
void rnn_test_sigmoid_f32(float* x, int64_t n);
void rnn_test_tanh_f32(float* x, int64_t n);
}  // namespace onnxtrain::kernels

namespace {

struct Act {
  std::string name;
  double alpha = 0, beta = 0;
  bool has_alpha = false, has_beta = false;  // passed in activation_alpha / activation_beta
};

double apply(const Act& a, double x) {
  const std::string& n = a.name;
  if (n == "Sigmoid") return 1 / (1 + std::exp(-x));
  if (n == "Tanh") return std::tanh(x);
  if (n == "Relu") return x > 0 ? x : 0;
  if (n == "Affine") return a.alpha * x + a.beta;
  if (n == "LeakyRelu") return x >= 0 ? x : a.alpha * x;
  if (n == "ThresholdedRelu") return x > a.alpha ? x : 0;
  if (n == "ScaledTanh") return a.alpha * std::tanh(a.beta * x);
  if (n == "HardSigmoid") return std::min(1.0, std::max(0.0, a.alpha * x + a.beta));
  if (n == "Elu") return x >= 0 ? x : a.alpha * (std::exp(x) - 1);
  if (n == "Softsign") return x / (1 + std::fabs(x));
  if (n == "Softplus") return std::log(1 + std::exp(x));
  ADD_FAILURE() << "unknown activation " << n;
  return 0;
}

Act act(const std::string& name) { return Act{name}; }
// Attributes are float32: the reference uses the same rounded values.
Act act(const std::string& name, double alpha) { return Act{name, double(float(alpha)), 0, true, false}; }
Act act(const std::string& name, double alpha, double beta) {
  return Act{name, double(float(alpha)), double(float(beta)), true, true};
}

struct Case {
  std::string op;  // RNN, GRU, LSTM
  int64_t seq = 2, batch = 2, input = 3, H = 4;
  std::string direction = "forward";
  int64_t layout = 0;
  bool bias = false, h0 = false, c0 = false, peep = false, lens = false;
  bool lbr = false, input_forget = false;
  double clip = 0;
  std::vector<Act> acts;  // all directions; empty: defaults (not passed as attributes)
  std::vector<int64_t> fixed_lens;  // sequence_lens to use instead of random ones
  DType dt = DType::kFloat32;
  int64_t opset = 14;
  bool constants = false;
  int threads = 1;

  int64_t gates() const { return op == "LSTM" ? 4 : op == "GRU" ? 3 : 1; }
  int64_t dirs() const { return direction == "bidirectional" ? 2 : 1; }
  std::string describe() const {
    std::ostringstream os;
    os << op << " seq " << seq << " batch " << batch << " input " << input << " H " << H << " " << direction
       << " layout " << layout << " bias " << bias << " h0 " << h0 << " c0 " << c0 << " peep " << peep << " lens "
       << lens << " lbr " << lbr << " input_forget " << input_forget << " clip " << clip << " acts";
    for (const auto& a : acts) os << " " << a.name;
    os << " " << onnxtrain::dtype_name(dt) << (constants ? " constants" : "");
    return os.str();
  }
};

struct Inputs {
  std::vector<double> x, w, r, b, h0, c0, p;
  std::vector<int64_t> lens;
};

// Reference outputs (Y, Y_h, Y_c) in the case's layout.
std::vector<std::vector<double>> reference(const Case& c, const Inputs& in) {
  const int64_t S = c.seq, N = c.batch, I = c.input, H = c.H, G = c.gates(), D = c.dirs();
  std::vector<Act> acts = c.acts;
  if (acts.empty())
    for (int64_t d = 0; d < D; ++d) {
      if (c.op == "LSTM") acts.insert(acts.end(), {act("Sigmoid"), act("Tanh"), act("Tanh")});
      if (c.op == "GRU") acts.insert(acts.end(), {act("Sigmoid"), act("Tanh")});
      if (c.op == "RNN") acts.push_back(act("Tanh"));
    }
  const size_t per = acts.size() / size_t(D);
  auto X = [&](int64_t t, int64_t b, int64_t i) { return in.x[size_t(c.layout ? (b * S + t) * I + i : (t * N + b) * I + i)]; };
  auto state = [&](int64_t d, int64_t b) { return size_t(c.layout ? (b * D + d) * H : (d * N + b) * H); };
  auto yidx = [&](int64_t t, int64_t d, int64_t b) {
    return size_t(c.layout ? ((b * S + t) * D + d) * H : ((t * D + d) * N + b) * H);
  };
  auto clip = [&](double v) { return c.clip > 0 ? std::min(c.clip, std::max(-c.clip, v)) : v; };
  std::vector<double> Y(size_t(S * D * N * H), 0.0), Yh(static_cast<size_t>(D * N * H)), Yc(static_cast<size_t>(D * N * H));
  for (int64_t d = 0; d < D; ++d) {
    const bool rev = c.direction == "reverse" || d == 1;
    const Act* a = &acts[size_t(d) * per];
    auto W = [&](int64_t row, int64_t i) { return in.w[size_t((d * G * H + row) * I + i)]; };
    auto R = [&](int64_t row, int64_t k) { return in.r[size_t((d * G * H + row) * H + k)]; };
    auto Wb = [&](int64_t row) { return c.bias ? in.b[size_t(d * 2 * G * H + row)] : 0.0; };
    auto Rb = [&](int64_t row) { return c.bias ? in.b[size_t(d * 2 * G * H + G * H + row)] : 0.0; };
    auto P = [&](int64_t g, int64_t j) { return c.peep ? in.p[size_t(d * 3 * H + g * H + j)] : 0.0; };
    for (int64_t b = 0; b < N; ++b) {
      std::vector<double> h(size_t(H), 0.0), cs(size_t(H), 0.0);
      for (int64_t j = 0; j < H; ++j) {
        if (c.h0) h[size_t(j)] = in.h0[state(d, b) + size_t(j)];
        if (c.c0) cs[size_t(j)] = in.c0[state(d, b) + size_t(j)];
      }
      const int64_t len = c.lens ? in.lens[size_t(b)] : S;
      for (int64_t s = 0; s < len; ++s) {
        const int64_t t = rev ? len - 1 - s : s;
        // xw[row] = x·W[row] + Wb[row]; hr[row] = h·R[row] + Rb[row]
        std::vector<double> xw(static_cast<size_t>(G * H)), hr(static_cast<size_t>(G * H));
        for (int64_t row = 0; row < G * H; ++row) {
          double sx = Wb(row), sh = Rb(row);
          for (int64_t i = 0; i < I; ++i) sx += X(t, b, i) * W(row, i);
          for (int64_t k = 0; k < H; ++k) sh += h[size_t(k)] * R(row, k);
          xw[size_t(row)] = sx;
          hr[size_t(row)] = sh;
        }
        std::vector<double> hn(static_cast<size_t>(H));
        if (c.op == "RNN") {
          for (int64_t j = 0; j < H; ++j) hn[size_t(j)] = apply(a[0], clip(xw[size_t(j)] + hr[size_t(j)]));
        } else if (c.op == "GRU") {
          std::vector<double> z(static_cast<size_t>(H)), r(static_cast<size_t>(H));
          for (int64_t j = 0; j < H; ++j) {
            z[size_t(j)] = apply(a[0], clip(xw[size_t(j)] + hr[size_t(j)]));
            r[size_t(j)] = apply(a[0], clip(xw[size_t(H + j)] + hr[size_t(H + j)]));
          }
          for (int64_t j = 0; j < H; ++j) {
            double pre;
            if (c.lbr) {
              pre = xw[size_t(2 * H + j)] + r[size_t(j)] * hr[size_t(2 * H + j)];
            } else {
              pre = xw[size_t(2 * H + j)] + Rb(2 * H + j);
              for (int64_t k = 0; k < H; ++k) pre += r[size_t(k)] * h[size_t(k)] * R(2 * H + j, k);
            }
            const double hh = apply(a[1], clip(pre));
            hn[size_t(j)] = (1 - z[size_t(j)]) * hh + z[size_t(j)] * h[size_t(j)];
          }
        } else {  // LSTM, gates i o f c
          for (int64_t j = 0; j < H; ++j) {
            const size_t J = size_t(j);
            const double i = apply(a[0], clip(xw[J] + hr[J] + P(0, j) * cs[J]));
            const double f = c.input_forget ? 1 - i
                                            : apply(a[0], clip(xw[size_t(2 * H) + J] + hr[size_t(2 * H) + J] + P(2, j) * cs[J]));
            const double g = apply(a[1], clip(xw[size_t(3 * H) + J] + hr[size_t(3 * H) + J]));
            cs[J] = f * cs[J] + i * g;
            const double o = apply(a[0], clip(xw[size_t(H) + J] + hr[size_t(H) + J] + P(1, j) * cs[J]));
            hn[J] = o * apply(a[2], cs[J]);
          }
        }
        h = hn;
        for (int64_t j = 0; j < H; ++j) Y[yidx(t, d, b) + size_t(j)] = h[size_t(j)];
      }
      for (int64_t j = 0; j < H; ++j) {
        Yh[state(d, b) + size_t(j)] = h[size_t(j)];
        Yc[state(d, b) + size_t(j)] = cs[size_t(j)];
      }
    }
  }
  return {Y, Yh, Yc};
}

std::vector<double> random_values(std::mt19937& rng, int64_t n, double scale) {
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

// Runs the case through the executor and compares every output with the reference.
void check(const Case& c, uint32_t seed) {
  SCOPED_TRACE(c.describe() + " seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int64_t S = c.seq, N = c.batch, I = c.input, H = c.H, G = c.gates(), D = c.dirs();
  Inputs in;
  in.x = random_values(rng, S * N * I, 1.0);
  in.w = random_values(rng, D * G * H * I, 0.7);
  in.r = random_values(rng, D * G * H * H, 0.7);
  in.b = random_values(rng, D * 2 * G * H, 0.5);
  in.h0 = random_values(rng, D * N * H, 1.0);
  in.c0 = random_values(rng, D * N * H, 1.0);
  in.p = random_values(rng, D * 3 * H, 0.5);
  std::uniform_int_distribution<int64_t> len_d(0, S);
  for (int64_t b = 0; b < N; ++b) in.lens.push_back(len_d(rng));
  if (c.lens && N > 0) in.lens[0] = S;  // at least one full-length entry
  if (!c.fixed_lens.empty()) in.lens = c.fixed_lens;

  const Shape xs = c.layout ? Shape{N, S, I} : Shape{S, N, I};
  const Shape st = c.layout ? Shape{N, D, H} : Shape{D, N, H};
  std::vector<Tensor> inputs = {from_double(c.dt, xs, in.x), from_double(c.dt, {D, G * H, I}, in.w),
                                from_double(c.dt, {D, G * H, H}, in.r)};
  auto opt = [&](bool on, Tensor t) { inputs.push_back(on ? t : Tensor()); };
  opt(c.bias, from_double(c.dt, {D, 2 * G * H}, in.b));
  std::vector<int32_t> lens32(in.lens.begin(), in.lens.end());
  opt(c.lens, Tensor::from_vector<int32_t>({N}, lens32));
  opt(c.h0, from_double(c.dt, st, in.h0));
  if (c.op == "LSTM") {
    opt(c.c0, from_double(c.dt, st, in.c0));
    opt(c.peep, from_double(c.dt, {D, 3 * H}, in.p));
  }
  while (!inputs.empty() && !inputs.back().defined()) inputs.pop_back();

  std::vector<ir::Attribute> attrs = {attr_int("hidden_size", H), attr_string("direction", c.direction)};
  if (c.opset >= 14) attrs.push_back(attr_int("layout", c.layout));
  if (c.clip > 0) attrs.push_back(attr_float("clip", float(c.clip)));
  if (c.op == "GRU") attrs.push_back(attr_int("linear_before_reset", c.lbr));
  if (c.op == "LSTM") attrs.push_back(attr_int("input_forget", c.input_forget));
  if (!c.acts.empty()) {
    ir::Attribute names;
    names.name = "activations";
    names.type = ir::AttrType::kStrings;
    std::vector<float> alphas, betas;
    for (const auto& a : c.acts) {
      names.strings.push_back(a.name);
      if (a.has_alpha) alphas.push_back(float(a.alpha));
      if (a.has_beta) betas.push_back(float(a.beta));
    }
    attrs.push_back(names);
    if (!alphas.empty()) attrs.push_back(attr_floats("activation_alpha", alphas));
    if (!betas.empty()) attrs.push_back(attr_floats("activation_beta", betas));
  }
  RunOptions o;
  o.opset = c.opset;
  o.num_outputs = c.op == "LSTM" ? 3 : 2;
  o.inputs_as_constants = c.constants;
  o.threads = c.threads;
  auto got = run_node(c.op, inputs, attrs, o);
  auto want = reference(c, in);
  const double rtol = c.dt == DType::kFloat64 ? 1e-9 : 1e-4;
  const double atol = c.dt == DType::kFloat64 ? 1e-10 : 2e-5;
  ASSERT_EQ(got.size(), size_t(o.num_outputs));
  EXPECT_TRUE(all_close(got[0], c.layout ? Shape{N, S, D, H} : Shape{S, D, N, H}, want[0], rtol, atol)) << "Y";
  EXPECT_TRUE(all_close(got[1], st, want[1], rtol, atol)) << "Y_h";
  if (c.op == "LSTM") {
    EXPECT_TRUE(all_close(got[2], st, want[2], rtol, atol)) << "Y_c";
  }
}

// Random sizes and options for `op`, cycling through `act_sets` (one direction's functions each;
// bidirectional cases pair set k with set k+1).
void sweep(const std::string& op, const std::vector<std::vector<Act>>& act_sets, uint32_t seed, int trials) {
  std::mt19937 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const char* dirs[] = {"forward", "reverse", "bidirectional"};
  for (int trial = 0; trial < trials; ++trial) {
    Case c;
    c.op = op;
    c.seq = pick(1, 5);
    c.batch = pick(1, 4);
    c.input = pick(1, 5);
    c.H = pick(1, 9);
    c.direction = dirs[trial % 3];
    c.layout = pick(0, 1);
    c.bias = pick(0, 3) != 0;
    c.h0 = pick(0, 1);
    c.c0 = pick(0, 1);
    c.peep = pick(0, 1);
    c.lens = pick(0, 2) == 0;
    c.lbr = pick(0, 1);
    c.input_forget = pick(0, 4) == 0;
    c.clip = pick(0, 3) == 0 ? double(0.7f) : 0;
    const size_t set = size_t(trial / 3) % act_sets.size();
    c.acts = act_sets[set];
    if (c.dirs() == 2 && !c.acts.empty()) {
      const auto& second = act_sets[(set + 1) % act_sets.size()];
      if (second.empty()) c.acts.clear();
      else c.acts.insert(c.acts.end(), second.begin(), second.end());
    }
    c.dt = trial % 2 ? DType::kFloat64 : DType::kFloat32;
    c.constants = trial % 5 == 4;
    c.threads = trial % 4 == 3 ? 2 : 1;
    check(c, seed * 1000 + uint32_t(trial));
  }
}

}  // namespace

TEST(Rnn, LstmRandom) {
  sweep("LSTM",
        {{},
         {act("HardSigmoid", 0.3, 0.6), act("Elu", 0.8), act("Softsign")},
         {act("Sigmoid"), act("LeakyRelu", 0.1), act("ScaledTanh", 0.9, 1.1)},
         {act("Sigmoid"), act("Tanh"), act("Tanh")}},
        11, 48);
}

TEST(Rnn, GruRandom) {
  sweep("GRU",
        {{},
         {act("Sigmoid"), act("Softplus")},
         {act("HardSigmoid", 0.25, 0.45), act("ThresholdedRelu", 0.1)},
         {act("Sigmoid"), act("Affine", 0.5, 0.2)}},
        12, 48);
}

TEST(Rnn, RnnRandom) {
  sweep("RNN", {{}, {act("Relu")}, {act("Affine", 0.6, -0.1)}, {act("Softplus")}, {act("Elu", 0.7)}, {act("Tanh")}}, 13,
        48);
}

TEST(Rnn, DefaultActivationParameters) {
  // HardSigmoid without alpha/beta: 0.2 and 0.5; LeakyRelu: 0.01; Elu: 1.
  Case c;
  c.op = "GRU";
  c.acts = {act("HardSigmoid"), act("LeakyRelu")};
  c.acts[0].alpha = double(0.2f), c.acts[0].beta = 0.5, c.acts[1].alpha = double(0.01f);
  check(c, 21);
  c.op = "RNN";
  c.acts = {act("Elu")};
  c.acts[0].alpha = 1.0;
  check(c, 22);
}

TEST(Rnn, ActivationNamesAreCaseInsensitiveAndOneSetServesBothDirections) {
  Case c;
  c.op = "LSTM";
  c.direction = "bidirectional";
  // Same inputs: names in any case and one set for both directions give what the canonical full
  // list gives (and what the defaults give).
  std::mt19937 rng(23);
  const int64_t G = 4, D = 2;
  Tensor x = random_tensor(DType::kFloat32, {c.seq, c.batch, c.input}, rng);
  Tensor w = random_tensor(DType::kFloat32, {D, G * c.H, c.input}, rng);
  Tensor r = random_tensor(DType::kFloat32, {D, G * c.H, c.H}, rng);
  auto run = [&](const std::vector<std::string>& names) {
    ir::Attribute a;
    a.name = "activations";
    a.type = ir::AttrType::kStrings;
    a.strings = names;
    RunOptions o;
    o.num_outputs = 3;
    return run_node("LSTM", {x, w, r}, {attr_int("hidden_size", c.H), attr_string("direction", c.direction), a}, o);
  };
  auto got = run({"sigmoid", "TANH", "tanh"});
  auto want = run({"Sigmoid", "Tanh", "Tanh", "Sigmoid", "Tanh", "Tanh"});
  EXPECT_TRUE(all_close(got[0], want[0].shape(), to_double(want[0]), 0, 0));
  auto plain = run({});
  EXPECT_TRUE(all_close(got[1], plain[1].shape(), to_double(plain[1]), 0, 0));
}

TEST(Rnn, Opset7WithoutLayout) {
  for (const char* op : {"LSTM", "GRU", "RNN"}) {
    Case c;
    c.op = op;
    c.opset = 7;
    c.direction = "bidirectional";
    c.bias = c.h0 = c.lens = true;
    check(c, 31);
  }
}

TEST(Rnn, HiddenUnitsSplitAcrossThreads) {
  // With two threads and at least 64 hidden units, each step runs in two chunks of units
  // (boundaries on multiples of 8: H = 77 splits 32 + 45).
  uint32_t seed = 41;
  for (const char* op : {"LSTM", "GRU", "RNN"})
    for (int64_t H : {64, 77, 130}) {
      Case c;
      c.op = op;
      c.seq = 3;
      c.batch = 5;
      c.input = 7;
      c.H = H;
      c.direction = "bidirectional";
      c.bias = c.h0 = c.c0 = c.peep = c.lens = true;
      c.clip = double(2.5f);
      c.threads = 2;
      check(c, seed++);
      c.lbr = true;
      c.layout = 1;
      c.h0 = false;
      c.dt = DType::kFloat64;
      check(c, seed++);
    }
}

TEST(Rnn, ZeroLengthSequenceKeepsInitialState) {
  Case c;
  c.op = "LSTM";
  c.seq = 3;
  c.batch = 3;
  c.h0 = c.c0 = c.lens = c.bias = true;
  c.direction = "bidirectional";
  c.fixed_lens = {0, 3, 1};
  for (int64_t layout : {0, 1}) {
    c.layout = layout;
    check(c, 50);
  }
  c.fixed_lens = {0, 0, 0};
  check(c, 51);
}

TEST(Rnn, OnlyYhRequested) {
  // A node naming only Y_h (Y omitted): outputs {"", "y1"}.
  std::mt19937 rng(61);
  const int64_t S = 4, N = 2, I = 3, H = 5;
  Tensor x = random_tensor(DType::kFloat32, {S, N, I}, rng);
  Tensor w = random_tensor(DType::kFloat32, {1, 4 * H, I}, rng);
  Tensor r = random_tensor(DType::kFloat32, {1, 4 * H, H}, rng);
  ir::Model m;
  m.opsets = {{"", 14}};
  m.graph = std::make_shared<ir::Graph>();
  ir::Node n;
  n.op_type = "LSTM";
  n.name = "lstm";
  n.inputs = {"x", "w", "r"};
  n.outputs = {"", "yh"};
  n.attrs = {attr_int("hidden_size", H)};
  m.graph->nodes.push_back(n);
  for (const char* in : {"x", "w", "r"}) m.graph->inputs.push_back(ir::ValueInfo{in, {}, ""});
  m.graph->outputs.push_back(ir::ValueInfo{"yh", {}, ""});
  auto got = run_model(m, {x, w, r});
  RunOptions o;
  o.num_outputs = 3;
  auto all = run_node("LSTM", {x, w, r}, {attr_int("hidden_size", H)}, o);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(all_close(got[0], {1, N, H}, to_double(all[1]), 0, 0));
}

TEST(Rnn, VectorSigmoidTanhMatchLibm) {
  std::vector<float> xs;
  for (double v = -100; v <= 100; v += 0.01) xs.push_back(float(v));
  for (float v : {0.f, -0.f, 1e-8f, -1e-8f, 1e-4f, 7.9f, -7.9f, 88.f, -88.f, 1e30f, -1e30f}) xs.push_back(v);
  std::vector<float> s = xs, t = xs;
  onnxtrain::kernels::cpu::rnn_test_sigmoid_f32(s.data(), int64_t(s.size()));
  onnxtrain::kernels::cpu::rnn_test_tanh_f32(t.data(), int64_t(t.size()));
  double worst_s = 0, worst_t = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i];
    const double es = 1 / (1 + std::exp(-x)), et = std::tanh(x);
    worst_s = std::max(worst_s, std::fabs(s[i] - es) / std::max(es, 1e-30) * (es > 1e-30));
    worst_t = std::max(worst_t, std::fabs(t[i] - et) / std::max(std::fabs(et), 1e-30) * (std::fabs(et) > 0));
  }
  EXPECT_LT(worst_s, 5e-7) << "sigmoid relative error";
  EXPECT_LT(worst_t, 5e-7) << "tanh relative error";
  float nan = std::nanf("");
  onnxtrain::kernels::cpu::rnn_test_tanh_f32(&nan, 1);
  EXPECT_TRUE(std::isnan(nan));
}

// ---------------------------------------------------------------- errors
namespace {
std::string error_of(const std::string& op, const std::vector<Tensor>& inputs, const std::vector<ir::Attribute>& attrs,
                     size_t outputs = 2) {
  RunOptions o;
  o.num_outputs = outputs;
  try {
    run_node(op, inputs, attrs, o);
  } catch (const onnxtrain::Error& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST(Rnn, Errors) {
  std::mt19937 rng(71);
  auto T = [&](Shape s, DType dt = DType::kFloat32) { return random_tensor(dt, s, rng); };
  const auto h3 = attr_int("hidden_size", 3);
  auto expect_error = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find("node_LSTM"), std::string::npos) << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  };
  expect_error(error_of("LSTM", {T({2, 1, 4}), T({1, 12, 5}), T({1, 12, 3})}, {h3}, 3), "W has shape");
  expect_error(error_of("LSTM", {T({2, 1, 4}), T({1, 12, 4}), T({1, 12, 3})}, {attr_int("hidden_size", 4)}, 3),
               "hidden_size");
  expect_error(error_of("LSTM", {T({2, 4}), T({1, 12, 4}), T({1, 12, 3})}, {h3}, 3), "rank 3");
  expect_error(error_of("LSTM", {T({2, 1, 4}), T({1, 12, 4}), T({1, 12, 3})}, {h3, attr_string("direction", "up")}, 3),
               "direction");
  ir::Attribute bad;
  bad.name = "activations";
  bad.type = ir::AttrType::kStrings;
  bad.strings = {"Sigmoid", "Tanh", "Swish"};
  expect_error(error_of("LSTM", {T({2, 1, 4}), T({1, 12, 4}), T({1, 12, 3})}, {h3, bad}, 3), "Swish");
  bad.strings = {"Sigmoid", "Tanh"};
  expect_error(error_of("LSTM", {T({2, 1, 4}), T({1, 12, 4}), T({1, 12, 3})}, {h3, bad}, 3), "activations");
  expect_error(error_of("LSTM", {T({2, 1, 4}), T({1, 12, 4}, DType::kFloat64), T({1, 12, 3})}, {h3}, 3),
               "element type");
  Tensor lens = Tensor::from_vector<int32_t>({1}, {3});
  expect_error(error_of("LSTM", {T({2, 1, 4}), T({1, 12, 4}), T({1, 12, 3}), Tensor(), lens}, {h3}, 3),
               "sequence_lens[0] = 3");
  Tensor neg = Tensor::from_vector<int32_t>({1}, {-1});
  expect_error(error_of("LSTM", {T({2, 1, 4}), T({1, 12, 4}), T({1, 12, 3}), Tensor(), neg}, {h3}, 3),
               "sequence_lens[0] = -1");
  expect_error(error_of("LSTM", {T({2, 1, 4}), T({1, 12, 4}), T({1, 12, 3}), T({1, 23})}, {h3}, 3), "B has shape");
  expect_error(error_of("LSTM", {T({2, 1, 4}), T({1, 12, 4}), T({1, 12, 3}), Tensor(), Tensor(), T({1, 2, 3})}, {h3}, 3),
               "initial_h has shape");
  expect_error(error_of("LSTM", {T({2, 1, 4}), T({1, 12, 4}), T({1, 12, 3})}, {h3, attr_float("clip", -1.f)}, 3), "clip");
  EXPECT_NE(error_of("GRU", {T({2, 1, 4}, DType::kInt32), T({1, 9, 4}, DType::kInt32), T({1, 9, 3}, DType::kInt32)},
                     {h3})
                .find("not supported"),
            std::string::npos);
}

TEST(Rnn, DegenerateSizes) {
  // No time steps (Y empty, Y_h = initial_h), no batch entries, no input features.
  uint32_t seed = 81;
  for (const char* op : {"LSTM", "GRU", "RNN"})
    for (auto [S, N, I] : {std::tuple<int64_t, int64_t, int64_t>{0, 2, 3}, {3, 0, 3}, {2, 2, 0}}) {
      Case c;
      c.op = op;
      c.seq = S;
      c.batch = N;
      c.input = I;
      c.direction = "bidirectional";
      c.bias = c.h0 = c.c0 = true;
      for (DType dt : {DType::kFloat32, DType::kFloat64}) {
        c.dt = dt;
        check(c, seed++);
      }
    }
}
