// The training loop (include/onnxtrain/trainer.h): the Trainer (datasets, the objective and
// evaluation are in dataset.cpp).
//
// Run state, all of it in the checkpoint's "trainer." metadata so that a resumed run is bitwise
// the uninterrupted one: the generator state at the start of the epoch in progress (the epoch's
// order is drawn from it again), the position in that epoch, the running loss and score of the
// epoch, sample and step counters, the history, and the fingerprint of the data.
#include "onnxtrain/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <sstream>

#include "onnxtrain/checkpoint.h"
#include "onnxtrain/error.h"
#include "distributed/comm.h"
#include "distributed/rank_agreement.h"
#include "train/metrics.h"

namespace onnxtrain {

namespace {

// Fingerprint of a dataset: FNV-1a over names, element types, shapes and contents; tells whether a
// resumed run sees the same data. Version 2 ("2:...") hashes the contents in four
// interleaved lanes of 8 bytes (four independent multiply chains: ~4x the speed of one, which the
// sklearn estimators' epoch-per-fit loop pays every epoch); version 1 (a bare decimal number, one
// chain) is still computed to continue a run whose checkpoint holds one.
std::string fingerprint(const Dataset& d, bool v1 = false) {
  constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    size_t i = 0;
    auto word = [&](size_t at) {
      uint64_t w;
      std::memcpy(&w, b + at, 8);
      return w;
    };
    if (!v1 && n >= 64) {
      uint64_t l[4] = {h, h ^ 1, h ^ 2, h ^ 3};
      for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; ++k) l[k] = (l[k] ^ word(i + 8 * size_t(k))) * kPrime;
      for (int k = 0; k < 4; ++k) h = (h ^ l[k]) * kPrime;
    }
    for (; i + 8 <= n; i += 8) h = (h ^ word(i)) * kPrime;
    for (; i < n; ++i) h = (h ^ b[i]) * kPrime;
  };
  for (const auto& [n, t] : d.arrays()) {
    mix(n.data(), n.size());
    const int32_t dt = int32_t(t.dtype());
    mix(&dt, sizeof dt);
    mix(t.shape().data(), t.shape().size() * sizeof(int64_t));
    if (t.dtype() == DType::kString) {
      for (int64_t i = 0; i < t.numel(); ++i) {
        const std::string& s = t.data<std::string>()[i];
        const uint64_t len = s.size();
        mix(&len, sizeof len);
        mix(s.data(), s.size());
      }
    } else {
      mix(t.raw_data(), t.nbytes());
    }
  }
  return v1 ? std::to_string(h) : "2:" + std::to_string(h);
}

// Data parallelism: what every rank's fit must share to run the same batches and steps as the
// others (each rank reads the same data and trains on its share of every batch): the data's size
// and layout, the options that fix the batches, the run's position, and the data's contents.
// Compared over every rank when fit starts; on a difference every rank throws the same
// InvalidArgument naming the first fact that differs and the ranks' values of it (a fact's value
// reads after "rank N ": "has 96 samples").
using distributed::RankFact;

// "float samples of shape [4, 3]": element type and the shape of one sample (the first axis dropped).
std::string per_sample(const Tensor& t) {
  std::string s = std::string(dtype_name(t.dtype())) + " samples of shape [";
  for (size_t k = 1; k < t.shape().size(); ++k) s += (k > 1 ? ", " : "") + std::to_string(t.shape()[k]);
  return s + "]";
}

void add_data_facts(std::vector<RankFact>& f, const std::string& which, const Dataset& d) {
  f.push_back({"the " + which + " data", "has " + std::to_string(d.size()) + " samples"});
  if (d.empty()) return;
  std::string names;
  for (const auto& [n, t] : d.arrays()) names += (names.empty() ? "" : ", ") + n;
  f.push_back({"the " + which + " data's arrays", "has [" + names + "]"});
  for (const auto& [n, t] : d.arrays()) f.push_back({which + " array '" + n + "'", "has " + per_sample(t)});
}

