// The library trainer (include/onnxtrain/trainer.h) driven from C++: run sizes, data order from
// the seed, validation loss and metrics against naive double-precision computations from the
// weights, checkpoint + resume bitwise equal to an uninterrupted run, stop requests, callbacks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>

#include "ir/onnx_io.h"
#include "onnxtrain/checkpoint.h"
#include "onnxtrain/trainer.h"
#include "train/checkpoint.h"
#include "test_util.h"

using namespace onnxtrain;
using ot_test::make_node;

namespace {

// logits / y = X W + b: X [N, in], W [in, out]; W and b from `seed` (zero when seed < 0).
std::string linear_model(int64_t in, int64_t out, int seed) {
  ir::Model m;
  m.opsets = {{"", 17}};
  m.graph = std::make_shared<ir::Graph>();
  auto& g = *m.graph;
  std::mt19937 rng(seed < 0 ? 0 : uint32_t(seed));
  g.inputs = {ir::ValueInfo{"X", ir::TypeInfo::tensor(DType::kFloat32, {-1, in}), ""}};
  Tensor W = seed < 0 ? Tensor::zeros(DType::kFloat32, {in, out}) : ot_test::random_tensor(DType::kFloat32, {in, out}, rng, -0.5, 0.5);
  Tensor b = seed < 0 ? Tensor::zeros(DType::kFloat32, {out}) : ot_test::random_tensor(DType::kFloat32, {out}, rng, -0.5, 0.5);
  g.initializers.emplace_back("W", W);
  g.initializers.emplace_back("b", b);
  g.nodes.push_back(make_node("MatMul", {"X", "W"}, {"xw"}));
  g.nodes.push_back(make_node("Add", {"xw", "b"}, {"y"}));
  g.outputs = {ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kFloat32, {-1, out}), ""}};
  return ir::serialize_model(m);
}

TrainingParameters params(const std::string& optimizer = "SGDOptimizer") {
  TrainingParameters p;
  p.loss_output_name = "loss";
  p.training_optimizer_name = optimizer;
  return p;
}

// Regression data: X [n, in] uniform, t [n, out] = a fixed linear map of X plus noise.
Dataset regression_data(int64_t n, int64_t in, int64_t out, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor X = ot_test::random_tensor(DType::kFloat32, {n, in}, rng);
  Tensor t = ot_test::random_tensor(DType::kFloat32, {n, out}, rng, -0.1, 0.1);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < out; ++j)
      for (int64_t k = 0; k < in; ++k) t.data<float>()[i * out + j] += float((k + 1) * (j % 2 ? -0.5 : 1.0)) * X.data<float>()[i * in + k];
  return Dataset({{"X", X}, {"label", t}});
}

// Classification data: 3 classes, X [n, 4], label int64 [n].
Dataset class_data(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor X = ot_test::random_tensor(DType::kFloat32, {n, 4}, rng);
  Tensor y = Tensor::empty(DType::kInt64, {n});
  for (int64_t i = 0; i < n; ++i) {
    const float* x = X.data<float>() + i * 4;
    y.data<int64_t>()[i] = x[0] + x[1] > 0.3f ? 0 : x[2] - x[3] > 0 ? 1 : 2;
  }
  return Dataset({{"X", X}, {"label", y}});
}

std::vector<double> doubles(const Tensor& t) { return ot_test::to_double(t); }

std::map<std::string, Tensor> state_of(const TrainingSession& s) {
  std::map<std::string, Tensor> r;
  for (auto& [n, t] : s.get_state()) r[n] = t;
  return r;
}

