// onnxtrain train: the training loop around TrainingSession — data order, validation, progress,
// metrics, curve, checkpoints (periodic, on Ctrl-C, exact resume) and the exported model.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>

#include "commands.h"
#include "data.h"
#include "loss.h"
#include "onnxtrain/checkpoint.h"
#include "onnxtrain/error.h"
#include "onnxtrain/inspect.h"
#include "onnxtrain/io.h"
#include "report.h"
#include "train_setup.h"

namespace cli {

using namespace onnxtrain;

namespace {

volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_stop_signal(int sig) { g_stop = sig; }

// Ctrl-C (and SIGTERM) ask the loop to stop after the current batch; a second one kills.
struct StopSignals {
  struct sigaction old_int{}, old_term{};
  StopSignals() {
    g_stop = 0;
    struct sigaction sa{};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  }
};

// FNV-1a over names, types, shapes and bytes: tells whether a resumed run sees the same data.
std::string fingerprint(const Dataset& d) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  for (const auto& [n, t] : d.arrays) {
    mix(n.data(), n.size());
    const int32_t dt = int32_t(t.dtype());
    mix(&dt, sizeof dt);
    mix(t.shape().data(), t.shape().size() * sizeof(int64_t));
    mix(t.raw_data(), t.nbytes());
  }
  return std::to_string(h);
}

std::string rng_text(const std::mt19937_64& g) {
  std::ostringstream o;
  o << g;
  return o.str();
}

std::vector<std::pair<std::string, Value>> feeds_of(const Dataset& batch) {
  std::vector<std::pair<std::string, Value>> f;
  for (const auto& [n, t] : batch.arrays) f.emplace_back(n, Value::of(t));
  return f;
}

std::string percent_or_number(const std::string& metric, double v) {
  return metric == "accuracy" ? fmt("%.2f%%", 100 * v) : format_number(v);
}

}  // namespace

const Command& train_command() {
  static const Command c = [] {
    Command c;
    c.name = "train";
    c.synopsis = "MODEL --data FILE [options]";
    c.summary = "train a model; writes the trained inference model, metrics (JSON lines) and a curve (SVG)";
    c.description =
        "Trains MODEL (ONNX) on FILE. With --loss, the loss is added to the model's output (--score-output) and a\n"
        "label input (--label-name); without it the model must already output its loss (--loss-output).\n"
        "A progress bar shows on a terminal, plain lines otherwise. Ctrl-C saves a checkpoint and stops (exit\n"
        "status 130); the same command with --resume continues exactly where it stopped.";
    c.positional = {"MODEL"};
    c.options = data_options(false);
    c.options.push_back({"--validation-split", "F", "hold out this fraction of the data (shuffled with --seed)"});
    c.options.push_back({"--validation-data", "FILE", "held-out data (same formats as --data)"});
    c.options.push_back({"--validation-labels", "FILE.npy", "labels of .npy --validation-data"});
    for (auto& o : loss_options()) c.options.push_back(o);
    for (auto& o : optimizer_options()) c.options.push_back(o);
    for (Option o : std::vector<Option>{
             {"--batch-size", "N", "samples per batch (default 32)"},
             {"--epochs", "N", "passes over the data (default 1)"},
             {"--steps", "N", "optimizer steps to take instead of --epochs"},
             {"--drop-last", "", "skip the last batch of an epoch when it is smaller than --batch-size"},
             {"--no-shuffle", "", "keep the data order (default: reshuffled every epoch with --seed)"},
             {"--seed", "S", "seed of the data order, the validation split and random operators (default 0)"},
             {"--threads", "N", "threads inside kernels (default: all cores)"},
             {"--eval-batch-size", "N", "batch size of the validation pass (default 1024)"},
             {"--out", "FILE", "trained inference model (default: MODEL's name with .trained.onnx, here)"},
             {"--metrics", "FILE", "metrics, one JSON object a line (default: --out with .metrics.jsonl)"},
             {"--curve", "FILE", "loss/accuracy curve (default: --metrics with .svg)"},
             {"--log-every", "N", "optimizer steps between metrics records (default: about 100 records a run)"},
             {"--checkpoint-dir", "DIR", "write DIR/last.ckpt every --checkpoint-every steps and at the end "
                                         "(Ctrl-C always saves one; default DIR: --out with .checkpoints)"},
             {"--checkpoint-every", "N", "optimizer steps between checkpoints"},
             {"--resume", "", "continue from the checkpoint in --checkpoint-dir (same options; bitwise the same "
                              "result as an uninterrupted run)"},
             {"--progress", "MODE", "auto (a bar on a terminal, plain lines otherwise), bar, plain or none"},
         })
      c.options.push_back(o);
    c.epilog =
        "examples:\n"
        "  onnxtrain train mlp.onnx --data digits.npz --loss cross_entropy --optimizer adam --lr 0.01 \\\n"
        "      --epochs 20 --validation-split 0.2 --out trained.onnx\n"
        "  onnxtrain train reg.onnx --data houses.csv --label-column price --loss squared_error --steps 500\n"
        "  onnxtrain train model_with_loss.onnx --data d.npz --optimizer sgd --momentum 0.9 --checkpoint-dir ck\n"
        "  onnxtrain train mlp.onnx --data digits.npz --loss cross_entropy --checkpoint-dir ck --resume";
    return c;
  }();
  return c;
}