std::string hex(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%a", v);  // exact
  return buf;
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Options and plan

void TrainerOptions::validate() const {
  auto fail = [](auto&&... a) { throw_error<InvalidArgument>("TrainerOptions.", a...); };
  if (batch_size < 1) fail("batch_size must be >= 1, got ", batch_size);
  if (epochs < 0) fail("epochs must be >= 0, got ", epochs);
  if (steps < 0) fail("steps must be >= 0, got ", steps);
  if (epochs > 0 && steps > 0) fail("epochs and TrainerOptions.steps are both set: give one");
  if (!(validation_split >= 0 && validation_split < 1)) fail("validation_split must be in [0, 1), got ", validation_split);
  if (eval_batch_size < 1) fail("eval_batch_size must be >= 1, got ", eval_batch_size);
  if (learning_rate && !(std::isfinite(*learning_rate) && *learning_rate >= 0))
    fail("learning_rate must be finite and >= 0, got ", *learning_rate);
  if (log_every < 0) fail("log_every must be >= 0, got ", log_every);
  if (checkpoint_every < 0) fail("checkpoint_every must be >= 0, got ", checkpoint_every);
  if (checkpoint_every > 0 && checkpoint_path.empty()) fail("checkpoint_every needs TrainerOptions.checkpoint_path");
  for (const auto& [k, v] : checkpoint_metadata)
    if (k.rfind("trainer.", 0) == 0) fail("checkpoint_metadata: key '", k, "' is reserved (\"trainer.\" keys)");
}

TrainingPlan Trainer::plan(const TrainerOptions& o, int64_t samples, bool validation_data, int64_t accumulation_steps) {
  o.validate();
  if (accumulation_steps < 1)
    throw_error<InvalidArgument>("gradient accumulation steps must be >= 1, got ", accumulation_steps);
  if (samples < 1) throw_error<InvalidArgument>("the training data holds no samples");
  if (validation_data && o.validation_split > 0)
    throw_error<InvalidArgument>("TrainerOptions.validation_split is set and validation data is given: give one");
  TrainingPlan p;
  p.train_samples = samples;
  if (o.validation_split > 0) {
    p.validation_samples = int64_t(double(samples) * o.validation_split + 0.5);
    p.train_samples = samples - p.validation_samples;
    if (p.validation_samples < 1 || p.train_samples < 1)
      throw_error<InvalidArgument>("TrainerOptions.validation_split ", o.validation_split, " leaves ", p.train_samples,
                                   " training and ", p.validation_samples, " held-out samples of ", samples);
  }
  const int64_t n = p.train_samples, bs = o.batch_size;
  p.batches_per_epoch = o.drop_last ? n / bs : (n + bs - 1) / bs;
  if (p.batches_per_epoch < 1)
    throw_error<InvalidArgument>("TrainerOptions.drop_last with TrainerOptions.batch_size ", bs,
                                 " leaves no batch of the ", n, " training samples");
  const int64_t epochs = o.steps ? 0 : std::max<int64_t>(o.epochs, 1);
  p.total_steps = o.steps ? o.steps : epochs * p.batches_per_epoch / accumulation_steps;
  if (p.total_steps < 1)
    throw_error<InvalidArgument>("TrainerOptions.epochs ", epochs, " gives ", epochs * p.batches_per_epoch,
                                 " batches, fewer than one optimizer step of TrainingParameters.gradient_accumulation_steps ",
                                 accumulation_steps);
  p.epochs = o.steps ? (o.steps * accumulation_steps + p.batches_per_epoch - 1) / p.batches_per_epoch : epochs;
  return p;
}

// ------------------------------------------------------------------------------------------------
// Trainer

namespace {

// Options that fix the meaning of a run's position (its data order): a resumed run must share them.
std::string order_options(const TrainerOptions& o) {
  return "batch_size=" + std::to_string(o.batch_size) + " shuffle=" + std::to_string(int(o.shuffle)) +
         " drop_last=" + std::to_string(int(o.drop_last)) + " seed=" + std::to_string(o.seed) +
         " validation_split=" + hex(o.validation_split);
}

std::string records_to_text(const std::vector<TrainRecord>& rs) {
  std::string s;
  char buf[40];
  for (const auto& r : rs) {
    s += std::to_string(r.step);
    for (double v : {r.epoch, r.loss, r.metric, r.lr, r.val_loss, r.val_metric, r.samples_per_s}) {
      std::snprintf(buf, sizeof buf, " %.17g", v);
      s += buf;
    }
    s += "\n";
  }
  return s;
}

std::vector<TrainRecord> records_from_text(const std::string& s) {
  std::vector<TrainRecord> rs;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string tok[8];
    int n = 0;
    while (n < 8 && ls >> tok[n]) ++n;
    if (n != 8) throw_error<InvalidArgument>("damaged history in checkpoint metadata");
    TrainRecord r;
    r.step = std::strtoll(tok[0].c_str(), nullptr, 10);
    double* f[] = {&r.epoch, &r.loss, &r.metric, &r.lr, &r.val_loss, &r.val_metric, &r.samples_per_s};
    for (int i = 0; i < 7; ++i) *f[i] = std::strtod(tok[i + 1].c_str(), nullptr);
    rs.push_back(r);
  }
  return rs;
}

int64_t to_int(const std::string& s, const std::string& key) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (end == s.c_str() || *end) throw_error<InvalidArgument>("damaged trainer state '", key, "' in checkpoint metadata");
  return v;
}