// Naive double-precision loss and metric of the linear model with weights `st` on `d`:
// mean squared error and R² (per output, averaged), or mean softmax cross-entropy and accuracy.
std::pair<double, double> naive_eval(const std::map<std::string, Tensor>& st, const Dataset& d, bool classify) {
  const auto W = doubles(st.at("W")), b = doubles(st.at("b")), X = doubles(d.at("X")), y = doubles(d.at("label"));
  const int64_t n = d.size(), in = st.at("W").dim(0), out = st.at("W").dim(1);
  std::vector<double> z(size_t(n * out));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < out; ++j) {
      double s = b[size_t(j)];
      for (int64_t k = 0; k < in; ++k) s += X[size_t(i * in + k)] * W[size_t(k * out + j)];
      z[size_t(i * out + j)] = s;
    }
  double loss = 0;
  if (classify) {
    int64_t correct = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double* zi = &z[size_t(i * out)];
      const double mx = *std::max_element(zi, zi + out);
      double se = 0;
      for (int64_t j = 0; j < out; ++j) se += std::exp(zi[j] - mx);
      loss += -(zi[int64_t(y[size_t(i)])] - mx - std::log(se));
      correct += std::max_element(zi, zi + out) - zi == int64_t(y[size_t(i)]);
    }
    return {loss / double(n), double(correct) / double(n)};
  }
  double r2 = 0;
  for (int64_t j = 0; j < out; ++j) {
    double mean = 0, ss_res = 0, ss_tot = 0;
    for (int64_t i = 0; i < n; ++i) mean += y[size_t(i * out + j)] / double(n);
    for (int64_t i = 0; i < n; ++i) {
      const double e = z[size_t(i * out + j)] - y[size_t(i * out + j)];
      ss_res += e * e;
      ss_tot += (y[size_t(i * out + j)] - mean) * (y[size_t(i * out + j)] - mean);
    }
    loss += ss_res;
    r2 += 1 - ss_res / ss_tot;
  }
  return {loss / double(n * out), r2 / double(out)};
}

struct Model {
  std::string model;
  TrainingSession session;
  explicit Model(const std::string& loss, int64_t out = 2, const TrainingParameters& p = params(), int seed = 1,
               std::map<std::string, std::string> kw = {{"reduction", "mean"}})
      : model(add_loss_output(linear_model(4, out, seed), loss, "loss", "label", "", {}, "", kw)),
        session(model.data(), model.size(), p) {}
};

