// Gradients of LSTM, GRU and RNN: finite differences in float64 (every direction, both layouts,
// sequence_lens, initial states, peepholes, clip, input_forget, linear_before_reset, several
// activation sets, opsets 13 (version 7 of the operators, no layout) and 14, subsets of the outputs in the loss), and the float32 kernels
// (packed gemms, vector activations, units split across threads) against the float64 ones.
#include <cmath>
#include <sstream>

#include "autodiff/builder.h"
#include "grad_check.h"
#include "ir/onnx_io.h"
#include "runtime/executor.h"

using namespace ot_test;
using onnxtrain::Value;

namespace {

struct Rnn {
  std::string op = "LSTM";
  int64_t seq = 3, batch = 2, input = 3, H = 4;
  std::string direction = "forward";
  int64_t layout = 0;
  bool bias = true, h0 = true, c0 = true, peep = false;
  std::vector<int32_t> lens;  // empty: no sequence_lens
  bool lbr = false, input_forget = false;
  double clip = 0;
  std::vector<std::string> acts;
  std::vector<float> alphas, betas;
  int64_t opset = 14;
  std::vector<size_t> loss_outputs;  // empty: every output
  size_t num_outputs = 0;            // 0: all the operator has

  int64_t gates() const { return op == "LSTM" ? 4 : op == "GRU" ? 3 : 1; }
  int64_t dirs() const { return direction == "bidirectional" ? 2 : 1; }
};

GradCheck spec(const Rnn& c, uint32_t seed, DType dt = DType::kFloat64) {
  std::mt19937 rng(seed);
  const int64_t S = c.seq, N = c.batch, I = c.input, H = c.H, G = c.gates(), D = c.dirs();
  const bool lstm = c.op == "LSTM";
  GradCheck g;
  g.op = c.op;
  g.opset = c.opset;
  g.seed = seed;
  auto rnd = [&](Shape s, double scale) { return random_tensor(dt, s, rng, -scale, scale); };
  const Shape st = c.layout ? Shape{N, D, H} : Shape{D, N, H};
  g.inputs = {rnd(c.layout ? Shape{N, S, I} : Shape{S, N, I}, 1.0), rnd({D, G * H, I}, 0.7), rnd({D, G * H, H}, 0.7)};
  g.inputs.push_back(c.bias ? rnd({D, 2 * G * H}, 0.5) : Tensor());
  g.inputs.push_back(c.lens.empty() ? Tensor() : Tensor::from_vector<int32_t>({N}, c.lens));
  g.inputs.push_back(c.h0 ? rnd(st, 1.0) : Tensor());
  if (lstm) {
    g.inputs.push_back(c.c0 ? rnd(st, 1.0) : Tensor());
    g.inputs.push_back(c.peep ? rnd({D, 3 * H}, 0.5) : Tensor());
  }
  while (!g.inputs.back().defined()) g.inputs.pop_back();
  g.attrs = {attr_int("hidden_size", H), attr_string("direction", c.direction)};
  if (c.opset >= 14) g.attrs.push_back(attr_int("layout", c.layout));
  if (c.clip > 0) g.attrs.push_back(attr_float("clip", float(c.clip)));
  if (c.op == "GRU") g.attrs.push_back(attr_int("linear_before_reset", c.lbr));
  if (lstm) g.attrs.push_back(attr_int("input_forget", c.input_forget));
  if (!c.acts.empty()) {
    ir::Attribute a;
    a.name = "activations";
    a.type = ir::AttrType::kStrings;
    a.strings = c.acts;
    g.attrs.push_back(a);
  }
  if (!c.alphas.empty()) g.attrs.push_back(attr_floats("activation_alpha", c.alphas));
  if (!c.betas.empty()) g.attrs.push_back(attr_floats("activation_beta", c.betas));
  g.num_outputs = c.num_outputs ? c.num_outputs : (lstm ? 3 : 2);
  g.outputs_in_loss.clear();
  if (c.loss_outputs.empty())
    for (size_t k = 0; k < g.num_outputs; ++k) g.outputs_in_loss.push_back(k);
  else
    g.outputs_in_loss = c.loss_outputs;
  g.rtol = 1e-5;
  g.atol = 1e-8;
  return g;
}

void check(const Rnn& c, uint32_t seed) { EXPECT_TRUE(check_gradient(spec(c, seed))); }

}  // namespace