double to_double(const std::string& s, const std::string& key) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end) throw_error<InvalidArgument>("damaged trainer state '", key, "' in checkpoint metadata");
  return v;
}

const char* const kStateKeys[] = {"trainer.order",  "trainer.data",  "trainer.rng",         "trainer.epoch",
                                  "trainer.position", "trainer.steps", "trainer.samples",    "trainer.elapsed",
                                  "trainer.history",  "trainer.epoch_stats", "trainer.epoch_score",
                                  "trainer.total_steps"};

}  // namespace

struct Trainer::Impl {
  TrainingSession* session;
  TrainerOptions opt;
  Objective objective;  // loss_output resolved
  std::atomic<bool> stop{false};
  bool running = false;
  TrainingPlan plan;    // of the last fit

  // Run state (checkpointed).
  std::string data_fp;    // "" before the first fit
  std::mt19937_64 epoch_rng;  // generator state at the start of the epoch in progress (text only in checkpoints)
  int64_t steps = 0, epoch = 0, position = 0, samples = 0;
  double elapsed = 0;     // seconds of earlier fits
  std::vector<TrainRecord> history;
  double ep_loss = 0, last_epoch_loss = NAN;
  int64_t ep_batches = 0;
  train::ScoreAccumulator ep_acc;
  std::chrono::steady_clock::time_point fit_start;  // while fit runs

  Impl(TrainingSession& s, TrainerOptions o) : session(&s), opt(std::move(o)), objective(opt.objective), ep_acc(objective) {}

  double seconds_in_fit() const {
    return running ? std::chrono::duration<double>(std::chrono::steady_clock::now() - fit_start).count() : 0.0;
  }
  // Learning rate of optimizer step `t` (1-based count of the session).
  double lr_of(int64_t t) const {
    return opt.learning_rate ? *opt.learning_rate : session->scheduled_learning_rate(std::max<int64_t>(1, t));
  }
  std::map<std::string, std::string> metadata() const {
    std::map<std::string, std::string> m = opt.checkpoint_metadata;
    m["trainer.order"] = order_options(opt);
    m["trainer.data"] = data_fp;
    std::ostringstream g;
    g << epoch_rng;
    m["trainer.rng"] = g.str();
    m["trainer.epoch"] = std::to_string(epoch);
    m["trainer.position"] = std::to_string(position);
    m["trainer.steps"] = std::to_string(steps);
    m["trainer.samples"] = std::to_string(samples);
    m["trainer.elapsed"] = hex(elapsed + seconds_in_fit());
    m["trainer.history"] = records_to_text(history);
    m["trainer.epoch_stats"] = hex(ep_loss) + " " + std::to_string(ep_batches) + " " + hex(last_epoch_loss);
    m["trainer.epoch_score"] = ep_acc.to_text();
    m["trainer.total_steps"] = std::to_string(plan.total_steps);
    return m;
  }
  EvalResult evaluate(const Dataset& d) {
    return onnxtrain::evaluate(d, objective, opt.eval_batch_size,
                               [&](const std::vector<std::pair<std::string, Tensor>>& batch,
                                   const std::vector<std::string>& names) {
                                 std::vector<std::pair<std::string, Value>> feeds;
                                 for (const auto& [n, t] : batch) feeds.emplace_back(n, Value::of(t));
                                 std::vector<Tensor> r;
                                 for (auto& v : session->eval(names, feeds)) r.push_back(std::move(v.tensor));
                                 return r;
                               });
  }
  void check_inputs(const Dataset& train) const;
  void check_ranks_agree(const Dataset& train, const Dataset& validation, const std::string& data_fp) const;
};