std::string temp_dir(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / ("onnxtrain_trainer_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

// Bitwise equal doubles (NaN included).
bool same(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void expect_same_bits(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [n, t] : a) EXPECT_TRUE(ot_test::same_bits(t, b.at(n))) << n;
}

}  // namespace

TEST(Dataset, ChecksSamplesAndTakesRows) {
  Tensor a = Tensor::from_vector<float>({3, 2}, {0, 1, 2, 3, 4, 5});
  Tensor s = Tensor::empty(DType::kString, {3});
  for (int i = 0; i < 3; ++i) s.data<std::string>()[i] = "s" + std::to_string(i);
  Dataset d({{"a", a}, {"s", s}});
  EXPECT_EQ(d.size(), 3);
  Dataset t = d.take({2, 0, 1}, 0, 2);
  EXPECT_EQ(doubles(t.at("a")), (std::vector<double>{4, 5, 0, 1}));
  EXPECT_EQ(t.at("s").data<std::string>()[0], "s2");
  EXPECT_EQ(doubles(d.slice(1, 3).at("a")), (std::vector<double>{2, 3, 4, 5}));
  EXPECT_THROW(Dataset({{"a", a}, {"b", Tensor::zeros(DType::kFloat32, {2})}}), InvalidArgument);
  EXPECT_THROW(Dataset({{"a", a}, {"a", a}}), InvalidArgument);
  EXPECT_THROW(Dataset({{"x", Tensor::scalar<float>(1)}}), InvalidArgument);
  try {
    d.at("label");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'label'"), std::string::npos) << e.what();
  }
}

TEST(Trainer, PlanCountsBatchesStepsAndEpochs) {
  TrainerOptions o;
  o.batch_size = 4;
  o.epochs = 3;
  TrainingPlan p = Trainer::plan(o, 10, false);
  EXPECT_EQ(p.batches_per_epoch, 3);
  EXPECT_EQ(p.total_steps, 9);
  EXPECT_EQ(p.epochs, 3);
  o.drop_last = true;
  EXPECT_EQ(Trainer::plan(o, 10, false).batches_per_epoch, 2);
  o.drop_last = false;
  EXPECT_EQ(Trainer::plan(o, 10, false, 2).total_steps, 4);  // 9 batches, accumulated by 2
  o.epochs = 0;
  o.steps = 7;
  p = Trainer::plan(o, 10, false);
  EXPECT_EQ(p.total_steps, 7);
  EXPECT_EQ(p.epochs, 3);
  o.validation_split = 0.25;
  p = Trainer::plan(o, 10, false);
  EXPECT_EQ(p.validation_samples, 3);  // round(2.5) away from zero
  EXPECT_EQ(p.train_samples, 7);
  EXPECT_THROW(Trainer::plan(o, 10, true), InvalidArgument);  // split and validation data
  o.validation_split = 0.99;
  EXPECT_THROW(Trainer::plan(o, 10, false), InvalidArgument);
  o.validation_split = 0;
  o.epochs = 2;
  EXPECT_THROW(Trainer::plan(o, 10, false), InvalidArgument);  // epochs and steps
  o.steps = 0;
  o.epochs = 1;
  o.batch_size = 20;
  o.drop_last = true;
  EXPECT_THROW(Trainer::plan(o, 10, false), InvalidArgument);  // no batch
  o.drop_last = false;
  EXPECT_THROW(Trainer::plan(o, 10, false, 2), InvalidArgument);  // one batch, no step
}

TEST(Trainer, EpochsStepsAndCallbacks) {
  Model r("squared_error");
  const Dataset data = regression_data(10, 4, 2, 3);
  TrainerOptions o;
  o.batch_size = 4;
  o.epochs = 3;
  o.learning_rate = 0.05;
  o.objective.metric = Metric::kR2;
  o.objective.score_output = "y";
  Trainer t(r.session, o);
  std::vector<StepInfo> steps;
  std::vector<EpochInfo> epochs;
  std::vector<TrainRecord> records;
  TrainerCallbacks cb;
  cb.on_step = [&](const StepInfo& s) { steps.push_back(s); };
  cb.on_epoch_end = [&](const EpochInfo& e) { epochs.push_back(e); };
  cb.on_record = [&](const TrainRecord& rec) { records.push_back(rec); };
  const FitResult res = t.fit(data, {}, cb);
  EXPECT_FALSE(res.stopped);
  EXPECT_EQ(res.steps, 9);
  EXPECT_EQ(r.session.step(), 9);
  EXPECT_EQ(res.samples, 30);
  ASSERT_EQ(steps.size(), 9u);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].step, int64_t(i) + 1);
    EXPECT_EQ(steps[i].epoch, int64_t(i) / 3);
    EXPECT_EQ(steps[i].batch, int64_t(i) % 3 + 1);
    EXPECT_EQ(steps[i].total_steps, 9);
    EXPECT_TRUE(steps[i].updated);
    EXPECT_DOUBLE_EQ(steps[i].lr, 0.05);
    EXPECT_EQ(steps[i].samples, std::min<int64_t>(10, (int64_t(i) % 3 + 1) * 4) + int64_t(i) / 3 * 10);
  }
  ASSERT_EQ(epochs.size(), 3u);
  for (size_t e = 0; e < 3; ++e) {
    // The epoch's loss is the mean of its batch losses; its metric the last step's running one.
    const double mean = (steps[e * 3].loss + steps[e * 3 + 1].loss + steps[e * 3 + 2].loss) / 3;
    EXPECT_DOUBLE_EQ(epochs[e].loss, mean);
    EXPECT_DOUBLE_EQ(epochs[e].metric, steps[e * 3 + 2].epoch_metric);
    EXPECT_EQ(epochs[e].epoch, int64_t(e));
    EXPECT_EQ(epochs[e].step, int64_t(e + 1) * 3);
    EXPECT_TRUE(std::isnan(epochs[e].val_loss));
  }
  // History: the callbacks' records, one per epoch end at least, steps increasing.
  ASSERT_EQ(records.size(), t.history().size());
  ASSERT_GE(records.size(), 3u);
  EXPECT_EQ(records.back().step, 9);
  EXPECT_DOUBLE_EQ(records.back().epoch, 3.0);
  EXPECT_DOUBLE_EQ(records.back().lr, 0.05);
  // A finished run returns at once.
  EXPECT_EQ(t.fit(data, {}, cb).steps, 9);
  EXPECT_EQ(steps.size(), 9u);
}