// ---------------------------------------------------------------- LSTM
GRAD_COVERS(GradRnn, LstmDirections, "LSTM");
TEST(GradRnn, LstmDirections) {
  uint32_t seed = 100;
  for (const char* dir : {"forward", "reverse", "bidirectional"}) {
    Rnn c;
    c.direction = dir;
    check(c, seed++);
    c.h0 = c.c0 = c.bias = false;  // zero initial states, no bias
    check(c, seed++);
  }
}

TEST(GradRnn, LstmLayoutAndSequenceLens) {
  uint32_t seed = 110;
  for (int64_t layout : {0, 1})
    for (const char* dir : {"forward", "reverse", "bidirectional"}) {
      Rnn c;
      c.seq = 4;
      c.batch = 3;
      c.layout = layout;
      c.direction = dir;
      c.lens = {4, 2, 0};  // full, partial, empty
      check(c, seed++);
    }
}

TEST(GradRnn, LstmPeepholesClipInputForget) {
  uint32_t seed = 120;
  Rnn c;
  c.peep = true;
  c.direction = "bidirectional";
  check(c, seed++);
  c.clip = 0.9;  // some pre-activations cut (zero gradient there), others not
  c.lens = {3, 1};
  check(c, seed++);
  c.input_forget = true;
  c.layout = 1;
  check(c, seed++);
}

TEST(GradRnn, LstmActivationSets) {
  uint32_t seed = 130;
  Rnn c;
  c.direction = "bidirectional";
  c.peep = true;
  c.acts = {"HardSigmoid", "Elu", "Softsign", "Sigmoid", "LeakyRelu", "ScaledTanh"};
  c.alphas = {0.3f, 0.8f, 0.1f, 0.9f};
  c.betas = {0.6f, 1.1f};
  check(c, seed++);
  c.acts = {"Sigmoid", "Affine", "Softplus"};
  c.direction = "reverse";
  c.alphas = {0.7f};
  c.betas = {0.2f};
  check(c, seed++);
  c.acts = {"sigmoid", "Tanh", "Relu"};  // names are case-insensitive
  c.alphas = c.betas = {};
  check(c, seed++);
}

TEST(GradRnn, LstmOpset13AndOutputSubsets) {
  uint32_t seed = 140;
  Rnn c;
  c.opset = 13;  // LSTM-7 / GRU-7 / RNN-7: no layout
  c.direction = "bidirectional";
  c.lens = {2, 3};
  check(c, seed++);
  c.opset = 14;
  c.loss_outputs = {1};  // only Y_h reaches the loss
  check(c, seed++);
  c.loss_outputs = {2};  // only Y_c
  check(c, seed++);
  c.num_outputs = 1;  // the node names only Y
  c.loss_outputs = {0};
  check(c, seed++);
}

// ---------------------------------------------------------------- GRU
GRAD_COVERS(GradRnn, GruDirectionsAndLinearBeforeReset, "GRU");
TEST(GradRnn, GruDirectionsAndLinearBeforeReset) {
  uint32_t seed = 200;
  for (bool lbr : {false, true})
    for (const char* dir : {"forward", "reverse", "bidirectional"}) {
      Rnn c;
      c.op = "GRU";
      c.lbr = lbr;
      c.direction = dir;
      check(c, seed++);
    }
}

TEST(GradRnn, GruLayoutLensClip) {
  uint32_t seed = 210;
  for (bool lbr : {false, true})
    for (int64_t layout : {0, 1}) {
      Rnn c;
      c.op = "GRU";
      c.lbr = lbr;
      c.layout = layout;
      c.seq = 4;
      c.batch = 3;
      c.direction = "bidirectional";
      c.lens = {1, 4, 0};
      c.clip = 0.8;
      c.h0 = layout == 0;
      check(c, seed++);
    }
}

TEST(GradRnn, GruActivationSetsAndOpset13) {
  uint32_t seed = 220;
  Rnn c;
  c.op = "GRU";
  c.direction = "bidirectional";
  c.acts = {"HardSigmoid", "ThresholdedRelu", "Sigmoid", "Softplus"};
  c.alphas = {0.25f, 0.05f};
  c.betas = {0.45f};
  check(c, seed++);
  c.acts = {"Sigmoid", "Affine"};
  c.alphas = {0.5f};
  c.betas = {0.2f};
  c.lbr = true;
  check(c, seed++);
  c.acts = {};
  c.alphas = c.betas = {};
  c.opset = 13;  // LSTM-7 / GRU-7 / RNN-7: no layout
  c.lens = {2, 3};
  check(c, seed++);
  c.opset = 14;
  c.loss_outputs = {1};
  check(c, seed++);
}

