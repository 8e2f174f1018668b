// An execution plan and the planner's passes.
//
// A Plan is built once per (input-shape signature, request) and is immutable afterwards: kernels
// prepared for concrete shapes, constants folded, steps in their final order, every value's
// memory decided (arena offset, a view of another value, a constant, a state's storage, per-run
// memory). Running a plan needs a Frame: the mutable per-run storage (values, the arena, pointer
// tables, a scratch buffer for dynamic workspaces). A plain run uses the plan's own frame; a
// partial run (forward now, backward later) takes one frame per run in flight.
//
// The passes, in order (build_plan runs them):
//   needed_nodes      nodes the requested values depend on
//   node_phases       partial execution: which needed nodes belong to the forward part
//   assign_providers  each node's execution provider: the first in preference order with a kernel
//   make_slots        one slot per value; results and state updates marked
//   bind_inputs       graph inputs and initializers: fed per run, bound once, or constant
//   place_state       mutable initializers read only on one device (not the host) bound to the
//                     executor's copy of them there (GraphExecutor::keep_state_on_device)
//   prepare_and_fold  kernels created and prepared in topological order; constant nodes evaluated
//                     (always by the CPU provider's kernel)
//   insert_copies     copies between devices where a step reads a value from another device (or
//                     needs an input in host memory), and results brought to the host
//   schedule_steps    final step order: forward part first, readers of an in-place input before
//                     the node that overwrites it
//   compute_liveness  producer and last reader of each value (views keep what they view alive)
//   assign_inplace    declared in-place outputs: alias the input (or the state's storage) when
//                     nothing reads it later, else copy the input into the output before the step
//   layout_arena      offsets of the arena values and workspaces, one arena per device (best fit,
//                     largest first)
//   wire              per-run allocations, releases, results, state copies
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ir/ir.h"
#include "kernels/kernel.h"