Trainer::Trainer(TrainingSession& session, TrainerOptions options)
    : impl_(std::make_unique<Impl>(session, std::move(options))) {
  Impl& s = *impl_;
  s.opt.validate();
  const TrainingParameters& p = session.parameters();
  if (s.objective.loss_output.empty()) s.objective.loss_output = p.loss_output_name;
  s.objective.validate("TrainerOptions.objective");
  s.ep_acc = train::ScoreAccumulator(s.objective);
  std::vector<std::string> outs;
  for (const auto& o : session.get_outputs()) outs.push_back(o.name);
  for (const std::string* n : {&s.objective.loss_output, &s.objective.score_output})
    if (!n->empty() && std::find(outs.begin(), outs.end(), *n) == outs.end()) {
      std::string all;
      for (const auto& o : outs) all += (all.empty() ? "" : ", ") + o;
      throw_error<InvalidArgument>("TrainerOptions.objective.", n == &s.objective.loss_output ? "loss_output" : "score_output",
                                   ": '", *n, "' is not an output of the model (outputs: ", all, ")");
    }
  if (s.opt.learning_rate && !p.lr_schedule.empty())
    throw_error<InvalidArgument>("TrainerOptions.learning_rate is set while the session's TrainingParameters.lr_schedule '",
                                 p.lr_schedule, "' gives the rate: give one");
  if (!s.opt.learning_rate && p.lr_schedule.empty())
    throw_error<InvalidArgument>("TrainerOptions.learning_rate is not set and the session's TrainingParameters has no "
                                 "lr_schedule: give one");
  s.epoch_rng.seed(s.opt.seed);
}

Trainer::~Trainer() = default;
Trainer::Trainer(Trainer&&) noexcept = default;
Trainer& Trainer::operator=(Trainer&&) noexcept = default;

void Trainer::Impl::check_inputs(const Dataset& train) const {
  // Inputs with a fixed first dimension take only batches of that size.
  for (const auto& in : session->get_inputs()) {
    if (in.name == session->parameters().lr_params_feed_name || !train.find(in.name)) continue;
    if (in.has_shape && !in.shape.empty() && in.shape[0].value >= 0 && in.shape[0].value != opt.batch_size)
      throw_error<InvalidArgument>("the model's input '", in.name, "' has a fixed batch dimension of ", in.shape[0].value,
                                   ": set TrainerOptions.batch_size to ", in.shape[0].value);
  }
  if (objective.metric != Metric::kNone) train.at(objective.label_name);
}

