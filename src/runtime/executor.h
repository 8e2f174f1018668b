// GraphExecutor: runs one graph. For every (input-shape signature, request) it builds a Plan once
// (src/runtime/plan.h: kernels prepared with concrete shapes, constants folded, values laid out
// in one arena by liveness, in-place updates decided); a steady-state run then only calls kernels.
//
// A request names the results, the state updates (values written into mutable initializers after
// the run: optimizer updates, accumulators, running statistics) and, for partial execution, a cut:
// run_forward() runs the forward part and keeps what the backward part needs in a PartialRun;
// run_backward() later finishes it with the gradients flowing into the forward outputs. Several
// PartialRuns may be in flight, each with its own memory.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/ir.h"
#include "kernels/kernel.h"
#include "runtime/plan.h"

namespace onnxtrain {
struct SharedArena;  // runtime/shared_arena.h
}  // namespace onnxtrain

namespace onnxtrain::runtime {

class GraphExecutor;

/// The SubgraphFactory the runtime hands to control-flow kernels (ExecOptions::subgraphs): each
/// subgraph runs in its own GraphExecutor.
SubgraphFactory executor_subgraphs();

/// The state of a partial run between its forward and backward parts (onnxruntime-training's
/// PartialGraphExecutionState). Movable, not copyable. Destroying one whose backward part never ran
/// releases its memory.
class PartialRun {
 public:
  PartialRun();
  ~PartialRun();
  PartialRun(PartialRun&&) noexcept;
  PartialRun& operator=(PartialRun&&) noexcept;
  PartialRun(const PartialRun&) = delete;
  PartialRun& operator=(const PartialRun&) = delete;

  /// True between run_forward() and run_backward().
  bool pending() const { return phase_ == Phase::kForwardDone; }

 private:
  friend class GraphExecutor;

  enum class Phase { kFresh, kForwardDone, kFinished };
  void release();
  uint64_t owner_ = 0;  ///< GraphExecutor::id() of the executor that ran the forward part (0: none)
  size_t request_ = 0;
  std::shared_ptr<Plan> plan_;
  std::unique_ptr<Frame> frame_;
  Phase phase_ = Phase::kFresh;
};

class GraphExecutor {
 public:
  /// `outer_names`: values of enclosing scopes the graph reads (subgraphs); they follow the
  /// declared graph inputs in input_names(). `mutable_initializers` are never constant-folded
  /// (training updates them in place).
  GraphExecutor(std::shared_ptr<const ir::Graph> graph, OpsetMap opsets, ExecOptions options,
                std::vector<std::string> outer_names = {},
                std::unordered_set<std::string> mutable_initializers = {});
  ~GraphExecutor();

  const std::vector<std::string>& input_names() const { return index_.input_names; }
  const std::vector<std::string>& output_names() const { return index_.output_names; }
  const ir::Graph& graph() const { return *graph_; }
  const ExecOptions& options() const { return options_; }
  /// Identifies this executor for the process's lifetime: never 0, never reused by a later
  /// executor (unlike its address).
  uint64_t id() const { return id_; }
  /// The executor that ran the forward part of `state` (its id), 0 when none did.
  static uint64_t owner_of(const PartialRun& state) { return state.owner_; }

  /// True when input i has an initializer default (may be left unfed).
  bool input_has_default(size_t i) const { return input_default_[i]; }

  /// Runs the graph. inputs[i] feeds input_names()[i] (null: not fed; allowed only for inputs
  /// with a default). `outputs` lists indices into output_names() (empty: all). Returns the
  /// requested outputs in order.
  std::vector<Value> run(const std::vector<const Value*>& inputs, const std::vector<size_t>& outputs = {});
  /// Same, into `results` (resized to the outputs): a tensor results[i] already holds with output
  /// i's type, shape and device is written in place even where the caller holds other references
  /// to its memory (onnxruntime's IOBinding with preallocated outputs); any other entry is replaced
  /// by a new value. The caller makes sure no such tensor overlaps a feed or another of them.
  void run_into(const std::vector<const Value*>& inputs, const std::vector<size_t>& outputs,
                std::vector<Value>& results);

  /// Registers a request (results, state updates, a cut); throws InvalidArgument for names that
  /// are not values of the graph, states that are not mutable initializers, or a forward output
  /// that depends on a backward input. Returns its id.
  size_t add_request(PlanRequest request);
  /// Runs request `id` (which must not be partial). `results` receives its outputs in order;
  /// tensors `results` already holds with the right type and shape, referenced nowhere else, are
  /// written in place — a steady-state run then performs no heap allocation.
  void run(const std::vector<const Value*>& inputs, size_t request, std::vector<Value>& results);

  /// Partial execution of request `id` (with backward inputs or outputs): runs the forward part
  /// and returns its outputs; `state` keeps what the backward part needs. Backward inputs must be
  /// left unfed here. Throws InvalidArgument when `state` is pending.
  void run_forward(const std::vector<const Value*>& inputs, size_t request, PartialRun& state,
                   std::vector<Value>& results);
  /// Runs the backward part of `state` with `grads` (one per PlanRequest::backward_inputs entry,
  /// typed and shaped like its forward output) and returns the backward outputs. Throws
  /// InvalidArgument when `state` did not run a forward part of this executor, or already ran its
  /// backward part.
  void run_backward(PartialRun& state, const std::vector<const Value*>& grads, std::vector<Value>& results);