namespace onnxtrain::runtime {

inline constexpr size_t kArenaAlign = 64;
inline size_t arena_align(size_t n) { return (n + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

/// Figures about one plan.
struct PlanStats {
  size_t arena_bytes = 0;     ///< intermediate values and workspaces, reused by liveness
  size_t naive_bytes = 0;     ///< what the same buffers would take without reuse
  size_t peak_live_bytes = 0; ///< the most arena bytes live at one step (arena_bytes' lower bound)
  size_t constant_bytes = 0;  ///< folded constants created at plan time
  size_t steps = 0;           ///< kernels called per run
  size_t dynamic_steps = 0;   ///< steps whose shapes are only known while running
  size_t folded_nodes = 0;    ///< nodes evaluated once at plan time
  size_t inplace_aliased = 0; ///< in-place outputs that share their input's memory
  size_t inplace_copied = 0;  ///< in-place outputs whose input had to be copied first
  size_t state_in_place = 0;  ///< state updates written directly into the state's storage
  size_t state_copies = 0;    ///< state updates copied into the state after the last step
  size_t device_copies = 0;   ///< copy steps inserted between devices
  size_t fallback_steps = 0;  ///< steps on a provider after the first in preference order
};

/// The execution providers of an executor, in preference order (the CPU provider last), with a
/// device context each.
struct ProviderSet {
  std::vector<ExecutionProvider*> providers;
  std::vector<std::unique_ptr<DeviceContext>> contexts;
  /// From options.providers (empty: CPU only); the CPU provider is appended when missing.
  explicit ProviderSet(const ExecOptions& options);
  size_t cpu() const { return providers.size() - 1; }
  /// Index of the provider whose device is `d` (the CPU provider for host memory).
  size_t of_device(const Device& d) const;
};

/// What the planner knows about a graph independently of input shapes.
struct GraphIndex {
  const ir::Graph* graph = nullptr;
  std::vector<std::string> input_names;  ///< declared inputs, then outer-scope values
  std::vector<std::string> output_names;
  std::vector<size_t> order;                        ///< topological order of node indices
  std::vector<std::vector<std::string>> implicit;   ///< per node: outer values its subgraphs read
  std::unordered_map<std::string, size_t> producer; ///< value -> node index
  std::unordered_set<std::string> mutable_inits;    ///< initializers updated in place (never folded)

  GraphIndex(const ir::Graph& g, std::vector<std::string> outer_names,
             std::unordered_set<std::string> mutable_initializers);
};

/// What one plan computes. Names refer to graph values.
struct PlanRequest {
  std::vector<std::string> outputs;  ///< results of the run (of the forward part when partial)
  /// State updates: (value, state). After the run, initializer `state` (a mutable initializer)
  /// holds `value`. Every reader of `state` in the run sees its old value.
  std::vector<std::pair<std::string, std::string>> updates;
  /// Partial execution: results of the backward part; empty for a one-phase plan.
  std::vector<std::string> backward_outputs;
  /// Partial execution: (input, forward output) — inputs fed to the backward part, each with the
  /// element type and shape of a forward output (the gradient flowing into it).
  std::vector<std::pair<std::string, std::string>> backward_inputs;
  /// Partial execution: per backward input, whether a tensor broadcastable to the forward output's
  /// shape is accepted (and expanded to it) instead of one of exactly that shape; empty: none is.
  std::vector<bool> backward_broadcastable;
  bool partial() const { return !backward_outputs.empty() || !backward_inputs.empty(); }
};

struct Slot {
  enum class State : uint8_t { kUnset, kInput, kConstant, kStatic, kOutput, kDynamic };
  State state = State::kUnset;
  std::string name;
  Value value;               ///< template: constants hold data; others dtype/shape (data per frame)
  bool shape_known = false;
  bool graph_output = false;  ///< a result (kept alive to the end of its phase)
  bool bound = false;         ///< kInput bound once at plan time (mutable initializer)
  bool backward_input = false;  ///< fed to the backward part of a partial plan
  int producer = -1;          ///< step index
  int last_use = -1;          ///< step index of the last reader
  int alias_root = -1;        ///< static alias: slot whose arena memory this views
  bool const_view = false;    ///< memory fixed at plan time (view of a constant or of a bound input)
  bool per_run = false;       ///< static alias of memory that changes every run (inputs, outputs)
  int64_t offset = -1;        ///< arena offset
  int state_target = -1;      ///< state update: slot of the state that receives this value
  bool in_state = false;      ///< state update written directly into the state's storage
  Device device;              ///< where the value lives
};

struct Step {
  const ir::Node* node = nullptr;
  Kernel* kernel = nullptr;
  size_t node_index = 0;
  int64_t opset = 0;
  int phase = 0;  ///< 0: forward (or the whole run), 1: backward part of a partial plan
  size_t provider = 0;  ///< index into the ProviderSet
  std::vector<int> in, out, imp;
  bool dynamic = false;
  int64_t ws_offset = -1;
  size_t ws_bytes = 0;
  std::vector<std::pair<int, int>> rebind;    ///< (output slot, input slot): views of per-run memory
  std::vector<std::pair<int, int>> inplace;   ///< (output index, input index) the kernel declared
  std::vector<std::pair<int, int>> pre_copy;  ///< (output index, input index): copy before running
  std::vector<int> release;                   ///< dynamic slots freed after this step
  size_t ptr_offset = 0;                      ///< of its pointers in Frame::ptrs (in, out, imp)
  std::vector<size_t> host_inputs;            ///< inputs its kernel reads in host memory
  bool copy = false;                          ///< a copy between devices (insert_copies)
};

struct Frame;

struct Plan {
  std::vector<Slot> slots;
  std::unordered_map<std::string, int> ids;  ///< value name -> slot
  std::unordered_set<std::string> missing;   ///< graph inputs neither fed nor defaulted
  std::vector<std::unique_ptr<Kernel>> kernels;
  std::vector<Step> steps;
  std::vector<int> input_slots;                 ///< per executor input: slot fed per run, or -1
  std::vector<int> result_slots[2];             ///< per phase
  std::vector<int> output_alloc[2];             ///< per phase: result buffers allocated per run
  std::vector<std::pair<int, int>> state_copies;  ///< (value slot, state slot) after the last step
  std::vector<int> backward_input_slots;        ///< partial plans: in PlanRequest::backward_inputs order
  size_t cut = 0;                               ///< steps [0, cut) are the forward part
  std::vector<int> node_provider;               ///< per graph node: its provider (assign_providers)
  std::deque<ir::Node> synthetic;               ///< nodes the planner made (copies)
  std::unordered_map<int, int> result_alias;    ///< result slot on a device -> its host copy
  std::map<Device, size_t> arenas;              ///< bytes of each device's arena
  size_t arena_bytes = 0;                       ///< all devices together
  size_t num_ptrs = 0;
  PlanStats stats;

  // Frames: `main` serves plain runs (made by the executor over the arenas it shares between its
  // plans); partial runs take frames from the pool, which keeps at most kMaxPooledFrames.
  std::unique_ptr<Frame> main;
  std::mutex pool_mu;
  std::vector<std::unique_ptr<Frame>> pool;
  static constexpr size_t kMaxPooledFrames = 2;

  Plan();
  ~Plan();
  int id(const std::string& name) const { return ids.at(name); }
};

/// Per-run storage of a plan.
struct Frame {
  std::vector<Value> values;  ///< one per slot
  std::vector<Value*> ptrs;   ///< kernel argument tables, Step::ptr_offset
  std::map<Device, std::shared_ptr<void>> arenas;
  std::vector<char> scratch;  ///< workspaces of dynamic steps (grows, never shrinks)
  uint64_t run_index = 0;
};

/// Arena memory of one device: the block and its size in bytes.
struct ArenaBlock {
  std::shared_ptr<void> memory;
  size_t bytes = 0;
};
using ArenaSet = std::map<Device, ArenaBlock>;

/// A block of `bytes` (rounded up to kArenaAlign) from the allocator of device `dev`'s provider.
std::shared_ptr<void> allocate_arena(const ProviderSet& providers, const Device& dev, size_t bytes);

/// A copy of host tensor `host` on device `dev`, in memory of that device's provider's allocator;
/// the copy has finished when this returns.
Tensor copy_to_device(const ProviderSet& providers, const Tensor& host, const Device& dev);

/// Creates a frame for `plan`: values from the slot templates, pointer tables, and arenas — fresh
/// ones, or the blocks of `shared` (each at least as large as the plan's arena of its device),
/// which the frame then holds a reference to.
std::unique_ptr<Frame> make_frame(const Plan& plan, const ProviderSet& providers, const ArenaSet* shared = nullptr);

namespace planner {

/// Nodes (indices into the graph) on which the values `roots` depend.
std::vector<bool> needed_nodes(const GraphIndex& gi, const std::vector<std::string>& roots);

/// Per node: 0 when it belongs to the forward part of `req` (needed by its forward outputs and
/// independent of its backward inputs), 1 otherwise. Throws InvalidArgument when a forward
/// output depends on a backward input.
std::vector<int> node_phases(const GraphIndex& gi, const std::vector<bool>& needed, const PlanRequest& req);

/// Per node: the index of the first provider of `ps` whose registry has a kernel for it; throws
/// NotImplemented naming the node when none has.
std::vector<int> assign_providers(const GraphIndex& gi, const std::vector<bool>& needed, const OpsetMap& opsets,
                                  const ProviderSet& ps);

/// Slots for graph inputs, initializers and the outputs of needed nodes; results and state
/// updates marked. Throws InvalidArgument for unknown names.
void make_slots(Plan& plan, const GraphIndex& gi, const std::vector<bool>& needed, const PlanRequest& req);

/// Graph inputs fed now (`inputs[i]` for GraphIndex::input_names()[i], null: not fed) become
/// per-run inputs; mutable initializers are bound once; other initializers are constants.
void bind_inputs(Plan& plan, const GraphIndex& gi, const std::vector<const Value*>& inputs, const PlanRequest& req);

/// The device copy of mutable initializer `name` on `device` that a plan binds in its place, or
/// null to keep the host tensor (GraphExecutor::keep_state_on_device).
using StateMirror = std::function<const Tensor*(const std::string& name, const Device& device)>;

/// Binds each bound mutable initializer whose readers among the needed nodes all run on one
/// device other than the host (no subgraph reads it) to `mirror`'s tensor there: its readers use it
/// without copies and its update is written into it. `fold_shapes` (ExecOptions::fold_constants):
/// Shape and Size nodes, folded at plan time, do not count as readers.
void place_state(Plan& plan, const GraphIndex& gi, const std::vector<bool>& needed, const ProviderSet& ps,
                 const StateMirror& mirror, bool fold_shapes);

/// Creates and prepares the kernels of the needed nodes (forward part first), evaluating nodes
/// whose inputs are all constant; one Step per remaining node.
void prepare_and_fold(Plan& plan, const GraphIndex& gi, const std::vector<bool>& needed,
                      const std::vector<int>& phases, const OpsetMap& opsets, const ExecOptions& options,
                      const PlanRequest& req, const ProviderSet& ps);

/// Copy steps where a step reads a value on another device than it needs (its provider's device,
/// or the host for the inputs its kernel declares host_inputs), and for results not in host
/// memory; every consumer on a device shares one copy.
void insert_copies(Plan& plan, const ProviderSet& ps);

/// Final order of the steps: a topological order that keeps the forward part first and, where the
/// data allow, runs every other reader of an input before the step that overwrites it in place.
void schedule_steps(Plan& plan);

/// Producer and last reader of every slot; views keep what they view alive; results and state
/// updates live to the end of the run.
void compute_liveness(Plan& plan);

/// Decides each declared in-place output: alias (arena memory, or the state's storage for a state
/// update of that input) when nothing reads the input afterwards; else a copy before the step.
void assign_inplace(Plan& plan, bool alias_inputs = true);

/// A buffer to place: live from step `begin` to step `end` (inclusive).
struct Block {
  size_t bytes;
  int begin, end;
  int owner;  ///< slot index, or -1 - step index for a workspace
  int64_t offset = -1;
};
/// Places blocks so that blocks alive at the same time never overlap (best fit, largest first);
/// returns the arena size.
size_t place_blocks(std::vector<Block>& blocks);

/// Arena blocks of the plan (static values; workspaces, on their step's provider's device) placed,
/// one arena per device; offsets recorded.
void layout_arena(Plan& plan, const ProviderSet& ps, bool reuse = true);

/// Per-run allocations, releases, results and state copies; pointer table layout.
void wire(Plan& plan, const PlanRequest& req);

}  // namespace planner

/// Runs every pass; throws errors naming the node or value.
std::shared_ptr<Plan> build_plan(const GraphIndex& gi, const OpsetMap& opsets, const ExecOptions& options,
                                 const std::vector<const Value*>& inputs, const PlanRequest& req,
                                 const ProviderSet& providers, const planner::StateMirror& mirror = {});

}  // namespace onnxtrain::runtime