void Trainer::Impl::check_ranks_agree(const Dataset& train, const Dataset& validation, const std::string& fp) const {
  std::vector<RankFact> f;
  add_data_facts(f, "training", train);
  add_data_facts(f, "validation", validation);
  auto option = [&](const char* field, const std::string& v) { f.push_back({std::string("TrainerOptions.") + field, "has " + v}); };
  option("batch_size", std::to_string(opt.batch_size));
  option("epochs", std::to_string(opt.epochs));
  option("steps", std::to_string(opt.steps));
  option("shuffle", opt.shuffle ? "true" : "false");
  option("drop_last", opt.drop_last ? "true" : "false");
  option("seed", std::to_string(opt.seed));
  option("validation_split", hex(opt.validation_split));
  option("learning_rate", opt.learning_rate ? hex(*opt.learning_rate) : "none");
  option("checkpoint_every", std::to_string(opt.checkpoint_every));
  option("objective.loss_output", "'" + objective.loss_output + "'");
  option("objective.loss_summed", objective.loss_summed ? "true" : "false");
  f.push_back({"the run's position", "is at step " + std::to_string(steps) + " (epoch " + std::to_string(epoch) +
                                         ", batch " + std::to_string(position) + ")"});
  f.push_back({"the data's contents", "has fingerprint " + fp});
  const auto d = distributed::first_disagreement(distributed::Comm::world(), f,
                                                 "the start-of-fit comparison of the ranks' data and options");
  if (!d) return;
  auto value = [&](size_t r) { return d->facts[r] ? d->facts[r]->value : std::string("has nothing there"); };
  std::string what;
  for (const auto& x : d->facts)
    if (x) {
      what = x->what;
      break;
    }
  std::string msg = "rank 0 " + value(0);
  for (size_t k = 0; k < d->ranks.size() && k < 8; ++k) msg += ", rank " + std::to_string(d->ranks[k]) + " " + value(d->ranks[k]);
  if (d->ranks.size() > 8) msg += ", and " + std::to_string(d->ranks.size() - 8) + " more ranks";
  if (d->ranks.size() + 1 < d->facts.size()) msg += " (the other ranks as rank 0)";
  throw_error<InvalidArgument>("Trainer::fit: data-parallel ranks disagree on ", what, ": ", msg,
                               "; every rank must give fit the same data and options (each trains on its share "
                               "of every batch)");
}