int cmd_train(const Args& a) {
  const std::string model_path = a.positional(0);
  if (!a.has("--data")) throw UsageError("missing --data FILE (see onnxtrain train --help)");
  if (a.has("--epochs") && a.has("--steps")) throw UsageError("give --epochs or --steps, not both");
  if (a.has("--validation-split") && a.has("--validation-data"))
    throw UsageError("give --validation-split or --validation-data, not both");
  const int64_t batch_size = a.integer("--batch-size", 32, 1, int64_t(1) << 40);
  const int64_t epochs_opt = a.integer("--epochs", 1, 1, int64_t(1) << 40);
  const int64_t steps_opt = a.integer("--steps", 0, 1, int64_t(1) << 40);
  const double val_split = a.number("--validation-split", 0, 0, 1);
  const int64_t seed = a.integer("--seed", 0, 0, INT64_MAX);
  const int64_t threads = a.integer("--threads", 0, 1, 4096);
  const int64_t eval_batch = a.integer("--eval-batch-size", 1024, 1, int64_t(1) << 40);
  const std::string progress_mode = a.choice("--progress", "auto", {"auto", "bar", "plain", "none"});
  const bool shuffle = !a.flag("--no-shuffle"), drop_last = a.flag("--drop-last");
  std::string model_stem = std::filesystem::path(model_path).filename().string();
  model_stem = strip_suffix(model_stem, ".onnx");
  const std::string out = a.str("--out", model_stem + ".trained.onnx");
  const std::string metrics_path = a.str("--metrics", strip_suffix(out, ".onnx") + ".metrics.jsonl");
  const std::string curve_path = a.str("--curve", strip_suffix(strip_suffix(metrics_path, ".jsonl"), ".json") + ".svg");
  const std::string ckpt_dir = a.str("--checkpoint-dir", strip_suffix(out, ".onnx") + ".checkpoints");
  const std::string ckpt_path = (std::filesystem::path(ckpt_dir) / "last.ckpt").string();
  const int64_t ckpt_every = a.integer("--checkpoint-every", 0, 1, int64_t(1) << 40);
  if (ckpt_every && !a.has("--checkpoint-dir")) throw UsageError("--checkpoint-every needs --checkpoint-dir");

  // The checkpoint to resume (read first: its options must match this command line).
  CheckpointInfo resume;
  if (a.flag("--resume")) {
    if (!std::filesystem::exists(ckpt_path))
      throw_error<IOError>("--resume: no checkpoint '", ckpt_path, "' (give the --checkpoint-dir of the run to resume)");
    resume = read_checkpoint_info(ckpt_path);
    if (!resume.metadata.count("trainer.options"))
      throw_error<InvalidArgument>("--resume: '", ckpt_path, "' was not written by onnxtrain train");
    check_same_options(a, resume.metadata.at("trainer.options"));
  }

  // Model, loss and session. The data is checked against the session's inputs.
  const std::string model_bytes = read_file(model_path, "model file");
  const LossModel lm = build_loss_model(model_bytes, loss_config(a), dir_of(model_path));
  const int64_t accum = make_train_setup(a, model_bytes, lm, 1 << 30).params.gradient_accumulation_steps;  // checks options
  SessionOptions so;
  so.intra_op_num_threads = int(threads);
  so.seed = uint64_t(seed);
  const std::vector<NodeArg> inputs = summarize_model_bytes(lm.bytes, dir_of(model_path)).inputs;
  std::vector<NodeArg> features;
  const NodeArg* label = nullptr;
  for (const auto& i : inputs) {
    if (i.name == lm.cfg.label_name) label = &i;
    else features.push_back(i);
  }
  Dataset all = load_dataset(data_source(a), features, label, lm.cfg.label_name);
  for (const auto& f : inputs)
    if (f.has_shape && !f.shape.empty() && f.shape[0].value >= 0 && f.shape[0].value != batch_size)
      throw_error<InvalidArgument>("the model's input '", f.name, "' has a fixed batch dimension of ", f.shape[0].value,
                                   ": use --batch-size ", f.shape[0].value);

  // Training / validation split.
  Dataset train, val;
  bool has_val = false;
  if (a.has("--validation-data")) {
    val = load_dataset(data_source(a, "--validation-"), features, label, lm.cfg.label_name);
    train = std::move(all);
    has_val = true;
  } else if (val_split > 0) {
    const int64_t nv = int64_t(double(all.rows) * val_split + 0.5);
    if (nv < 1 || nv >= all.rows)
      throw UsageError("option --validation-split " + a.str("--validation-split") + " leaves " +
                       std::to_string(all.rows - nv) + " training and " + std::to_string(nv) + " held-out samples of " +
                       std::to_string(all.rows));
    std::vector<int64_t> idx(size_t(all.rows));
    std::iota(idx.begin(), idx.end(), 0);
    std::mt19937_64 g(uint64_t(seed) ^ 0x5eed5eed5eedull);
    for (size_t i = idx.size() - 1; i > 0; --i) std::swap(idx[i], idx[size_t(g() % (i + 1))]);
    std::vector<int64_t> vi(idx.begin(), idx.begin() + nv), ti(idx.begin() + nv, idx.end());
    std::sort(vi.begin(), vi.end());
    std::sort(ti.begin(), ti.end());
    val = take_rows(all, vi, 0, vi.size());
    train = take_rows(all, ti, 0, ti.size());
    has_val = true;
  } else {
    train = std::move(all);
  }
  const int64_t n = train.rows;
  const int64_t bpe = drop_last ? n / batch_size : (n + batch_size - 1) / batch_size;  // batches per epoch
  if (bpe < 1)
    throw UsageError("--drop-last with --batch-size " + std::to_string(batch_size) + " leaves no batch of the " +
                     std::to_string(n) + " training samples");
  const int64_t total_steps = steps_opt ? steps_opt : epochs_opt * bpe / accum;
  if (total_steps < 1)
    throw UsageError("--epochs " + std::to_string(epochs_opt) + " gives " + std::to_string(epochs_opt * bpe) +
                     " batches, fewer than one optimizer step of --grad-accum " + std::to_string(accum));
  const int64_t epochs_total = steps_opt ? (steps_opt * accum + bpe - 1) / bpe : epochs_opt;
  const int64_t log_every = a.integer("--log-every", std::max<int64_t>(1, total_steps / 100), 1, int64_t(1) << 40);

  const TrainSetup setup = make_train_setup(a, model_bytes, lm, total_steps);
  TrainingSession sess(lm.bytes.data(), lm.bytes.size(), setup.params, so, dir_of(model_path));
  const std::string metric = lm.scoring.metric_name();
  const std::string data_fp = fingerprint(train) + "/" + (has_val ? fingerprint(val) : "-");

  // Trainer state (restored from the checkpoint when resuming).
  std::mt19937_64 rng{uint64_t(seed)};
  std::string epoch_rng;  // generator state at the start of the current epoch
  std::vector<int64_t> perm(static_cast<size_t>(n));
  int64_t epoch = 0, position = 0, samples_done = 0;
  double elapsed_before = 0;
  std::vector<Record> history;
  std::map<std::string, std::string> resume_meta;
  auto start_epoch = [&] {
    epoch_rng = rng_text(rng);
    std::iota(perm.begin(), perm.end(), 0);
    if (shuffle)
      for (size_t i = perm.size() - 1; i > 0; --i) std::swap(perm[i], perm[size_t(rng() % (i + 1))]);
  };
  if (a.flag("--resume")) {
    resume_meta = sess.load_checkpoint(ckpt_path);
    const auto& meta = resume_meta;
    for (const char* k : {"trainer.data", "trainer.rng", "trainer.epoch", "trainer.position", "trainer.samples",
                          "trainer.elapsed", "trainer.history", "trainer.epoch_stats", "trainer.epoch_score"})
      if (!meta.count(k))
        throw_error<InvalidArgument>("--resume: '", ckpt_path, "' lacks the trainer state '", k,
                                     "' (written by another version of onnxtrain train?)");
    if (meta.at("trainer.data") != data_fp)
      throw_error<InvalidArgument>("--resume: the data differs from the data of the run that wrote '", ckpt_path, "'");
    std::istringstream(meta.at("trainer.rng")) >> rng;
    epoch = std::stoll(meta.at("trainer.epoch"));
    position = std::stoll(meta.at("trainer.position"));
    samples_done = std::stoll(meta.at("trainer.samples"));
    elapsed_before = std::stod(meta.at("trainer.elapsed"));
    history = records_from_text(meta.at("trainer.history"));
  }
  start_epoch();

  // Running statistics of the current interval (between records) and epoch.
  double iv_loss = 0, ep_loss = 0, last_epoch_loss = NAN;
  int64_t iv_batches = 0, iv_samples = 0, ep_batches = 0;
  const int64_t samples_start = samples_done;
  ScoreAccumulator iv_acc(lm.scoring), ep_acc(lm.scoring);
  if (a.flag("--resume")) {  // the epoch in progress keeps its running loss and score
    const auto& meta = resume_meta;
    std::istringstream st(meta.at("trainer.epoch_stats"));
    std::string l, b, last;
    st >> l >> b >> last;
    ep_loss = std::strtod(l.c_str(), nullptr);
    ep_batches = std::stoll(b);
    last_epoch_loss = std::strtod(last.c_str(), nullptr);
    ep_acc.from_text(meta.at("trainer.epoch_score"));
  }

  // Output (stdout): what is about to happen.
  std::printf("training %s: %lld samples", model_path.c_str(), (long long)n);
  if (has_val) std::printf(", %lld held out", (long long)val.rows);
  std::printf("; %lld batches of %lld per epoch, %lld optimizer steps", (long long)bpe, (long long)batch_size,
              (long long)total_steps);
  std::printf("\n  loss %s, optimizer %s, lr %s%s\n",
              lm.cfg.kind.empty() ? ("'" + lm.cfg.loss_output + "' (in the model)").c_str()
                                  : (lm.cfg.kind + " (" + lm.cfg.reduction + ") on '" + lm.score_output + "'").c_str(),
              setup.optimizer.c_str(), format_number(setup.lr).c_str(),
              setup.schedule == "constant" ? "" : (" (" + setup.schedule + " schedule)").c_str());
  if (a.flag("--resume"))
    std::printf("  resuming from %s at step %lld (epoch %lld, batch %lld)\n", ckpt_path.c_str(), (long long)sess.step(),
                (long long)epoch + 1, (long long)position);
  std::fflush(stdout);

  auto metadata = [&] {
    std::map<std::string, std::string> m;
    m["trainer.options"] = recorded_options(a);
    m["trainer.data"] = data_fp;
    m["trainer.rng"] = epoch_rng;
    m["trainer.epoch"] = std::to_string(epoch);
    m["trainer.position"] = std::to_string(position);
    m["trainer.samples"] = std::to_string(samples_done);
    m["trainer.history"] = records_to_text(history);
    m["trainer.total_steps"] = std::to_string(total_steps);
    m["trainer.epoch_stats"] = fmt("%a", ep_loss) + " " + std::to_string(ep_batches) + " " + fmt("%a", last_epoch_loss);
    m["trainer.epoch_score"] = ep_acc.to_text();
    return m;
  };
  auto write_metrics = [&] {
    std::string s;
    for (const auto& r : history) s += record_json(r, metric) + "\n";
    make_dirs_for(metrics_path);
    write_file_atomic(metrics_path, s);
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  auto save_checkpoint = [&] {
    make_dirs_for(ckpt_path);
    auto m = metadata();
    m["trainer.elapsed"] = std::to_string(elapsed_before + seconds());
    sess.save_checkpoint(ckpt_path, m);
  };

  auto validate = [&] {
    return evaluate(val, eval_batch, lm, [&](const Dataset& b) {
      std::vector<std::string> names{lm.cfg.loss_output};
      if (!lm.score_output.empty()) names.push_back(lm.score_output);
      auto outs = sess.eval(names, feeds_of(b));
      std::vector<Tensor> r;
      for (auto& v : outs) r.push_back(v.tensor);
      return r;
    });
  };

  Progress progress(progress_mode, total_steps, epochs_total, metric);
  double iv_start = 0;
  const int64_t start_step = sess.step();

  auto flush_record = [&](Record r) {
    const double now = seconds();
    r.step = sess.step();
    r.epoch = double(epoch) + double(position) / double(bpe);
    if (iv_batches) {
      r.loss = iv_loss / double(iv_batches);
      if (iv_acc.defined()) r.metric = iv_acc.value();
      r.samples_per_s = double(iv_samples) / std::max(1e-9, now - iv_start);
    }
    r.lr = setup.params.lr_schedule.empty() ? setup.lr
                                            : scheduled_learning_rate(setup.params, std::max<int64_t>(1, sess.step()));
    history.push_back(r);
    iv_loss = 0;
    iv_batches = iv_samples = 0;
    iv_acc = ScoreAccumulator(lm.scoring);
    iv_start = now;
  };
  auto end_epoch = [&] {
    Record r;
    std::string line = "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs_total) + ": loss " +
                       format_number(ep_batches ? ep_loss / double(ep_batches) : NAN);
    if (ep_acc.defined()) line += " " + metric + " " + percent_or_number(metric, ep_acc.value());
    if (has_val) {
      const double tv = seconds();
      EvalResult v = validate();
      iv_start += seconds() - tv;  // the validation pass is not training throughput
      r.val_loss = v.loss;
      if (v.has_metric) r.val_metric = v.metric;
      line += " | held-out loss " + format_number(v.loss);
      if (v.has_metric) line += " " + metric + " " + percent_or_number(metric, v.metric);
    }
    flush_record(r);
    progress.line(line);
    last_epoch_loss = ep_batches ? ep_loss / double(ep_batches) : NAN;
    ep_loss = 0;
    ep_batches = 0;
    ep_acc = ScoreAccumulator(lm.scoring);
  };

  bool interrupted = false;
  {
    StopSignals signals;
    std::vector<std::string> names{lm.cfg.loss_output};
    if (!lm.score_output.empty() && lm.scoring.kind != Scoring::kNone) names.push_back(lm.score_output);
    Tensor lr_tensor = Tensor::from_vector<float>({1}, {float(setup.lr)});
    while (sess.step() < total_steps) {
      const int64_t b = position * batch_size, e = std::min(n, b + batch_size);
      Dataset batch = take_rows(train, perm, size_t(b), size_t(e));
      auto feeds = feeds_of(batch);
      const int64_t step_before = sess.step();
      const double lr = setup.params.lr_schedule.empty() ? setup.lr : scheduled_learning_rate(setup.params, step_before + 1);
      lr_tensor.data<float>()[0] = float(lr);
      feeds.emplace_back(setup.params.lr_params_feed_name, Value::of(lr_tensor));
      auto outs = sess.run(names, feeds);
      const double loss = scalar_value(outs[0].tensor);
      if (!std::isfinite(loss))
        throw_error<RuntimeError>("the loss became ", loss, " at step ", step_before + 1, " (epoch ", epoch + 1,
                                  "): lower --lr or add --clip-norm");
      if (names.size() > 1) {
        iv_acc.add(outs[1].tensor, array(batch, lm.cfg.label_name));
        ep_acc.add(outs[1].tensor, array(batch, lm.cfg.label_name));
      }
      iv_loss += loss;
      ep_loss += loss;
      ++iv_batches;
      ++ep_batches;
      iv_samples += e - b;
      samples_done += e - b;
      ++position;
      const bool stepped = sess.step() > step_before;
      if (position == bpe) {
        end_epoch();
        ++epoch;
        position = 0;
        start_epoch();
      } else if (stepped && sess.step() % log_every == 0) {
        flush_record({});
      }
      const double t = seconds();
      const double done = double(sess.step() - start_step);
      progress.update(sess.step(), epoch, ep_batches ? ep_loss / double(ep_batches) : last_epoch_loss,
                      ep_acc.defined() ? ep_acc.value() : NAN, double(samples_done - samples_start) / std::max(1e-9, t),
                      done > 0 ? t / done * double(total_steps - sess.step()) : NAN);
      if (stepped && ckpt_every && sess.step() % ckpt_every == 0) save_checkpoint();
      if (g_stop) {
        interrupted = true;
        break;
      }
    }
  }
  if (interrupted) {
    progress.finish();
    save_checkpoint();
    write_metrics();
    std::fprintf(stderr,
                 "onnxtrain train: interrupted at step %lld of %lld (epoch %lld, batch %lld of %lld); checkpoint "
                 "saved to %s; run the same command with --resume to continue\n",
                 (long long)sess.step(), (long long)total_steps, (long long)epoch + 1, (long long)position,
                 (long long)bpe, ckpt_path.c_str());
    return kExitInterrupted;
  }
  // A run that ends inside an epoch still gets its last record and held-out score.
  if (ep_batches) {
    Record r;
    if (has_val) {
      EvalResult v = validate();
      r.val_loss = v.loss;
      if (v.has_metric) r.val_metric = v.metric;
    }
    flush_record(r);
  }
  progress.finish();
  const double wall = seconds();

  make_dirs_for(out);
  sess.export_model_to(out);
  write_metrics();
  make_dirs_for(curve_path);
  write_file_atomic(curve_path, curve_svg(history, metric, "onnxtrain train " + model_stem));
  if (a.has("--checkpoint-dir")) save_checkpoint();

  // One-screen summary.
  double final_loss = NAN, final_metric = NAN, last_val_loss = NAN, last_val_metric = NAN;
  for (const auto& r : history) {
    if (!std::isnan(r.loss)) final_loss = r.loss, final_metric = r.metric;
    if (!std::isnan(r.val_loss)) last_val_loss = r.val_loss, last_val_metric = r.val_metric;
  }
  double best_val = NAN;
  int64_t best_step = 0;
  for (const auto& r : history)
    if (!std::isnan(r.val_metric) && !(r.val_metric <= best_val)) best_val = r.val_metric, best_step = r.step;
  const int64_t trained_params = [&] {
    int64_t p = 0;
    for (const auto& [nm, t] : sess.get_model_state()) p += t.numel();
    return p;
  }();
  std::printf("\n== summary ==============================================================\n");
  std::printf("model        %s: %zu weights trained (%lld parameters)%s\n", model_path.c_str(),
              sess.trained_weights().size(), (long long)trained_params,
              setup.params.weights_not_to_train.empty() ? "" : (", " + std::to_string(setup.params.weights_not_to_train.size()) + " frozen").c_str());
  std::printf("data         %lld training samples%s\n", (long long)n,
              has_val ? (", " + std::to_string(val.rows) + " held out").c_str() : "");
  std::printf("training     %lld optimizer steps, %.2f epochs, batch %lld%s, %s lr %s%s\n", (long long)sess.step(),
              double(samples_done) / double(n), (long long)batch_size,
              accum > 1 ? (" x " + std::to_string(accum) + " accumulated").c_str() : "", setup.optimizer.c_str(),
              format_number(setup.lr).c_str(), setup.schedule == "constant" ? "" : (" " + setup.schedule).c_str());
  const double total_wall = wall + elapsed_before;
  const std::string wall_text = total_wall < 60 ? fmt("%.1f s", total_wall)
                                                : format_duration(total_wall) + " (" + fmt("%.1f s", total_wall) + ")";
  std::printf("time         %s wall, %.0f samples/s\n", wall_text.c_str(),
              double(samples_done) / std::max(1e-9, total_wall));
  std::printf("final        train loss %s", format_number(final_loss).c_str());
  if (!std::isnan(final_metric)) std::printf(", train %s %s", metric.c_str(), percent_or_number(metric, final_metric).c_str());
  std::printf("\n");
  if (has_val) {
    std::printf("held-out     loss %s", format_number(last_val_loss).c_str());
    if (!std::isnan(last_val_metric)) std::printf(", %s %s", metric.c_str(), percent_or_number(metric, last_val_metric).c_str());
    if (!std::isnan(best_val)) std::printf(" (best %s at step %lld)", percent_or_number(metric, best_val).c_str(), (long long)best_step);
    std::printf("\n");
  }
  std::printf("wrote        %s (trained model)\n             %s (metrics)\n             %s (curve)\n", out.c_str(),
              metrics_path.c_str(), curve_path.c_str());
  if (a.has("--checkpoint-dir")) std::printf("             %s (checkpoint)\n", ckpt_path.c_str());
  std::printf("=========================================================================\n");
  return kExitOk;
}

}  // namespace cli