  /// Runs done so far (RunContext::run_index of the next run). Settable to resume exactly.
  uint64_t run_counter() const { return run_counter_; }
  void set_run_counter(uint64_t r) { run_counter_ = r; }

  /// Stats of the plan used by the last run.
  PlanStats last_stats() const;
  /// Per step of the last run's plan: "<node> on <provider>" (copies included), in run order.
  std::vector<std::string> last_assignment() const;
  /// Every node of the graph, in graph order, with the name of the provider plans place it on (the
  /// planner's rule: the first provider in preference order with a kernel for it). Throws
  /// NotImplemented naming a node no provider has a kernel for.
  std::vector<std::pair<const ir::Node*, std::string>> node_providers() const;
  /// The node of every step of the last run's plan (nodes folded at plan time have none).
  std::vector<const ir::Node*> last_step_nodes() const;
  /// The node of every step of the last run's plan and the provider it ran on (a node a device
  /// provider declined at prepare shows on the provider that took it; copies included).
  std::vector<std::pair<const ir::Node*, std::string>> last_step_providers() const;
  size_t num_plans() const { return plans_.size(); }
  /// Bytes of the arenas that plain runs share (the largest plan's so far, per device).
  size_t shared_arena_bytes() const;
  /// Plain runs borrow `arena` (the process's shared arena, runtime/shared_arena.h) for their
  /// length instead of holding arenas of their own; null: their own. Set before the first run.
  void set_shared_arena(std::shared_ptr<SharedArena> arena) { shared_arena_ = std::move(arena); }
  /// Frames kept for later partial runs, over the cached plans (at most Plan::kMaxPooledFrames each).
  size_t pooled_frames();

  /// Device-resident state: each mutable initializer that only steps of one device other than the
  /// host read (planner::place_state) lives in a copy on that device, made at the first plan that
  /// binds it, and runs read and update it there with no copies. The graph's initializers (host)
  /// then lag behind: sync_state_to_host() brings them up to date, state_changed_on_host() says
  /// they were written (the device copies are refreshed before the next run). Set before the first
  /// run; partial runs are refused with it.
  void keep_state_on_device(bool on) { device_state_ = on; }
  /// Copies the device-resident state back into the graph's initializers where a run may have
  /// changed it since the last sync (waits for the copies).
  void sync_state_to_host();
  /// The graph's initializers were written on the host: the next run first copies them to the
  /// device-resident state.
  void state_changed_on_host();
  /// Mutable initializers held on a device now (keep_state_on_device).
  size_t device_state_count() const { return mirrors_.size(); }

 private:
  struct KeyHash {
    size_t operator()(const std::vector<int64_t>& k) const noexcept;
  };
  void check_inputs(const std::vector<const Value*>& inputs) const;
  std::shared_ptr<Plan> find_plan(const std::vector<const Value*>& inputs, int64_t request_tag,
                                  const std::vector<size_t>& outputs);
  // run() and run_into(): `outputs` checked, then run_whole on the plain request.
  void run_outputs(const std::vector<const Value*>& inputs, const std::vector<size_t>& outputs,
                   std::vector<Value>& results, bool lent);
  // `lent`: the tensors in `results` are the caller's to write (run_into), else only those nobody
  // else holds are reused.
  void run_whole(const std::vector<const Value*>& inputs, int64_t request_tag, const std::vector<size_t>& outputs,
                 std::vector<Value>& results, bool lent = false);
  void execute(Plan& plan, Frame& f, int phase, bool bind, bool finish, const std::vector<const Value*>& inputs,
               std::vector<Value>& results, bool lent = false);
  // The plan's main frame over `arenas`, growing them first where they are too small: to exactly
  // what the plan needs, or on the shared arena as its configuration says (within its max_mem).
  Frame& main_frame(Plan& plan, ArenaSet& arenas, const SharedArena* shared = nullptr);
  void drop_main_frames();

  std::shared_ptr<const ir::Graph> graph_;
  OpsetMap opsets_;
  ExecOptions options_;
  GraphIndex index_;
  ProviderSet providers_;
  std::vector<bool> input_default_;
  std::vector<PlanRequest> requests_;

  const uint64_t id_;
  std::mutex mu_;
  std::vector<int64_t> key_;
  std::unordered_map<std::vector<int64_t>, std::shared_ptr<Plan>, KeyHash> plans_;
  std::shared_ptr<Plan> last_plan_;
  uint64_t run_counter_ = 0;
  // Plain runs are serialized (mu_), so the main frames of every plan borrow the same arenas and
  // scratch, sized by the largest plan so far: memory follows the largest run, not the number of
  // input shapes seen.
  ArenaSet arenas_;
  std::vector<char> scratch_;
  std::shared_ptr<SharedArena> shared_arena_;
  // Device-resident state (keep_state_on_device): the device copy of each mutable initializer
  // placed there; `device_newer_`: a run may have changed them since the last sync_state_to_host;
  // `host_newer_`: the host's were written (state_changed_on_host), copied before the next run.
  const Tensor* state_mirror(const std::string& name, const Device& device);
  void copy_state(bool to_host);
  bool device_state_ = false, device_newer_ = false, host_newer_ = false;
  std::unordered_map<std::string, Tensor> mirrors_;
};

}  // namespace onnxtrain::runtime