// ---------------------------------------------------------------- RNN
GRAD_COVERS(GradRnn, RnnDirectionsLayoutLens, "RNN");
TEST(GradRnn, RnnDirectionsLayoutLens) {
  uint32_t seed = 300;
  for (const char* dir : {"forward", "reverse", "bidirectional"})
    for (int64_t layout : {0, 1}) {
      Rnn c;
      c.op = "RNN";
      c.direction = dir;
      c.layout = layout;
      c.seq = 4;
      c.lens = {4, 2};
      check(c, seed++);
    }
}

TEST(GradRnn, RnnActivationsClipOpset13) {
  uint32_t seed = 310;
  Rnn c;
  c.op = "RNN";
  c.direction = "bidirectional";
  for (auto acts : std::vector<std::vector<std::string>>{{"Relu", "Elu"}, {"Softsign", "LeakyRelu"}, {"ScaledTanh", "Affine"}}) {
    c.acts = acts;
    check(c, seed++);
  }
  c.acts = {};
  c.clip = 0.8;
  c.opset = 13;  // LSTM-7 / GRU-7 / RNN-7: no layout
  check(c, seed++);
}

// ---------------------------------------------------------------- float32 kernels vs float64
namespace {

// d loss / d (float inputs) of check_gradient's model, through the autodiff builder, in the
// element type of spec's inputs, with `threads` threads.
std::vector<Tensor> node_gradients(const GradCheck& s, int threads, const std::vector<Tensor>& weights) {
  std::vector<size_t> wrt;
  std::vector<std::string> xs;
  std::vector<Value> feeds;
  for (size_t i = 0; i < s.inputs.size(); ++i)
    if (s.inputs[i].defined() && onnxtrain::dtype_is_float(s.inputs[i].dtype())) {
      wrt.push_back(i);
      xs.push_back("x" + std::to_string(i));
      feeds.push_back(Value::of(s.inputs[i]));
    }
  ir::Model gm = onnxtrain::autodiff::build_gradient_model(forward_model(s, wrt, weights), {"loss"}, xs, "loss");
  onnxtrain::ExecOptions eo;
  eo.num_threads = threads;
  onnxtrain::runtime::GraphExecutor ex(gm.graph, gm.opsets, eo);
  std::vector<const Value*> ptrs;
  for (auto& v : feeds) ptrs.push_back(&v);
  auto out = ex.run(ptrs);
  std::vector<Tensor> r;
  for (size_t i = 1; i < out.size(); ++i) r.push_back(out[i].tensor);
  return r;
}

Tensor cast_to(const Tensor& t, DType dt) { return t.defined() && onnxtrain::dtype_is_float(t.dtype()) ? from_double(dt, t.shape(), to_double(t)) : t; }

}  // namespace

TEST(GradRnn, Float32ThreadedKernelsMatchFloat64) {
  // H = 77 and 130 with two threads: units split in chunks (32 + 45, 64 + 66), float32 packed
  // recurrence gemms and vector sigmoid/tanh.
  uint32_t seed = 400;
  for (const char* op : {"LSTM", "GRU", "RNN"})
    for (int64_t H : {77, 130})
      for (bool lbr : {false, true}) {
        if (lbr && std::string(op) != "GRU") continue;
        Rnn c;
        c.op = op;
        c.H = H;
        c.seq = 5;
        c.batch = 4;
        c.input = 9;
        c.lbr = lbr;
        c.peep = true;
        c.direction = "bidirectional";
        c.layout = H == 77;
        c.lens = {5, 3, 0, 4};
        c.clip = H == 130 ? 1.5 : 0;
        GradCheck s64 = spec(c, seed);
        GradCheck s32 = s64;
        for (auto& t : s32.inputs) t = cast_to(t, DType::kFloat32);
        auto ys = run_node(s64.op, s64.inputs, s64.attrs, RunOptions{s64.opset, "", s64.num_outputs});
        std::mt19937 rng(seed);
        std::vector<Tensor> w64, w32;
        for (const auto& y : ys) {
          w64.push_back(random_tensor(DType::kFloat64, y.shape(), rng, -1, 1));
          w32.push_back(cast_to(w64.back(), DType::kFloat32));
        }
        auto want = node_gradients(s64, 1, w64);
        for (int threads : {1, 2}) {
          auto got = node_gradients(s32, threads, w32);
          ASSERT_EQ(got.size(), want.size());
          for (size_t i = 0; i < got.size(); ++i)
            EXPECT_TRUE(all_close(got[i], want[i].shape(), to_double(want[i]), 2e-3, 2e-4))
                << op << " H " << H << " lbr " << lbr << " threads " << threads << " gradient " << i << " seed " << seed;
        }
        ++seed;
      }
}