FitResult Trainer::fit(const Dataset& train_in, const Dataset& validation, const TrainerCallbacks& cb) {
  Impl& s = *impl_;
  if (s.running) throw_error<InvalidArgument>("Trainer::fit is already running");
  TrainingSession& sess = *s.session;
  const TrainingParameters& params = sess.parameters();
  // A run continued from a checkpoint keeps its fingerprint's version (1: no "2:" prefix).
  const bool v1 = !s.data_fp.empty() && s.data_fp.rfind("2:", 0) != 0;
  const std::string fp = fingerprint(train_in, v1) + "/" + (validation.empty() ? "-" : fingerprint(validation, v1));
  if (sess.world_size() > 1) s.check_ranks_agree(train_in, validation, fp);  // before anything a rank may refuse alone
  const TrainingPlan plan = Trainer::plan(s.opt, train_in.size(), !validation.empty(), params.gradient_accumulation_steps);
  if (!s.data_fp.empty() && s.data_fp != fp)
    throw_error<InvalidArgument>("Trainer::fit: the data differs from the data of the run it continues");

  // Training and validation data.
  Dataset train = train_in, val = validation;
  if (plan.validation_samples > 0 && validation.empty()) {
    std::vector<int64_t> idx(size_t(train_in.size()));
    std::iota(idx.begin(), idx.end(), 0);
    std::mt19937_64 g(s.opt.seed ^ 0x5eed5eed5eedull);
    for (size_t i = idx.size() - 1; i > 0; --i) std::swap(idx[i], idx[size_t(g() % (i + 1))]);
    const auto nv = size_t(plan.validation_samples);
    std::sort(idx.begin(), idx.begin() + ptrdiff_t(nv));
    std::sort(idx.begin() + ptrdiff_t(nv), idx.end());
    val = train_in.take(idx, 0, nv);
    train = train_in.take(idx, nv, idx.size());
  }
  s.check_inputs(train);
  if (!val.empty() && s.objective.metric != Metric::kNone) val.at(s.objective.label_name);
  s.plan = plan;

  const int64_t n = train.size(), bs = s.opt.batch_size, bpe = plan.batches_per_epoch;
  const int64_t log_every = s.opt.log_every ? s.opt.log_every : std::max<int64_t>(1, plan.total_steps / 100);
  std::vector<std::string> names{s.objective.loss_output};
  if (s.objective.metric != Metric::kNone) names.push_back(s.objective.score_output);

  // The epoch's order, drawn from the generator state at its start.
  std::mt19937_64 rng = s.epoch_rng;
  std::vector<int64_t> perm(static_cast<size_t>(n));
  auto start_epoch = [&] {
    s.epoch_rng = rng;
    std::iota(perm.begin(), perm.end(), 0);
    if (s.opt.shuffle)
      for (size_t i = perm.size() - 1; i > 0; --i) std::swap(perm[i], perm[size_t(rng() % (i + 1))]);
  };
  start_epoch();

  s.stop = false;
  s.running = true;
  s.fit_start = std::chrono::steady_clock::now();
  struct Running {
    Impl& s;
    ~Running() {
      s.elapsed += s.seconds_in_fit();
      s.running = false;
    }
  } running{s};
  auto now = [&] { return s.seconds_in_fit(); };

  // Running statistics of the interval since the last record.
  double iv_loss = 0, iv_start = 0;
  int64_t iv_batches = 0, iv_samples = 0;
  train::ScoreAccumulator iv_acc(s.objective);
  const int64_t start_steps = s.steps, start_samples = s.samples;

  auto record = [&](TrainRecord r) {
    const double t = now();
    r.step = s.steps;
    r.epoch = double(s.epoch) + double(s.position) / double(bpe);
    if (iv_batches) {
      r.loss = iv_loss / double(iv_batches);
      r.metric = iv_acc.value();
      r.samples_per_s = double(iv_samples) / std::max(1e-9, t - iv_start);
    }
    r.lr = s.lr_of(sess.step());
    s.history.push_back(r);
    iv_loss = 0;
    iv_batches = iv_samples = 0;
    iv_acc = train::ScoreAccumulator(s.objective);
    iv_start = t;
    if (cb.on_record) cb.on_record(r);
  };
  auto validate = [&](TrainRecord& r) {
    const double t = now();
    ValidationInfo vi;
    vi.step = s.steps;
    vi.epoch = double(s.epoch) + double(s.position) / double(bpe);
    vi.result = s.evaluate(val);
    iv_start += now() - t;  // the validation pass is not training throughput
    r.val_loss = vi.result.loss;
    r.val_metric = vi.result.metric;
    if (cb.on_validation) cb.on_validation(vi);
  };
  auto end_epoch = [&] {
    EpochInfo ei;
    ei.epoch = s.epoch;
    ei.epochs = plan.epochs;
    ei.step = s.steps;
    ei.loss = s.ep_batches ? s.ep_loss / double(s.ep_batches) : NAN;
    ei.metric = s.ep_acc.value();
    TrainRecord r;
    if (!val.empty()) validate(r);
    ei.val_loss = r.val_loss;
    ei.val_metric = r.val_metric;
    record(r);
    s.last_epoch_loss = ei.loss;
    s.ep_loss = 0;
    s.ep_batches = 0;
    s.ep_acc = train::ScoreAccumulator(s.objective);
    if (cb.on_epoch_end) cb.on_epoch_end(ei);
  };

  FitResult result;
  bool trained = false;
  std::vector<std::pair<std::string, Value>> feeds;
  std::vector<Value> outs;
  Value lr_value = Value::of(Tensor::zeros(DType::kFloat32, {1}));
  // Data parallelism: each rank trains on its share of every global batch of bs rows and weighs its
  // gradient by its share of the rows (rank r: rows [b + g r / W, b + g (r + 1) / W) of the g rows).
  // A rank left without rows (a last batch smaller than W) runs one row with weight 0. The loss
  // and the stop requests are combined over the ranks every run, so every rank decides alike.
  const int W = sess.world_size(), R = sess.world_rank();
  bool stop_now = false;
  while (s.steps < plan.total_steps) {
    const int64_t b = s.position * bs, e = std::min(n, b + bs);
    int64_t lo = b, hi = e;
    double share = 1;
    if (W > 1) {
      const int64_t g = e - b;
      lo = b + g * R / W;
      hi = b + g * (R + 1) / W;
      share = double(hi - lo) / double(g);
      if (hi == lo) lo = b, hi = b + 1, share = 0;
      if (s.objective.loss_summed && share > 0) share = 1;
      sess.set_local_batch_share(share);
    }
    const Dataset batch = train.take(perm, size_t(lo), size_t(hi));
    feeds.clear();
    for (const auto& [name, t] : batch.arrays()) feeds.emplace_back(name, Value::of(t));
    const int64_t before = sess.step();
    const double lr = s.lr_of(before + 1);
    if (s.opt.learning_rate) {
      lr_value.tensor.data<float>()[0] = float(lr);
      feeds.emplace_back(params.lr_params_feed_name, lr_value);
    }  // else the session's schedule gives it
    sess.run(names, feeds, outs);
    double loss = train::scalar_loss(outs[0].tensor, s.objective.loss_output);
    if (W > 1) {
      double v[2] = {share * loss, (cb.should_stop && cb.should_stop()) || s.stop ? 1.0 : 0.0};
      distributed::Comm::world().allreduce_sum(v, 2, DType::kFloat64, "the trainer's loss and stop requests");
      loss = v[0];
      stop_now = v[1] > 0;
    }
    if (!std::isfinite(loss))
      throw_error<RuntimeError>("the loss became ", loss, " at step ", s.steps + 1, " (epoch ", s.epoch + 1,
                                "): lower the learning rate or clip the gradient norm");
    if (names.size() > 1) {
      const Tensor& labels = batch.at(s.objective.label_name);
      iv_acc.add(outs[1].tensor, labels);
      s.ep_acc.add(outs[1].tensor, labels);
    }
    trained = true;
    s.data_fp = fp;  // the run is on this data from its first batch on
    iv_loss += loss;
    s.ep_loss += loss;
    ++iv_batches;
    ++s.ep_batches;
    iv_samples += e - b;
    s.samples += e - b;
    ++s.position;
    const bool updated = sess.step() > before;
    if (updated) ++s.steps;
    if (cb.on_step) {
      StepInfo si;
      si.step = s.steps;
      si.total_steps = plan.total_steps;
      si.epoch = s.epoch;
      si.epochs = plan.epochs;
      si.batch = s.position;
      si.batches_per_epoch = bpe;
      si.updated = updated;
      si.loss = loss;
      si.lr = lr;
      si.epoch_loss = s.ep_loss / double(s.ep_batches);
      si.epoch_metric = s.ep_acc.value();
      si.samples = s.samples;
      const double t = now(), done = double(s.steps - start_steps);
      si.samples_per_s = double(s.samples - start_samples) / std::max(1e-9, t);
      si.eta_s = done > 0 ? t / done * double(plan.total_steps - s.steps) : NAN;
      cb.on_step(si);
    }
    if (s.position == bpe) {
      end_epoch();
      ++s.epoch;
      s.position = 0;
      start_epoch();
    } else if (updated && s.steps % log_every == 0) {
      record({});
    }
    if (updated && s.opt.checkpoint_every && s.steps % s.opt.checkpoint_every == 0) save_checkpoint(s.opt.checkpoint_path);
    if (s.steps < plan.total_steps && (W > 1 ? stop_now : (s.stop || (cb.should_stop && cb.should_stop())))) {
      result.stopped = true;  // a request during the run's last batch lets it finish
      break;
    }
  }
  if (result.stopped) {
    if (!s.opt.checkpoint_path.empty()) {
      save_checkpoint(s.opt.checkpoint_path);
      result.checkpoint = s.opt.checkpoint_path;
    }
  } else if (trained && s.ep_batches) {  // a run that ends inside an epoch still gets its record
    TrainRecord r;
    if (!val.empty()) validate(r);
    record(r);
  }
  result.steps = s.steps;
  result.epoch = s.epoch;
  result.batch = s.position;
  result.samples = s.samples;
  result.seconds = s.elapsed + s.seconds_in_fit();
  return result;
}