TEST(Trainer, StepBudgetEndsInsideAnEpochWithARecord) {
  Model r("squared_error");
  TrainerOptions o;
  o.batch_size = 4;
  o.steps = 4;  // 3 batches an epoch: the run ends after the first batch of epoch 2
  o.learning_rate = 0.05;
  Trainer t(r.session, o);
  const FitResult res = t.fit(regression_data(10, 4, 2, 3));
  EXPECT_EQ(res.steps, 4);
  EXPECT_EQ(res.epoch, 1);
  EXPECT_EQ(res.batch, 1);
  ASSERT_FALSE(t.history().empty());
  EXPECT_EQ(t.history().back().step, 4);
  EXPECT_NEAR(t.history().back().epoch, 1 + 1.0 / 3, 1e-12);
}

TEST(Trainer, GradientAccumulationCountsOptimizerSteps) {
  TrainingParameters p = params();
  p.gradient_accumulation_steps = 2;
  Model r("squared_error", 2, p);
  TrainerOptions o;
  o.batch_size = 5;
  o.epochs = 2;
  o.learning_rate = 0.05;
  Trainer t(r.session, o);
  int updates = 0, batches = 0;
  TrainerCallbacks cb;
  cb.on_step = [&](const StepInfo& s) {
    ++batches;
    updates += s.updated;
  };
  EXPECT_EQ(t.fit(regression_data(10, 4, 2, 3), {}, cb).steps, 2);
  EXPECT_EQ(batches, 4);
  EXPECT_EQ(updates, 2);
  EXPECT_EQ(r.session.step(), 2);
}

// The counters the Python trainers read (run_count, step, update_due) follow the runs, and
// set_progress sets them as a trainer's state dict does.
TEST(Trainer, SessionCountsRunsAndUpdatesForTheTrainers) {
  TrainingParameters p = params();
  p.gradient_accumulation_steps = 3;
  Model r("squared_error", 2, p);
  Dataset d = regression_data(4, 4, 2, 5);
  const std::vector<std::pair<std::string, Value>> feed = {{"X", Value::of(d.at("X"))},
                                                           {"label", Value::of(d.at("label"))},
                                                           {"Learning_Rate", Value::of(Tensor::from_vector<float>({1}, {0.01f}))}};
  const std::vector<bool> due = {false, false, true, false, false, true, false};
  for (size_t i = 0; i < due.size(); ++i) {
    EXPECT_EQ(r.session.update_due(), due[i]) << i;
    EXPECT_EQ(r.session.run_count(), int64_t(i));
    EXPECT_EQ(r.session.step(), int64_t(i / 3));
    r.session.run({"loss"}, feed);
  }
  r.session.set_progress(40, 13);
  EXPECT_EQ(r.session.run_count(), 40);
  EXPECT_EQ(r.session.step(), 13);
  EXPECT_FALSE(r.session.update_due());  // the accumulation position (1 of 3) stays
  EXPECT_THROW(r.session.set_progress(-1, 0), InvalidArgument);
  EXPECT_THROW(r.session.set_progress(0, -2), InvalidArgument);
}

// A file of another writer in the checkpoint container (ORTTrainer's) is refused by name.
TEST(Trainer, SessionRefusesACheckpointOfAnotherWriter) {
  Model r("squared_error");
  const std::string path = temp_dir("other_writer") + "/ck";
  CheckpointFile f;
  f.kind = "onnxtrain.ORTTrainer";
  f.tensors.emplace_back("x", Tensor::from_vector<float>({2}, {1.f, 2.f}));
  write_checkpoint_file(path, f);
  try {
    r.session.load_checkpoint(path);
    FAIL() << "loaded";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("written by onnxtrain.ORTTrainer"), std::string::npos) << e.what();
  }
}

