// onnxruntime's com.microsoft operators of its training artifacts (InPlaceAccumulatorV2,
// AdamWOptimizer, SGDOptimizerV2) run by an InferenceSession, as onnxruntime runs them: fed tensors
// and sequences are updated in place. References: the update rules written out in double (PyTorch's
// AdamW for adam_mode 0, Hugging Face's for mode 1, plain SGD); onnxruntime-web itself checks the
// same operators in tests/python/test_ort_checkpoint.py.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <random>

#include "onnxtrain/session.h"
#include "test_util.h"

using namespace onnxtrain;

namespace {

constexpr const char* kMs = "com.microsoft";

void tensor_input(onnx::GraphProto* g, const std::string& name, int elem, const std::vector<int64_t>& dims) {
  auto* v = g->add_input();
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem);
  for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
}

void sequence_input(onnx::GraphProto* g, const std::string& name) {
  auto* v = g->add_input();
  v->set_name(name);
  v->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::FLOAT);
}

void flag_output(onnx::GraphProto* g, const std::string& name) {
  auto* v = g->add_output();
  v->set_name(name);
  v->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::BOOL);
}

// A model of one node of domain com.microsoft.
std::string one_node_model(const std::string& op, const std::vector<std::string>& inputs,
                           const std::vector<std::string>& outputs, const std::function<void(onnx::GraphProto*)>& io,
                           const std::vector<std::pair<std::string, float>>& float_attrs = {},
                           const std::vector<std::pair<std::string, int64_t>>& int_attrs = {}) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(17);
  o = m.add_opset_import();
  o->set_domain(kMs);
  o->set_version(1);
  auto* g = m.mutable_graph();
  g->set_name(op);
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_domain(kMs);
  for (const auto& i : inputs) n->add_input(i);
  for (const auto& x : outputs) n->add_output(x);
  for (const auto& [k, v] : float_attrs) {
    auto* a = n->add_attribute();
    a->set_name(k);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  for (const auto& [k, v] : int_attrs) {
    auto* a = n->add_attribute();
    a->set_name(k);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  io(g);
  return m.SerializeAsString();
}

Value seq(std::vector<Tensor> ts) {
  Value v;
  v.kind = Value::Kind::kSequence;
  v.sequence = std::move(ts);
  return v;
}

Tensor random_tensor(std::mt19937& rng, const Shape& s, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  Tensor t = Tensor::empty(DType::kFloat32, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

std::vector<double> doubles(const Tensor& t) {
  std::vector<double> r(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) r[size_t(i)] = t.data<float>()[i];
  return r;
}

void expect_near(const Tensor& t, const std::vector<double>& want, double rtol, const std::string& what) {
  ASSERT_EQ(size_t(t.numel()), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(t.data<float>()[i], want[i], rtol * std::max(1.0, std::abs(want[i]))) << what << " [" << i << "]";
}

}  // namespace

TEST(OrtArtifactOps, InPlaceAccumulatorV2UpdatesTheBufferInPlace) {
  for (bool named_out : {false, true}) {
    std::vector<std::string> outs = {"updated"};
    if (named_out) outs.push_back("buffer_out");
    const std::string model = one_node_model("InPlaceAccumulatorV2", {"buffer", "value", "overwrite"}, outs,
                                             [&](onnx::GraphProto* g) {
                                               tensor_input(g, "buffer", onnx::TensorProto::FLOAT, {2, 3});
                                               tensor_input(g, "value", onnx::TensorProto::FLOAT, {2, 3});
                                               tensor_input(g, "overwrite", onnx::TensorProto::BOOL, {1});
                                               flag_output(g, "updated");
                                               if (named_out) flag_output(g, "buffer_out");
                                             });
    if (named_out) {  // output 1 is a float tensor: fix its declared type
      onnx::ModelProto m;
      m.ParseFromString(model);
      m.mutable_graph()->mutable_output(1)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
      InferenceSession s(m.SerializeAsString().data(), m.ByteSizeLong());
      Tensor buf = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
      const Tensor val = Tensor::from_vector<float>({2, 3}, {.5f, .5f, .5f, .5f, .5f, -1});
      auto r = s.run({}, {{"buffer", buf}, {"value", val}, {"overwrite", Tensor::from_vector<bool>({1}, {false})}});
      EXPECT_TRUE(r[0].data<bool>()[0]);
      expect_near(r[1], {1.5, 2.5, 3.5, 4.5, 5.5, 5}, 0, "buffer_out");
      expect_near(buf, {1.5, 2.5, 3.5, 4.5, 5.5, 5}, 0, "buffer");
      continue;
    }
    InferenceSession s(model.data(), model.size());
    Tensor buf = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
    const Tensor val = Tensor::from_vector<float>({2, 3}, {10, 20, 30, 40, 50, 60});
    auto r = s.run({"updated"}, {{"buffer", buf}, {"value", val}, {"overwrite", Tensor::from_vector<bool>({1}, {true})}});
    EXPECT_TRUE(r[0].data<bool>()[0]);
    expect_near(buf, {10, 20, 30, 40, 50, 60}, 0, "overwritten");
    s.run({"updated"}, {{"buffer", buf}, {"value", val}, {"overwrite", Tensor::from_vector<bool>({1}, {false})}});
    expect_near(buf, {20, 40, 60, 80, 100, 120}, 0, "accumulated");
  }
}

TEST(OrtArtifactOps, AdamWOptimizerMatchesPyTorchAndHuggingFaceInDouble) {
  std::mt19937 rng(7);
  for (int64_t mode : {0, 1}) {
    const std::string model = one_node_model(
        "AdamWOptimizer", {"lr", "step", "params", "grads", "m1", "m2", "signal"}, {"updated"},
        [](onnx::GraphProto* g) {
          tensor_input(g, "lr", onnx::TensorProto::FLOAT, {1});
          tensor_input(g, "step", onnx::TensorProto::INT64, {1});
          for (const char* n : {"params", "grads", "m1", "m2"}) sequence_input(g, n);
          tensor_input(g, "signal", onnx::TensorProto::BOOL, {1});
          flag_output(g, "updated");
        },
        {{"alpha", 0.85f}, {"beta", 0.99f}, {"epsilon", 1e-6f}, {"weight_decay", 0.1f}},
        {{"adam_mode", mode}, {"correct_bias", 1}});
    InferenceSession s(model.data(), model.size());
    const std::vector<Shape> shapes = {{3, 4}, {5}};
    std::vector<Tensor> w, g, m, v;
    for (const Shape& sh : shapes) {
      w.push_back(random_tensor(rng, sh, -1, 1));
      g.push_back(random_tensor(rng, sh, -1, 1));
      m.push_back(random_tensor(rng, sh, -0.1f, 0.1f));
      v.push_back(random_tensor(rng, sh, 0, 0.01f));
    }
    std::vector<std::vector<double>> w0, m0, v0;
    for (size_t k = 0; k < w.size(); ++k) w0.push_back(doubles(w[k])), m0.push_back(doubles(m[k])), v0.push_back(doubles(v[k]));
    const double lr = 0.01, a = 0.85f, b = 0.99f, eps = 1e-6f, wd = 0.1f;
    const int64_t t = 3;
    // Skipped update first: nothing changes.
    auto r = s.run_values({}, {{"lr", Value::of(Tensor::from_vector<float>({1}, {float(lr)}))},
                               {"step", Value::of(Tensor::from_vector<int64_t>({1}, {t}))},
                               {"params", seq(w)}, {"grads", seq(g)}, {"m1", seq(m)}, {"m2", seq(v)},
                               {"signal", Value::of(Tensor::from_vector<bool>({1}, {false}))}});
    EXPECT_FALSE(r[0].tensor.data<bool>()[0]);
    expect_near(w[0], w0[0], 0, "skipped");
    r = s.run_values({}, {{"lr", Value::of(Tensor::from_vector<float>({1}, {float(lr)}))},
                          {"step", Value::of(Tensor::from_vector<int64_t>({1}, {t}))},
                          {"params", seq(w)}, {"grads", seq(g)}, {"m1", seq(m)}, {"m2", seq(v)},
                          {"signal", Value::of(Tensor::from_vector<bool>({1}, {true}))}});
    EXPECT_TRUE(r[0].tensor.data<bool>()[0]);
    for (size_t k = 0; k < w.size(); ++k) {
      const std::vector<double> gk = doubles(g[k]);
      std::vector<double> we(w0[k].size()), me(we.size()), ve(we.size());
      const double ca = 1 - std::pow(a, double(t)), cb = 1 - std::pow(b, double(t));
      for (size_t i = 0; i < we.size(); ++i) {
        me[i] = a * m0[k][i] + (1 - a) * gk[i];
        ve[i] = b * v0[k][i] + (1 - b) * gk[i] * gk[i];
        if (mode == 0) {  // torch.optim.AdamW
          const double wdec = w0[k][i] * (1 - lr * wd);
          we[i] = wdec - lr / ca * me[i] / (std::sqrt(ve[i] / cb) + eps);
        } else {  // transformers.AdamW: corrected step size, decay after the step
          const double step = w0[k][i] - lr * std::sqrt(cb) / ca * me[i] / (std::sqrt(ve[i]) + eps);
          we[i] = step - lr * wd * step;
        }
      }
      expect_near(w[k], we, 2e-6, "weights, mode " + std::to_string(mode));
      expect_near(m[k], me, 2e-6, "momentum 1");
      expect_near(v[k], ve, 2e-6, "momentum 2");
    }
  }
}

TEST(OrtArtifactOps, SGDOptimizerV2AndBadInputs) {
  const std::string model = one_node_model("SGDOptimizerV2", {"lr", "params", "grads"}, {"done"}, [](onnx::GraphProto* g) {
    tensor_input(g, "lr", onnx::TensorProto::FLOAT, {1});
    sequence_input(g, "params");
    sequence_input(g, "grads");
    flag_output(g, "done");
  });
  InferenceSession s(model.data(), model.size());
  Tensor w = Tensor::from_vector<float>({3}, {1, 2, 3});
  const Tensor g = Tensor::from_vector<float>({3}, {10, -10, 0.5f});
  auto r = s.run_values({}, {{"lr", Value::of(Tensor::from_vector<float>({1}, {0.1f}))}, {"params", seq({w})},
                             {"grads", seq({g})}});
  EXPECT_TRUE(r[0].tensor.data<bool>()[0]);
  expect_near(w, {0, 3, 2.95}, 1e-7, "sgd");
  // Counts and shapes that differ, an empty sequence: errors naming the node.
  auto fails = [&](std::vector<Tensor> ws, std::vector<Tensor> gs, const std::string& want) {
    try {
      s.run_values({}, {{"lr", Value::of(Tensor::from_vector<float>({1}, {0.1f}))}, {"params", seq(ws)},
                        {"grads", seq(gs)}});
      ADD_FAILURE() << "no error; expected " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  fails({w}, {g, g}, "holds 2 tensors, the weights 1");
  fails({w}, {Tensor::from_vector<float>({2}, {1, 2})}, "has shape [2], weight 0 [3]");
  fails({}, {}, "the weights sequence is empty");
  const std::string bad = one_node_model("AdamWOptimizer", {"lr", "step", "p", "g", "m", "v"}, {"u"},
                                         [](onnx::GraphProto* g) {
                                           tensor_input(g, "lr", onnx::TensorProto::FLOAT, {1});
                                           tensor_input(g, "step", onnx::TensorProto::INT64, {1});
                                           for (const char* n : {"p", "g", "m", "v"}) sequence_input(g, n);
                                           flag_output(g, "u");
                                         },
                                         {}, {{"adam_mode", 2}});
  EXPECT_THROW(InferenceSession(bad.data(), bad.size()).run_values({}, {}), Error);
}

// SoftmaxCrossEntropyLossInternal (ignore_index as an input) and its Grad against log-softmax and
// its gradient written out in double.
TEST(OrtArtifactOps, SoftmaxCrossEntropyLossInternalAndGradMatchDouble) {
  const int64_t N = 3, C = 4;
  const std::vector<float> x = {0.5f, -1, 2, 0.25f, 1, 1, -2, 0, 3, -0.5f, 0.75f, 1.5f};
  const std::vector<int64_t> labels = {2, 1, 3};
  const Tensor scores = Tensor::from_vector<float>({N, C}, x);
  const Tensor lab = Tensor::from_vector<int64_t>({N}, labels);
  const Tensor ignore = Tensor::from_vector<int64_t>({}, {1});  // the second sample is ignored
  ot_test::RunOptions o;
  o.domain = "com.microsoft";
  o.num_outputs = 2;
  const auto out = ot_test::run_node("SoftmaxCrossEntropyLossInternal", {scores, lab, Tensor(), ignore},
                                     {ot_test::attr_string("reduction", "mean")}, o);
  std::vector<double> lp(N * C);
  double loss = 0;
  for (int64_t n = 0; n < N; ++n) {
    double m = -1e30, s = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, double(x[n * C + c]));
    for (int64_t c = 0; c < C; ++c) s += std::exp(double(x[n * C + c]) - m);
    for (int64_t c = 0; c < C; ++c) lp[n * C + c] = double(x[n * C + c]) - m - std::log(s);
    if (n != 1) loss -= lp[n * C + labels[n]];
  }
  loss /= 2;  // mean over the two samples not ignored
  EXPECT_NEAR(out[0].data<float>()[0], loss, 1e-5);
  for (int64_t i = 0; i < N * C; ++i) EXPECT_NEAR(out[1].data<float>()[i], lp[i], 1e-5);
  o.num_outputs = 1;
  const auto d = ot_test::run_node("SoftmaxCrossEntropyLossInternalGrad",
                                   {Tensor::from_vector<float>({}, {2.0f}), out[1], lab, Tensor(), ignore},
                                   {ot_test::attr_string("reduction", "mean")}, o);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const double want = n == 1 ? 0.0 : 2.0 / 2 * (std::exp(lp[n * C + c]) - (c == labels[n] ? 1.0 : 0.0));
      EXPECT_NEAR(d[0].data<float>()[n * C + c], want, 1e-5) << n << "," << c;
    }
}

// SoftmaxGrad_13 / LogSoftmaxGrad_13 (one axis, default -1) against the Jacobian products in double.
TEST(OrtArtifactOps, SoftmaxGrad13AndLogSoftmaxGrad13MatchDouble) {
  const std::vector<float> y_soft = {0.2f, 0.3f, 0.5f, 0.6f, 0.1f, 0.3f};
  const std::vector<float> dy = {1, -2, 0.5f, 0.25f, 3, -1};
  ot_test::RunOptions o;
  o.domain = "com.microsoft";
  const auto s = ot_test::run_node("SoftmaxGrad_13", {Tensor::from_vector<float>({2, 3}, dy),
                                                       Tensor::from_vector<float>({2, 3}, y_soft)}, {}, o);
  std::vector<float> y_log(6);
  for (int i = 0; i < 6; ++i) y_log[size_t(i)] = std::log(y_soft[size_t(i)]);
  const auto l = ot_test::run_node("LogSoftmaxGrad_13", {Tensor::from_vector<float>({2, 3}, dy),
                                                          Tensor::from_vector<float>({2, 3}, y_log)}, {}, o);
  for (int r = 0; r < 2; ++r) {
    double dot = 0, sum = 0;
    for (int c = 0; c < 3; ++c) {
      dot += double(dy[size_t(r * 3 + c)]) * y_soft[size_t(r * 3 + c)];
      sum += dy[size_t(r * 3 + c)];
    }
    for (int c = 0; c < 3; ++c) {
      const size_t i = size_t(r * 3 + c);
      EXPECT_NEAR(s[0].data<float>()[i], y_soft[i] * (dy[i] - dot), 1e-6);
      EXPECT_NEAR(l[0].data<float>()[i], dy[i] - y_soft[i] * sum, 1e-6);
    }
  }
}

// InplaceClipGradNorm: the fed gradients scaled in place by min(max_norm / (norm + 1e-6), 1), norm
// the L2 norm over every tensor (computed here in double); left as they are under the limit.
TEST(OrtArtifactOps, InplaceClipGradNormScalesTheFedGradients) {
  const std::string model = one_node_model("InplaceClipGradNorm", {"g"}, {"c"}, [](onnx::GraphProto* g) {
    sequence_input(g, "g");
    auto* v = g->add_output();
    v->set_name("c");
    v->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(
        onnx::TensorProto::FLOAT);
  }, {{"max_norm", 2.0f}});
  InferenceSession s(model.data(), model.size());
  Tensor a = Tensor::from_vector<float>({2}, {3, 4});
  Tensor b = Tensor::from_vector<float>({3}, {0, 12, 0});
  const double norm = 13.0;  // sqrt(9 + 16 + 144)
  const auto r = s.run_values({}, {{"g", seq({a, b})}});
  const double coef = 2.0 / (norm + 1e-6);
  expect_near(a, {3 * coef, 4 * coef}, 1e-6, "a");
  expect_near(b, {0, 12 * coef, 0}, 1e-6, "b");
  ASSERT_EQ(r[0].sequence.size(), 2u);
  EXPECT_EQ(r[0].sequence[1].raw_data(), b.raw_data());  // the same tensors handed on
  Tensor small = Tensor::from_vector<float>({2}, {0.5f, 0.5f});
  s.run_values({}, {{"g", seq({small})}});
  expect_near(small, {0.5, 0.5}, 0, "under the limit");
  const std::string l1 = one_node_model("InplaceClipGradNorm", {"g"}, {"c"}, [](onnx::GraphProto* g) {
    sequence_input(g, "g");
    g->add_output()->set_name("c");
  });
  onnx::ModelProto m;
  m.ParseFromString(l1);
  auto* at = m.mutable_graph()->mutable_node(0)->add_attribute();
  at->set_name("norm_type");
  at->set_type(onnx::AttributeProto::STRING);
  at->set_s("l1");
  const std::string bad = m.SerializeAsString();
  try {
    InferenceSession(bad.data(), bad.size()).run_values({}, {{"g", seq({small})}});
    ADD_FAILURE() << "norm_type l1 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("norm_type 'l1' is not implemented"), std::string::npos) << e.what();
  }
}