TEST(GradRnn, ForwardBecomesTrainingVariant) {
  // The gradient graph runs the forward once: the LSTM is replaced by com.onnxtrain.LSTMTrain
  // (same outputs plus the reserve) feeding one LSTMGrad; unneeded gradient outputs stay unnamed.
  Rnn c;
  c.h0 = c.c0 = c.bias = false;
  c.num_outputs = 2;     // Y, Y_h
  c.loss_outputs = {1};  // only Y_h in the loss
  GradCheck s = spec(c, 500);
  std::mt19937 rng(500);
  const std::vector<Tensor> weights = {random_tensor(DType::kFloat64, {1, 2, 4}, rng)};
  ir::Model gm = onnxtrain::autodiff::build_gradient_model(forward_model(s, {1}, weights), {"loss"}, {"x1"}, "loss");
  int lstm = 0, train = 0, grad = 0;
  for (const auto& node : gm.graph->nodes) {
    lstm += node.op_type == "LSTM";
    if (node.op_type == "LSTMTrain") {
      ++train;
      EXPECT_EQ(node.domain, "com.onnxtrain");
      EXPECT_EQ(node.outputs.size(), 4u);
      EXPECT_EQ(node.outputs[1], "y1");
    }
    if (node.op_type == "LSTMGrad") {
      ++grad;
      ASSERT_EQ(node.outputs.size(), 7u);
      for (size_t k = 0; k < 7; ++k) EXPECT_EQ(node.outputs[k].empty(), k != 1) << k;  // only dW
    }
  }
  EXPECT_EQ(lstm, 0);
  EXPECT_EQ(train, 1);
  EXPECT_EQ(grad, 1);
}

TEST(GradRnn, SymbolicShapes) {
  // Inputs declared with symbolic dimensions: nothing in the rule depends on static shapes.
  for (const char* op : {"LSTM", "GRU"}) {
    Rnn c;
    c.op = op;
    c.direction = "bidirectional";
    c.lens = {3, 1};
    GradCheck s = spec(c, 600);
    s.symbolic_shapes = true;
    EXPECT_TRUE(check_gradient(s)) << op;
  }
}

TEST(GradRnn, PreviewGradientOperatorIsLowered) {
  // ai.onnx.preview.training Gradient over an LSTM: lower_gradient_ops swaps the LSTM for its
  // training variant in place and adds the backward; results equal the builder's.
  Rnn c;
  c.direction = "bidirectional";
  GradCheck s = spec(c, 610);
  std::mt19937 rng(610);
  const auto ys = run_node(s.op, s.inputs, s.attrs, RunOptions{s.opset, "", s.num_outputs});
  std::vector<Tensor> weights;
  for (const auto& y : ys) weights.push_back(random_tensor(DType::kFloat64, y.shape(), rng));
  const std::vector<size_t> wrt = {0, 1, 2};
  ir::Model m = forward_model(s, wrt, weights);
  ir::Node g;
  g.op_type = "Gradient";
  g.domain = "ai.onnx.preview.training";
  g.name = "gradient";
  g.inputs = {"x0", "x1", "x2"};
  g.outputs = {"g0", "g1", "g2"};
  ir::Attribute xs;
  xs.name = "xs";
  xs.type = ir::AttrType::kStrings;
  xs.strings = g.inputs;
  g.attrs = {xs, attr_string("y", "loss")};
  m.graph->nodes.push_back(g);
  for (const auto& o : g.outputs) m.graph->outputs.push_back(ir::ValueInfo{o, {}, ""});
  m.opsets["ai.onnx.preview.training"] = 1;
  onnxtrain::autodiff::lower_gradient_ops(m);
  std::vector<Tensor> feeds;
  for (size_t i : wrt) feeds.push_back(s.inputs[i]);
  auto got = run_model(m, feeds);
  auto want = node_gradients(s, 1, weights);
  ASSERT_EQ(got.size(), 4u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(all_close(got[1 + i], want[i].shape(), to_double(want[i]), 1e-12, 1e-12)) << i;
}