// With a learning rate of 0 the weights stay put, so each batch of one sample has the loss
// (0 - t_i)^2 of its sample alone: the losses spell out the order the trainer drew.
std::vector<std::vector<int64_t>> order_of(uint64_t seed, bool shuffle, int epochs = 3) {
  const std::string model = add_loss_output(linear_model(1, 1, -1), "squared_error", "loss", "label", "", {}, "",
                                            {{"reduction", "mean"}});
  TrainingSession s(model.data(), model.size(), params());
  const int64_t n = 8;
  Tensor X = Tensor::zeros(DType::kFloat32, {n, 1}), t = Tensor::empty(DType::kFloat32, {n, 1});
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = float(i + 1);
  TrainerOptions o;
  o.batch_size = 1;
  o.epochs = epochs;
  o.seed = seed;
  o.shuffle = shuffle;
  o.learning_rate = 0.0;
  Trainer tr(s, o);
  std::vector<std::vector<int64_t>> order(static_cast<size_t>(epochs));
  TrainerCallbacks cb;
  cb.on_step = [&](const StepInfo& si) { order[size_t(si.epoch)].push_back(int64_t(std::lround(std::sqrt(si.loss))) - 1); };
  tr.fit(Dataset({{"X", X}, {"label", t}}), {}, cb);
  return order;
}

TEST(Trainer, ShufflingIsReproducibleFromTheSeedAndDiffersAcrossEpochs) {
  const auto a = order_of(7, true), b = order_of(7, true), c = order_of(8, true), plain = order_of(7, false);
  EXPECT_EQ(a, b) << "same seed, same order";
  EXPECT_NE(a, c) << "another seed, another order";
  for (const auto& epoch : a) {
    std::vector<int64_t> sorted = epoch;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7})) << "every sample once an epoch";
  }
  EXPECT_NE(a[0], a[1]);
  EXPECT_NE(a[1], a[2]);
  for (const auto& epoch : plain) EXPECT_EQ(epoch, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(Trainer, ValidationLossAndAccuracyMatchNaiveComputation) {
  Model r("cross_entropy", 3, params("AdamOptimizer"));
  const Dataset train = class_data(60, 1), val = class_data(23, 2);
  TrainerOptions o;
  o.batch_size = 8;
  o.epochs = 3;
  o.learning_rate = 0.05;
  o.eval_batch_size = 5;  // several validation batches, the last one smaller
  o.objective.score_output = "y";
  o.objective.metric = Metric::kAccuracy;
  Trainer t(r.session, o);
  int checked = 0;
  std::vector<ValidationInfo> validations;
  TrainerCallbacks cb;
  cb.on_validation = [&](const ValidationInfo& v) { validations.push_back(v); };
  cb.on_epoch_end = [&](const EpochInfo& e) {
    const auto [loss, acc] = naive_eval(state_of(r.session), val, true);
    EXPECT_NEAR(e.val_loss, loss, 1e-5 * std::max(1.0, loss));
    EXPECT_NEAR(e.val_metric, acc, 1e-12);
    ++checked;
  };
  t.fit(train, val, cb);
  EXPECT_EQ(checked, 3);
  ASSERT_EQ(validations.size(), 3u);
  EXPECT_EQ(validations[2].result.samples, 23);
  EXPECT_EQ(validations[2].result.counted, 23);
  EXPECT_DOUBLE_EQ(validations[2].epoch, 3.0);
  const EvalResult ev = t.evaluate(val);
  const auto [loss, acc] = naive_eval(state_of(r.session), val, true);
  EXPECT_NEAR(ev.loss, loss, 1e-5 * std::max(1.0, loss));
  EXPECT_NEAR(ev.metric, acc, 1e-12);
  EXPECT_EQ(ev.correct, int64_t(std::lround(acc * 23)));
  EXPECT_NEAR(t.history().back().val_loss, loss, 1e-5 * std::max(1.0, loss));
}

TEST(Trainer, ValidationSplitAndR2MatchNaiveComputation) {
  // Learning rate 0 and batches of one sample: each training loss is one sample's, which tells
  // the training samples apart; the held-out ones are the rest.
  Model r("squared_error");
  const Dataset data = regression_data(40, 4, 2, 5);
  TrainerOptions o;
  o.batch_size = 1;
  o.epochs = 1;
  o.learning_rate = 0.0;
  o.validation_split = 0.25;
  o.seed = 3;
  o.objective.score_output = "y";
  o.objective.metric = Metric::kR2;
  Trainer t(r.session, o);
  const auto st = state_of(r.session);
  std::vector<double> sample_loss;
  for (int64_t i = 0; i < data.size(); ++i) sample_loss.push_back(naive_eval(st, data.slice(i, i + 1), false).first);
  std::set<int64_t> trained;
  std::vector<EvalResult> v;
  TrainerCallbacks cb;
  cb.on_step = [&](const StepInfo& s) {
    int64_t best = 0;
    for (int64_t i = 1; i < data.size(); ++i)
      if (std::fabs(sample_loss[size_t(i)] - s.loss) < std::fabs(sample_loss[size_t(best)] - s.loss)) best = i;
    trained.insert(best);
  };
  cb.on_validation = [&](const ValidationInfo& vi) { v.push_back(vi.result); };
  t.fit(data, {}, cb);
  EXPECT_EQ(trained.size(), 30u) << "30 distinct training samples";
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].samples, 10);
  std::vector<int64_t> held;
  for (int64_t i = 0; i < data.size(); ++i)
    if (!trained.count(i)) held.push_back(i);
  const auto [loss, r2] = naive_eval(st, data.take(held, 0, held.size()), false);
  EXPECT_NEAR(v[0].loss, loss, 1e-5 * std::max(1.0, loss));
  EXPECT_NEAR(v[0].metric, r2, 1e-5);
  // The same seed holds out the same samples.
  Model again("squared_error");
  Trainer t2(again.session, o);
  t2.fit(data, {}, {});
  EXPECT_EQ(t2.history().back().val_loss, t.history().back().val_loss);
}

