// onnxtrain train: the command line of onnxtrain::Trainer — options in, progress, metrics (JSON
// lines), curve (SVG), the trained model and a summary out; Ctrl-C asks the trainer to stop.
#include <thread>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "onnxtrain/checkpoint.h"
#include "onnxtrain/error.h"
#include "onnxtrain/inspect.h"
#include "onnxtrain/io.h"
#include "onnxtrain/distributed.h"
#include "onnxtrain/trainer.h"
#include "report.h"

namespace cli {

using namespace onnxtrain;

namespace {

volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_stop_signal(int sig) { g_stop = sig; }

// Ctrl-C (and SIGTERM) ask the trainer to stop after the current batch; a second one kills.
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

std::string percent_or_number(const std::string& metric, double v) {
  return metric == "accuracy" ? fmt("%.2f%%", 100 * v) : format_number(v);
}

int run_train(const TrainArgs& a, const CLI::App& app);

}  // namespace

const CommandInfo& train_info() {
  static const CommandInfo c{
      "train", "MODEL --data FILE [options]",
      "train a model; writes the trained inference model, metrics (JSON lines) and a curve (SVG)",
      "Trains MODEL (ONNX) on FILE. With --loss, the loss is added to the model's output (--score-output) and a\n"
      "label input (--label-name); without it the model must already output its loss (--loss-output).\n"
      "A progress bar shows on a terminal, plain lines otherwise. Ctrl-C saves a checkpoint and stops (exit\n"
      "status 130); the same command with --resume continues exactly where it stopped.",
      "examples:\n"
      "  onnxtrain train mlp.onnx --data digits.npz --loss cross_entropy --optimizer adam --lr 0.01 \\\n"
      "      --epochs 20 --validation-split 0.2 --out trained.onnx\n"
      "  onnxtrain train reg.onnx --data houses.csv --label-column price --loss squared_error --steps 500\n"
      "  onnxtrain train model_with_loss.onnx --data d.npz --optimizer sgd --momentum 0.9 --checkpoint-dir ck\n"
      "  onnxtrain train mlp.onnx --data digits.npz --loss cross_entropy --checkpoint-dir ck --resume"};
  return c;
}

void define_train_options(CLI::App& app, TrainArgs& a) {
  constexpr int64_t kBig = int64_t(1) << 40;
  app.add_option("MODEL", a.model, "model to train, or a folder of on-device training artifacts (onnxtrain artifacts)")->required();
  add_data_options(app, a.data, false);
  auto* split = app.add_option("--validation-split", a.validation_split,
                               "hold out this fraction of the data (shuffled with --seed)")
                    ->type_name("F")
                    ->check(number(0, 1));
  app.add_option("--validation-data", a.validation_data, "held-out data (same formats as --data)")
      ->type_name("FILE")
      ->excludes(split);
  app.add_option("--validation-labels", a.validation_labels, "labels of .npy --validation-data")->type_name("FILE.npy");
  add_loss_options(app, a.loss);
  add_optimizer_options(app, a.opt);
  app.add_option("--batch-size", a.batch_size, "samples per batch (default 32)")->type_name("N")->check(integer(1, kBig));
  auto* epochs = app.add_option("--epochs", a.epochs, "passes over the data (default 1)")->type_name("N")->check(integer(1, kBig));
  app.add_option("--steps", a.steps, "optimizer steps to take instead of --epochs")
      ->type_name("N")
      ->check(integer(1, kBig))
      ->excludes(epochs);
  app.add_flag("--drop-last", a.drop_last, "skip the last batch of an epoch when it is smaller than --batch-size");
  app.add_flag("--no-shuffle", a.no_shuffle, "keep the data order (default: reshuffled every epoch with --seed)");
  app.add_option("--seed", a.seed, "seed of the data order, the validation split and random operators (default 0)")
      ->type_name("S")
      ->check(integer(0, INT64_MAX));
  add_threads_option(app, a.threads, a.memory_limit, a.providers);
  app.add_option("--eval-batch-size", a.eval_batch_size, "batch size of the validation pass (default 1024)")
      ->type_name("N")
      ->check(integer(1, kBig));
  app.add_option("--out", a.out, "trained inference model (default: MODEL's name with .trained.onnx, here)")->type_name("FILE");
  app.add_option("--metrics", a.metrics, "metrics, one JSON object a line (default: --out with .metrics.jsonl)")
      ->type_name("FILE");
  app.add_option("--curve", a.curve, "loss/accuracy curve (default: --metrics with .svg)")->type_name("FILE");
  app.add_option("--log-every", a.log_every, "optimizer steps between metrics records (default: about 100 records a run)")
      ->type_name("N")
      ->check(integer(1, kBig));
  auto* dir = app.add_option("--checkpoint-dir", a.checkpoint_dir,
                             "write DIR/last.ckpt every --checkpoint-every steps and at the end (Ctrl-C always saves "
                             "one; default DIR: --out with .checkpoints)")
                  ->type_name("DIR");
  app.add_option("--checkpoint-every", a.checkpoint_every, "optimizer steps between checkpoints")
      ->type_name("N")
      ->check(integer(1, kBig))
      ->needs(dir);
  app.add_flag("--resume", a.resume,
               "continue from the checkpoint in --checkpoint-dir (same options; bitwise the same result as an "
               "uninterrupted run)");
  app.add_option("--progress", a.progress, "auto (a bar on a terminal, plain lines otherwise), bar, plain or none")
      ->type_name("MODE")
      ->check(choice({"auto", "bar", "plain", "none"}));
  app.add_flag("--profile", a.profile,
               "time every node of the training plan and print, after the run, the time per operator type and "
               "per node, split into forward, backward and optimizer");
}

Command train_command() {
  return {train_info, [](CLI::App& app) -> std::function<int()> {
            auto a = std::make_shared<TrainArgs>();
            define_train_options(app, *a);
            return [a, &app] { return run_train(*a, app); };
          }};
}

namespace {

int run_train(const TrainArgs& a, const CLI::App& app) {
  const std::string& model_path = a.model;
  // A folder of training artifacts (any other folder is refused below as not a model file).
  if (std::filesystem::is_directory(model_path) &&
      std::filesystem::exists(std::filesystem::path(model_path) / "training_model.onnx"))
    return run_train_artifacts(a, app);
  if (!given(app, "--data")) throw UsageError("missing --data FILE (see onnxtrain train --help)");
  const std::string model_stem = strip_suffix(std::filesystem::path(model_path).filename().string(), ".onnx");
  const std::string out = given(app, "--out") ? a.out : model_stem + ".trained.onnx";
  const std::string metrics_path = given(app, "--metrics") ? a.metrics : strip_suffix(out, ".onnx") + ".metrics.jsonl";
  const std::string curve_path =
      given(app, "--curve") ? a.curve : strip_suffix(strip_suffix(metrics_path, ".jsonl"), ".json") + ".svg";
  const std::string ckpt_dir = given(app, "--checkpoint-dir") ? a.checkpoint_dir : strip_suffix(out, ".onnx") + ".checkpoints";
  const std::string ckpt_path = (std::filesystem::path(ckpt_dir) / "last.ckpt").string();
  const std::string recorded = recorded_options(app);

  // The checkpoint to resume (read first: its options must match this command line).
  if (a.resume) {
    if (!std::filesystem::exists(ckpt_path))
      throw_error<IOError>("--resume: no checkpoint '", ckpt_path, "' (give the --checkpoint-dir of the run to resume)");
    const CheckpointInfo info = read_checkpoint_info(ckpt_path);
    if (info.metadata.count("trainer.options") && !info.metadata.count("cli.options"))
      throw_error<InvalidArgument>("--resume: '", ckpt_path, "' was written by an earlier onnxtrain whose resume state ",
                                   "this version cannot continue exactly; `onnxtrain export --checkpoint` still reads it");
    if (!info.metadata.count("cli.options"))
      throw_error<InvalidArgument>("--resume: '", ckpt_path, "' was not written by onnxtrain train");
    check_same_options(app, info.metadata.at("cli.options"));
  }

  // Model, loss and data (checked against the model's inputs).
  const std::string model_bytes = read_file(model_path, "model file");
  const LossModel lm = build_loss_model(model_bytes, a.loss, dir_of(model_path));
  std::vector<NodeArg> features;
  const NodeArg* label = nullptr;
  const std::vector<NodeArg> inputs = summarize_model_bytes(lm.bytes, dir_of(model_path)).inputs;
  for (const auto& i : inputs) {
    if (i.name == a.loss.label_name) label = &i;
    else features.push_back(i);
  }
  const Dataset data = load_dataset(data_source(a.data), features, label, a.loss.label_name);
  Dataset validation;
  if (given(app, "--validation-data")) {
    DataSource v = data_source(a.data);
    v.path = a.validation_data;
    v.labels_path = a.validation_labels;
    validation = load_dataset(v, features, label, a.loss.label_name);
  }

  TrainerOptions o;
  o.batch_size = a.batch_size;
  o.epochs = given(app, "--steps") ? 0 : a.epochs;
  o.steps = a.steps;
  o.shuffle = !a.no_shuffle;
  o.drop_last = a.drop_last;
  o.seed = uint64_t(a.seed);
  o.validation_split = a.validation_split;
  o.eval_batch_size = a.eval_batch_size;
  o.objective = lm.objective;
  o.log_every = a.log_every;
  o.checkpoint_path = ckpt_path;  // Ctrl-C saves there
  o.checkpoint_every = a.checkpoint_every;
  o.checkpoint_metadata["cli.options"] = recorded;
  TrainingPlan plan;
  try {
    plan = Trainer::plan(o, data.size(), !validation.empty(), a.opt.grad_accum);
  } catch (const InvalidArgument& e) {
    throw UsageError(cli_wording(e.what()));
  }
  const TrainSetup setup = make_train_setup(a.opt, app, model_bytes, lm, plan.total_steps);
  if (setup.params.lr_schedule.empty()) o.learning_rate = setup.lr;
  SessionOptions so = session_options(a.threads, a.memory_limit, a.providers);
  so.seed = uint64_t(a.seed);
  // Under mpirun: every rank trains on its share of each --batch-size rows (the result does not
  // depend on the number of ranks); rank 0 prints and writes the outputs; the machine's cores are
  // split between its ranks unless --threads says otherwise.
  const distributed::LaunchInfo launch = distributed::launch_info();
  const bool quiet_rank = launch.launched && launch.size > 1 && launch.rank != 0;
  if (launch.launched && launch.local_size > 1 && !given(app, "--threads"))
    so.intra_op_num_threads = std::max(1, int(std::thread::hardware_concurrency()) / launch.local_size);
  if (quiet_rank && !std::freopen("/dev/null", "w", stdout))
    throw_error<IOError>("rank ", launch.rank, ": cannot silence its standard output");
  TrainingSession sess(lm.bytes.data(), lm.bytes.size(), setup.params, so, dir_of(model_path));
  Trainer trainer(sess, o);
  if (a.resume) trainer.load_checkpoint(ckpt_path);
  if (a.profile) sess.start_profiling(false);
  int64_t runs = 0;  // training runs (batches) of this invocation
  const std::string metric = metric_label(lm.objective.metric);

  // Output (stdout): what is about to happen.
  std::printf("training %s: %lld samples", model_path.c_str(), (long long)plan.train_samples);
  if (sess.world_size() > 1) std::printf(" on %d ranks", sess.world_size());
  const int64_t held_out = validation.empty() ? plan.validation_samples : validation.size();
  if (held_out) std::printf(", %lld held out", (long long)held_out);
  std::printf("; %lld batches of %lld per epoch, %lld optimizer steps", (long long)plan.batches_per_epoch,
              (long long)a.batch_size, (long long)plan.total_steps);
  std::printf("\n  loss %s, optimizer %s, lr %s%s\n",
              a.loss.kind.empty() ? ("'" + a.loss.loss_output + "' (in the model)").c_str()
                                  : (a.loss.kind + " (" + a.loss.reduction + ") on '" + lm.objective.score_output + "'").c_str(),
              setup.optimizer.c_str(), format_number(setup.lr).c_str(),
              setup.schedule == "constant" ? "" : (" (" + setup.schedule + " schedule)").c_str());
  if (a.resume)
    std::printf("  resuming from %s at step %lld (epoch %lld, batch %lld)\n", ckpt_path.c_str(), (long long)trainer.step(),
                (long long)trainer.epoch() + 1, (long long)trainer.batch());
  std::fflush(stdout);

  Progress progress(quiet_rank ? "none" : a.progress, plan.total_steps, plan.epochs, metric);
  TrainerCallbacks cb;
  cb.on_step = [&](const StepInfo& s) {
    ++runs;
    progress.update(s.step, s.epoch, s.epoch_loss, s.epoch_metric, s.samples_per_s, s.eta_s);
  };
  cb.on_epoch_end = [&](const EpochInfo& e) {
    std::string line = "epoch " + std::to_string(e.epoch + 1) + "/" + std::to_string(e.epochs) + ": loss " +
                       format_number(e.loss);
    if (!std::isnan(e.metric)) line += " " + metric + " " + percent_or_number(metric, e.metric);
    if (!std::isnan(e.val_loss)) line += " | held-out loss " + format_number(e.val_loss);
    if (!std::isnan(e.val_metric)) line += " " + metric + " " + percent_or_number(metric, e.val_metric);
    progress.line(line);
  };
  cb.should_stop = [] { return g_stop != 0; };
  FitResult r;
  {
    StopSignals signals;
    r = trainer.fit(data, validation, cb);
  }
  progress.finish();
  auto write_metrics = [&] {
    std::string s;
    for (const auto& rec : trainer.history()) s += record_json(rec, metric) + "\n";
    make_dirs_for(metrics_path);
    write_file_atomic(metrics_path, s);
  };
  // Every rank takes part in the checkpoint (ZeRO: each writes its shard).
  if (!r.stopped && given(app, "--checkpoint-dir")) trainer.save_checkpoint(ckpt_path);
  if (quiet_rank) return r.stopped ? kExitInterrupted : kExitOk;  // rank 0 writes the outputs
  if (r.stopped) {
    write_metrics();
    std::fprintf(stderr,
                 "onnxtrain train: interrupted at step %lld of %lld (epoch %lld, batch %lld of %lld); checkpoint "
                 "saved to %s; run the same command with --resume to continue\n",
                 (long long)r.steps, (long long)plan.total_steps, (long long)r.epoch + 1, (long long)r.batch,
                 (long long)plan.batches_per_epoch, r.checkpoint.c_str());
    return kExitInterrupted;
  }
  make_dirs_for(out);
  sess.export_model_to(out);
  write_metrics();
  make_dirs_for(curve_path);
  write_file_atomic(curve_path, curve_svg(trainer.history(), metric, "onnxtrain train " + model_stem));

  // One-screen summary.
  double final_loss = NAN, final_metric = NAN, last_val_loss = NAN, last_val_metric = NAN, best_val = NAN;
  int64_t best_step = 0;
  for (const auto& rec : trainer.history()) {
    if (!std::isnan(rec.loss)) final_loss = rec.loss, final_metric = rec.metric;
    if (!std::isnan(rec.val_loss)) last_val_loss = rec.val_loss, last_val_metric = rec.val_metric;
    if (!std::isnan(rec.val_metric) && !(rec.val_metric <= best_val)) best_val = rec.val_metric, best_step = rec.step;
  }
  int64_t trained_params = 0;
  for (const auto& [nm, t] : sess.get_model_state()) trained_params += t.numel();
  const auto& params = setup.params;
  std::printf("\n== summary ==============================================================\n");
  std::printf("model        %s: %zu weights trained (%lld parameters)%s\n", model_path.c_str(),
              sess.trained_weights().size(), (long long)trained_params,
              params.weights_not_to_train.empty() ? "" : (", " + std::to_string(params.weights_not_to_train.size()) + " frozen").c_str());
  std::printf("data         %lld training samples%s\n", (long long)plan.train_samples,
              held_out ? (", " + std::to_string(held_out) + " held out").c_str() : "");
  std::printf("training     %lld optimizer steps, %.2f epochs, batch %lld%s, %s lr %s%s\n", (long long)r.steps,
              double(r.samples) / double(plan.train_samples), (long long)a.batch_size,
              a.opt.grad_accum > 1 ? (" x " + std::to_string(a.opt.grad_accum) + " accumulated").c_str() : "",
              setup.optimizer.c_str(), format_number(setup.lr).c_str(),
              setup.schedule == "constant" ? "" : (" " + setup.schedule).c_str());
  const std::string wall = r.seconds < 60 ? fmt("%.1f s", r.seconds)
                                          : format_duration(r.seconds) + " (" + fmt("%.1f s", r.seconds) + ")";
  std::printf("time         %s wall, %.0f samples/s\n", wall.c_str(), double(r.samples) / std::max(1e-9, r.seconds));
  if (!sess.loss_scale_input_name().empty())
    std::printf("fp16         loss scale %s at the end, %lld updates skipped (inf/NaN gradients)\n",
                format_number(sess.loss_scale()).c_str(), (long long)sess.skipped_updates());
  std::printf("final        train loss %s", format_number(final_loss).c_str());
  if (!std::isnan(final_metric)) std::printf(", train %s %s", metric.c_str(), percent_or_number(metric, final_metric).c_str());
  std::printf("\n");
  if (held_out) {
    std::printf("held-out     loss %s", format_number(last_val_loss).c_str());
    if (!std::isnan(last_val_metric)) std::printf(", %s %s", metric.c_str(), percent_or_number(metric, last_val_metric).c_str());
    if (!std::isnan(best_val)) std::printf(" (best %s at step %lld)", percent_or_number(metric, best_val).c_str(), (long long)best_step);
    std::printf("\n");
  }
  std::printf("wrote        %s (trained model)\n             %s (metrics)\n             %s (curve)\n", out.c_str(),
              metrics_path.c_str(), curve_path.c_str());
  if (given(app, "--checkpoint-dir")) std::printf("             %s (checkpoint)\n", ckpt_path.c_str());
  std::printf("=========================================================================\n");
  if (a.profile) {
    std::printf("\n%s", format_profile(sess.profile_summary(), runs).c_str());
  }
  return kExitOk;
}

}  // namespace

}  // namespace cli
