// TrainingSession's state (internal), shared by its two files: training_session.cpp (set-up,
// training and evaluation runs, profiling, export) and training_session_state.cpp (state copies,
// checkpoints).
//
// Weights live once, in the forward model's initializers; the gradient model and both executors
// share their storage and see every in-place update (the executors treat float initializers as
// mutable, never folding them).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "api/profiler.h"
#include "ir/ir.h"
#include "onnxtrain/step_driver.h"
#include "onnxtrain/training.h"
#include "runtime/executor.h"
#include "train/attach_optimizer.h"
#include "train/checkpoint.h"
#include "train/lr_schedule.h"

namespace onnxtrain {

struct TrainingSession::Impl {
  ir::Model model;  // forward model (holds the weights)
  train::TrainingGraph tg;  // forward + backward + accumulation + clipping + optimizer
  TrainingParameters params;
  SessionOptions options;
  std::vector<std::string> trained;           // weights the optimizer updates
  std::vector<Tensor*> weights;               // into model.graph->initializers
  std::unique_ptr<runtime::GraphExecutor> train_exec, eval_exec;
  std::unordered_map<std::string, size_t> train_inputs, eval_inputs;  // name -> executor input
  std::unordered_map<std::string, size_t> eval_outputs;
  std::vector<std::string> user_outputs;      // names run() may return
  std::vector<std::string> model_outputs;     // what run() returns by default
  std::string optimizer_name;
  bool has_schedule = false;
  train::LrSchedule schedule;
  StepDriver driver;                          // accumulation and optimizer steps (step_driver.h)
  // What a step feeds besides the data: owned here, updated in place every step.
  Value lr, step_count, reset, contribution, loss_scale_value;
  size_t lr_slot = 0, step_slot = 0, reset_slot = 0, contribution_slot = 0, loss_scale_slot = 0;
  // float16 mixed precision: the session's loss scaler (onnxruntime's DynamicLossScaler rule),
  // whose scale run() feeds when the caller feeds none; ORTTrainer's DynamicLossScaler shares it.
  bool fp16 = false;
  LossScaleState scaler;
  int rank = 0, world = 1;                    // data parallelism
  int64_t check_every = 0;                    // compare the ranks' weights every that many updates (0: never)
  std::vector<const Value*> ins;              // executor inputs, reused
  // Executor requests per list of requested outputs: (update step, accumulation-only step).
  struct Requests {
    std::vector<std::string> outputs;
    size_t update = 0, accumulate = 0;
    bool finite_appended = false;  // fp16: the update request returns all_finite last, unrequested
  };
  std::vector<Requests> requests;
  // Serializes the public calls: a step writes lr/step_count/reset and the counters above, and
  // checkpoints and state copies must not see a step half done.
  std::mutex mu;
  api::Profiler profiler;

  void init();
  /// Resolves rank and world size from the parameters and the launcher; starts MPI when > 1.
  void setup_data_parallel();
  /// Refuses to start when a rank's model, weights or parameters differ from rank 0's (naming it).
  void check_ranks_agree();
  /// Debug check (ONNXTRAIN_CHECK_WEIGHTS_EVERY / onnxtrain.check_weights_every): every rank's
  /// trained weights are bitwise those of rank 0.
  void check_weights_agree();
  /// This session's state as a checkpoint (this rank's part of it under ZeRO).
  train::Checkpoint checkpoint(const std::map<std::string, std::string>& metadata) const;
  /// Optimizer state `src` laid out as state initializer `state`: a whole tensor (or one merged
  /// flat from ZeRO parts) becomes this rank's ZeRO part or takes the weight's shape. nullopt when
  /// the sizes do not fit.
  std::optional<Tensor> relayout_state(const std::string& state, const Tensor& src) const;
  /// Runs `fn` with the profiler's node hook installed when profiling (nodes tagged by phase).
  template <class Fn>
  void profiled(bool eval, Fn&& fn);
  const Requests& requests_for(const std::vector<std::string>& outputs);
  void run_train(const std::vector<std::string>& outs, const std::vector<std::pair<std::string, Value>>& feeds,
                 std::vector<Value>& results);
  std::vector<Value> run_eval(const std::vector<std::string>& outs,
                              const std::vector<std::pair<std::string, Value>>& feeds);
  /// The host's weights and optimizer state up to date: a session on a device provider keeps them
  /// on the device between runs (GraphExecutor::keep_state_on_device). Every method that reads
  /// them calls it first.
  void state_to_host() { train_exec->sync_state_to_host(); }
  /// A method that writes the host's state holds one of these while it does: the state is brought
  /// to the host first, and the device copies are refreshed before the next run whatever happens.
  struct HostStateWrite {
    Impl& s;
    explicit HostStateWrite(Impl& i) : s(i) { s.state_to_host(); }
    ~HostStateWrite() {
      try {
        s.train_exec->state_changed_on_host();
      } catch (...) {  // cannot fail: the constructor brought the state to the host, nothing ran since
      }
    }
    HostStateWrite(const HostStateWrite&) = delete;
    HostStateWrite& operator=(const HostStateWrite&) = delete;
  };
  Tensor* initializer(const std::string& n) { return model.graph->initializer(n); }
  Tensor* state(const std::string& n) { return tg.model.graph->initializer(n); }
  /// Optimizer state by trained weight (in trained order), then by the optimizer's state order.
  std::vector<const train::StateUpdate*> optimizer_states() const {
    std::vector<const train::StateUpdate*> r;
    for (const auto& w : trained)
      for (const auto& u : tg.updates)
        if (u.kind == train::StateUpdate::Kind::kOptimizerState && u.weight == w) r.push_back(&u);
    return r;
  }
};

}  // namespace onnxtrain