namespace {

struct Trajectory {
  std::map<std::string, Tensor> state;
  std::vector<EpochInfo> epochs;
  std::vector<TrainRecord> history;
};

TrainerOptions resume_options(const std::string& ckpt) {
  TrainerOptions o;
  o.batch_size = 7;
  o.epochs = 4;
  o.learning_rate = 0.02;
  o.seed = 11;
  o.objective.score_output = "y";
  o.objective.metric = Metric::kAccuracy;
  o.checkpoint_path = ckpt;
  o.checkpoint_metadata["who"] = "test";
  return o;
}

}  // namespace

TEST(Trainer, CheckpointResumeIsBitwiseTheUninterruptedRun) {
  const std::string dir = temp_dir("resume");
  const Dataset train = class_data(50, 1), val = class_data(12, 2);
  auto run = [&](int stop_after, bool resume, const std::string& ckpt) {
    Model r("cross_entropy", 3, params("AdamOptimizer"));
    Trainer t(r.session, resume_options(ckpt));
    if (resume) {
      EXPECT_EQ(t.load_checkpoint(ckpt), (std::map<std::string, std::string>{{"who", "test"}}));
    }
    Trajectory tr;
    int batches = 0;
    TrainerCallbacks cb;
    cb.on_epoch_end = [&](const EpochInfo& e) { tr.epochs.push_back(e); };
    cb.should_stop = [&] { return stop_after > 0 && ++batches == stop_after; };
    const FitResult res = t.fit(train, val, cb);
    EXPECT_EQ(res.stopped, stop_after > 0);
    if (res.stopped) {
      EXPECT_EQ(res.checkpoint, ckpt);
    }
    tr.state = state_of(r.session);
    tr.history = t.history();
    return tr;
  };
  const Trajectory full = run(0, false, dir + "/a/last.ckpt");
  const Trajectory first = run(12, false, dir + "/b/last.ckpt");  // 8 batches an epoch: stops inside epoch 2
  EXPECT_EQ(first.epochs.size(), 1u);
  const CheckpointInfo info = read_checkpoint_info(dir + "/b/last.ckpt");
  EXPECT_EQ(info.optimizer_step, 12);
  EXPECT_EQ(info.metadata.at("who"), "test");
  const Trajectory second = run(0, true, dir + "/b/last.ckpt");
  expect_same_bits(full.state, second.state);
  // The resumed epoch keeps its running loss and score: epoch 2's figures are the same bits.
  ASSERT_EQ(second.epochs.size(), 3u);
  for (size_t e = 0; e < 3; ++e) {
    EXPECT_EQ(full.epochs[e + 1].epoch, second.epochs[e].epoch);
    EXPECT_TRUE(same(full.epochs[e + 1].loss, second.epochs[e].loss)) << e;
    EXPECT_TRUE(same(full.epochs[e + 1].metric, second.epochs[e].metric)) << e;
    EXPECT_TRUE(same(full.epochs[e + 1].val_loss, second.epochs[e].val_loss)) << e;
  }
  // The history carries over: the same steps and validation figures.
  ASSERT_EQ(full.history.size(), second.history.size());
  for (size_t i = 0; i < full.history.size(); ++i) {
    EXPECT_EQ(full.history[i].step, second.history[i].step);
    EXPECT_TRUE(same(full.history[i].val_loss, second.history[i].val_loss)) << i;
  }
  std::filesystem::remove_all(dir);
}