void Trainer::request_stop() { impl_->stop = true; }

EvalResult Trainer::evaluate(const Dataset& data) { return impl_->evaluate(data); }

void Trainer::save_checkpoint(const std::string& path) const {
  // Data parallelism: every rank calls it (the session decides who writes what).
  const auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw_error<IOError>("cannot create folder '", dir.string(), "': ", ec.message());
  }
  impl_->session->save_checkpoint(path, impl_->metadata());
}

std::map<std::string, std::string> Trainer::load_checkpoint(const std::string& path) {
  Impl& s = *impl_;
  if (s.running) throw_error<InvalidArgument>("Trainer::load_checkpoint while fit runs");
  // Everything is read and checked before the session or the trainer changes.
  const CheckpointInfo info = read_checkpoint_info(path);
  const auto& m = info.metadata;
  for (const char* k : kStateKeys)
    if (!m.count(k))
      throw_error<InvalidArgument>("checkpoint '", path, "' lacks the trainer state '", k,
                                   "' (was it written by a Trainer of this version?)");
  const std::string mine = order_options(s.opt), theirs = m.at("trainer.order");
  if (mine != theirs) {
    std::istringstream a(mine), b(theirs);
    std::string x, y;
    while (a >> x && b >> y)
      if (x != y)
        throw_error<InvalidArgument>("checkpoint '", path, "' was written with TrainerOptions.", y,
                                     ", this trainer has ", x.substr(x.find('=') + 1),
                                     " (resume with the same batch_size, shuffle, drop_last, seed and validation_split)");
  }
  std::mt19937_64 rng;
  {
    std::istringstream in(m.at("trainer.rng"));
    if (!(in >> rng)) throw_error<InvalidArgument>("damaged trainer state 'trainer.rng' in checkpoint '", path, "'");
  }
  const int64_t epoch = to_int(m.at("trainer.epoch"), "trainer.epoch");
  const int64_t position = to_int(m.at("trainer.position"), "trainer.position");
  const int64_t steps = to_int(m.at("trainer.steps"), "trainer.steps");
  const int64_t samples = to_int(m.at("trainer.samples"), "trainer.samples");
  const double elapsed = to_double(m.at("trainer.elapsed"), "trainer.elapsed");
  std::vector<TrainRecord> history = records_from_text(m.at("trainer.history"));
  std::istringstream st(m.at("trainer.epoch_stats"));
  std::string l, b, last;
  if (!(st >> l >> b >> last)) throw_error<InvalidArgument>("damaged trainer state 'trainer.epoch_stats'");
  train::ScoreAccumulator acc(s.objective);
  acc.from_text(m.at("trainer.epoch_score"));
  if (epoch < 0 || position < 0 || steps < 0 || samples < 0)
    throw_error<InvalidArgument>("checkpoint '", path, "' holds a negative trainer counter");

  s.session->load_checkpoint(path);
  s.data_fp = m.at("trainer.data");
  s.epoch_rng = rng;
  s.epoch = epoch;
  s.position = position;
  s.steps = steps;
  s.samples = samples;
  s.elapsed = elapsed;
  s.history = std::move(history);
  s.ep_loss = to_double(l, "trainer.epoch_stats");
  s.ep_batches = to_int(b, "trainer.epoch_stats");
  s.last_epoch_loss = to_double(last, "trainer.epoch_stats");
  s.ep_acc = acc;
  std::map<std::string, std::string> user;
  for (const auto& [k, v] : m)
    if (k.rfind("trainer.", 0) != 0) user[k] = v;
  return user;
}

const std::vector<TrainRecord>& Trainer::history() const { return impl_->history; }
int64_t Trainer::step() const { return impl_->steps; }
int64_t Trainer::epoch() const { return impl_->epoch; }
int64_t Trainer::batch() const { return impl_->position; }
const TrainerOptions& Trainer::options() const { return impl_->opt; }
TrainingSession& Trainer::session() const { return *impl_->session; }

}  // namespace onnxtrain