TEST(Trainer, StopRequestEndsAfterTheBatchAndFitContinues) {
  const std::string dir = temp_dir("stop");
  const Dataset data = regression_data(20, 4, 2, 3);
  TrainerOptions o;
  o.batch_size = 4;
  o.epochs = 2;
  o.learning_rate = 0.05;
  o.checkpoint_path = dir + "/sub/c.ckpt";
  Model full("squared_error");
  Trainer(full.session, o).fit(data);
  Model r("squared_error");
  Trainer t(r.session, o);
  TrainerCallbacks cb;
  cb.on_step = [&](const StepInfo& s) {
    if (s.step == 3) t.request_stop();
  };
  FitResult res = t.fit(data, {}, cb);
  EXPECT_TRUE(res.stopped);
  EXPECT_EQ(res.steps, 3);
  EXPECT_EQ(r.session.step(), 3);
  EXPECT_TRUE(std::filesystem::exists(dir + "/sub/c.ckpt"));
  EXPECT_EQ(read_checkpoint_info(dir + "/sub/c.ckpt").optimizer_step, 3);
  res = t.fit(data);  // continues in the same process
  EXPECT_FALSE(res.stopped);
  EXPECT_EQ(res.steps, 10);
  expect_same_bits(state_of(full.session), state_of(r.session));
  std::filesystem::remove_all(dir);
}

TEST(Trainer, CheckpointsEveryNSteps) {
  const std::string dir = temp_dir("every");
  Model r("squared_error");
  TrainerOptions o;
  o.batch_size = 4;
  o.steps = 7;
  o.learning_rate = 0.05;
  o.checkpoint_path = dir + "/c.ckpt";
  o.checkpoint_every = 3;
  Trainer t(r.session, o);
  std::vector<int64_t> written;
  TrainerCallbacks cb;
  cb.on_step = [&](const StepInfo&) {
    if (std::filesystem::exists(o.checkpoint_path)) written.push_back(read_checkpoint_info(o.checkpoint_path).optimizer_step);
  };
  t.fit(regression_data(20, 4, 2, 3), {}, cb);
  EXPECT_EQ(read_checkpoint_info(o.checkpoint_path).optimizer_step, 6);
  EXPECT_EQ(written, (std::vector<int64_t>{3, 3, 3, 6}));  // seen after steps 4..7
  std::filesystem::remove_all(dir);
}

TEST(Trainer, LearningRateFromTheSessionSchedule) {
  TrainingParameters p = params();
  p.lr_schedule = "invscaling";
  p.lr_schedule_params = {{"eta0", 0.1}, {"power_t", 0.5}};
  Model r("squared_error", 2, p);
  TrainerOptions o;
  o.batch_size = 5;
  o.epochs = 1;
  Trainer t(r.session, o);
  std::vector<double> lrs;
  TrainerCallbacks cb;
  cb.on_step = [&](const StepInfo& s) { lrs.push_back(s.lr); };
  t.fit(regression_data(10, 4, 2, 3), {}, cb);
  ASSERT_EQ(lrs.size(), 2u);
  EXPECT_DOUBLE_EQ(lrs[0], 0.1);
  EXPECT_DOUBLE_EQ(lrs[1], 0.1 / std::sqrt(2.0));
  o.learning_rate = 0.1;
  EXPECT_THROW(Trainer(r.session, o), InvalidArgument);  // both the schedule and a rate
}

TEST(Trainer, ErrorsNameTheProblem) {
  Model r("squared_error");
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  TrainerOptions o;
  EXPECT_NE(message([&] { Trainer t(r.session, o); }).find("learning_rate"), std::string::npos);
  o.learning_rate = 0.1;
  o.objective.score_output = "nope";
  o.objective.metric = Metric::kR2;
  EXPECT_NE(message([&] { Trainer t(r.session, o); }).find("'nope'"), std::string::npos);
  o.objective = {};
  o.objective.metric = Metric::kR2;
  EXPECT_NE(message([&] { Trainer t(r.session, o); }).find("score_output"), std::string::npos);
  o.objective = {};
  o.batch_size = 0;
  EXPECT_NE(message([&] { Trainer t(r.session, o); }).find("TrainerOptions.batch_size"), std::string::npos);
  o.batch_size = 4;
  Trainer t(r.session, o);
  const Dataset d = regression_data(10, 4, 2, 3);
  EXPECT_NE(message([&] { t.fit(Dataset({{"X", d.at("X")}})); }).find("label"), std::string::npos);
  EXPECT_NE(message([&] { t.fit(Dataset()); }).find("no samples"), std::string::npos);
  // Resuming with another data order, or on other data, is refused before anything changes.
  const std::string dir = temp_dir("errors");
  t.fit(d);
  t.save_checkpoint(dir + "/c.ckpt");
  TrainerOptions o2 = o;
  o2.batch_size = 5;
  Model r2("squared_error");
  Trainer t2(r2.session, o2);
  const auto before = state_of(r2.session);
  EXPECT_NE(message([&] { t2.load_checkpoint(dir + "/c.ckpt"); }).find("batch_size"), std::string::npos);
  expect_same_bits(before, state_of(r2.session));
  Trainer t3(r2.session, o);
  t3.load_checkpoint(dir + "/c.ckpt");
  EXPECT_NE(message([&] { t3.fit(regression_data(10, 4, 2, 4)); }).find("data differs"), std::string::npos);
  std::filesystem::remove_all(dir);
}

namespace {

// The first version of the trainer's data fingerprint, written here from its description (FNV-1a
// 64 over each array's name, element type (int32), shape (int64s) and contents; every field hashed
// 8 bytes at a time, then its remaining bytes one at a time), independent of the library's code.
std::string fingerprint_v1(const Dataset& d) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w = 0;
      for (int k = 7; k >= 0; --k) w = (w << 8) | b[i + size_t(k)];  // little-endian word
      h = (h ^ w) * 1099511628211ull;
    }
    for (; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  for (const auto& [name, t] : d.arrays()) {
    mix(name.data(), name.size());
    const int32_t dt = int32_t(t.dtype());
    mix(&dt, sizeof dt);
    mix(t.shape().data(), t.shape().size() * sizeof(int64_t));
    mix(t.raw_data(), t.nbytes());
  }
  return std::to_string(h);
}

}  // namespace

TEST(Trainer, ContinuesARunWhoseCheckpointHoldsTheFirstFingerprintVersion) {
  // Checkpoints written before the fingerprint's second version hold a bare number in
  // 'trainer.data': such a run still continues on its data, and still refuses other data.
  Model r("squared_error");
  TrainerOptions o;
  o.batch_size = 4;
  o.epochs = 1;
  o.learning_rate = 0.05;
  Trainer t(r.session, o);
  const Dataset d = regression_data(37, 4, 2, 3);  // 37 rows: the contents end in a partial word
  t.fit(d);
  const std::string dir = temp_dir("fp1");
  t.save_checkpoint(dir + "/c.ckpt");
  train::Checkpoint c = train::read_checkpoint(dir + "/c.ckpt");
  std::string& fp = c.text.at("user/trainer.data");
  ASSERT_EQ(fp.rfind("2:", 0), 0u) << fp;  // written now: the second version
  ASSERT_EQ(fp.substr(fp.size() - 2), "/-");
  fp = fingerprint_v1(d) + "/-";
  train::write_checkpoint(dir + "/v1.ckpt", c);

  TrainerOptions o2 = o;
  o2.epochs = 2;
  Model again("squared_error");
  Trainer t2(again.session, o2);
  t2.load_checkpoint(dir + "/v1.ckpt");
  t2.fit(d);  // the same data: accepted
  EXPECT_EQ(t2.epoch(), 2);
  Model other("squared_error");
  Trainer t3(other.session, o2);
  t3.load_checkpoint(dir + "/v1.ckpt");
  try {
    t3.fit(regression_data(37, 4, 2, 4));
    ADD_FAILURE() << "other data was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("data differs"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}
