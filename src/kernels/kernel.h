// The kernel contract. A kernel instance belongs to one execution plan (one input-shape
// signature): it reads its attributes once when created, computes output shapes and caches
// primitives in prepare(), and does only arithmetic in run().
//
//   factory(KernelInfo)  -> reads attributes, validates them (errors name the node)
//   prepare(PrepareContext) -> output dtypes/shapes from input dtypes/shapes (and input values
//                              when they are known: constants, or at run time for nodes whose
//                              shapes depend on data); may request workspace and alias an output
//                              to an input (views: Reshape, Squeeze, ...)
//   run(RunContext)         -> fills the outputs prepared for it
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "onnxtrain/error.h"
#include "onnxtrain/device.h"
#include "onnxtrain/tensor.h"
#include "onnxtrain/value.h"

namespace onnxtrain {

using OpsetMap = std::map<std::string, int64_t>;

class ExecutionProvider;
struct ExecOptions;

/// Per-run state of one device that kernels read through RunContext::device() (the CPU provider's
/// holds the thread budget and the oneDNN stream). Providers define it.
class DeviceContext {
 public:
  virtual ~DeviceContext() = default;
};

/// Runs a subgraph (If and Loop bodies). The runtime implements it and hands it to kernels through
/// ExecOptions::subgraphs, so that kernels never include the runtime.
class SubgraphRunner {
 public:
  virtual ~SubgraphRunner() = default;
  /// Runs with inputs[i] for the declared inputs, then the outer-scope values in the order given at
  /// creation; `outputs` are indices of the subgraph's outputs (empty: all).
  virtual std::vector<Value> run(const std::vector<const Value*>& inputs, const std::vector<size_t>& outputs) = 0;
};
/// Creates a SubgraphRunner for `graph` reading `outer_names` from enclosing scopes.
using SubgraphFactory = std::function<std::unique_ptr<SubgraphRunner>(
    std::shared_ptr<const ir::Graph> graph, const OpsetMap& opsets, const ExecOptions& options,
    std::vector<std::string> outer_names)>;

/// Upper end of an opset range that is still current ("since N, unchanged").
inline constexpr int64_t kMaxOpsetAll = 1000;

/// Options every kernel of a plan sees.
struct ExecOptions {
  int num_threads = 0;              ///< 0: all cores
  bool deterministic = false;       ///< prefer bitwise-reproducible algorithms
  uint64_t seed = 0x6f6e6e78ull;    ///< base seed for random operators without a seed attribute
  bool training = false;            ///< training session (Dropout/BatchNorm default modes follow ONNX)
  /// BatchNormalization running variance from the unbiased batch variance, as PyTorch updates it
  /// (ONNX's reference uses the biased one). Training sessions set it.
  bool torch_running_var = false;
  /// Execution providers in preference order (empty: the CPU provider only). Each node runs on the
  /// first that has a kernel for it; the CPU provider is always the last resort.
  std::vector<ExecutionProvider*> providers;
  /// How control-flow kernels run their subgraphs (set by the runtime).
  SubgraphFactory subgraphs;
  // Plan passes (SessionOptions.graph_optimization_level and the memory options).
  bool fold_constants = true;    ///< nodes with constant inputs run once, when planning
  bool inplace_aliasing = true;  ///< in-place outputs share their input's memory (else they start as a copy)
  bool reuse_memory = true;      ///< values whose lifetimes do not overlap share arena memory
  bool keep_memory = true;       ///< a plan's run memory is kept between runs (else allocated per run)
  /// Constant weights of Conv, Gemm and MatMul are packed into their kernels' layouts once, when
  /// planning (onnxruntime's prepacking; config entry "session.disable_prepacking" = "1": read as
  /// they are in every run).
  bool prepack_weights = true;
  /// Blocked (NchwcConv) float32 3x3 stride-1 convolutions with constant weights: oneDNN's
  /// Winograd kernels where it has them and they are expected to be faster than the direct kernel
  /// (kAuto, the default; config entry "session.conv_winograd" absent or "auto"), wherever it has
  /// them ("1"), or never ("0": the direct kernels, whose sums are those of the plain convolution).
  enum class Winograd { kAuto, kAlways, kNever };
  Winograd winograd = Winograd::kAuto;
  /// Session memory limit in bytes (0: the process's allocation_limit()): plans whose memory exceeds
  /// it are refused when built, and every allocation while planning or running respects it.
  uint64_t memory_limit = 0;
};

/// What a kernel factory sees: the node, its opset and attribute accessors that name the node in
/// their errors.
class KernelInfo {
 public:
  KernelInfo(const ir::Node& node, int64_t opset, const OpsetMap& opsets, const ExecOptions& options)
      : node_(node), opset_(opset), opsets_(opsets), options_(options) {}

  const ir::Node& node() const { return node_; }
  int64_t opset() const { return opset_; }
  const OpsetMap& opsets() const { return opsets_; }
  const ExecOptions& options() const { return options_; }

  bool has_attr(const std::string& name) const { return node_.attr(name) != nullptr; }
  int64_t attr_int(const std::string& name, int64_t dflt) const;
  int64_t attr_int(const std::string& name) const;  ///< required
  float attr_float(const std::string& name, float dflt) const;
  float attr_float(const std::string& name) const;
  std::string attr_string(const std::string& name, const std::string& dflt) const;
  std::string attr_string(const std::string& name) const;
  std::vector<int64_t> attr_ints(const std::string& name, const std::vector<int64_t>& dflt) const;
  std::vector<int64_t> attr_ints(const std::string& name) const;
  std::vector<float> attr_floats(const std::string& name, const std::vector<float>& dflt) const;
  std::vector<std::string> attr_strings(const std::string& name, const std::vector<std::string>& dflt) const;
  const Tensor* attr_tensor(const std::string& name) const;  ///< null when absent
  std::shared_ptr<const ir::Graph> attr_graph(const std::string& name) const;  ///< null when absent

  /// Throws InvalidModel naming the node (bad attributes are bad model data).
  template <class... Args>
  [[noreturn]] void fail(Args&&... args) const {
    throw_error<InvalidModel>(node_.describe(), ": ", std::forward<Args>(args)...);
  }

 private:
  const ir::Attribute* typed(const std::string& name, ir::AttrType t) const;
  const ir::Node& node_;
  int64_t opset_;
  const OpsetMap& opsets_;
  const ExecOptions& options_;
};

/// What prepare() sees. Inputs are indexed as in the node; absent optional inputs report
/// has_input() == false. Implicit inputs (outer-scope values read by subgraphs) follow.
class PrepareContext {
 public:
  struct In {
    Value::Kind kind = Value::Kind::kNone;
    DType dtype = DType::kUndefined;  ///< tensor element type; element type of sequences; value type of maps
    DType key = DType::kUndefined;    ///< key type of maps
    Shape shape;
    const Value* value = nullptr;  ///< non-null when the value is known now
  };
  struct Out {
    bool requested = false;  ///< the node names this output
    Value::Kind kind = Value::Kind::kTensor;
    DType dtype = DType::kUndefined;
    DType key = DType::kUndefined;  ///< maps: the key type
    Shape shape;
    bool set = false;
    bool dynamic = false;  ///< shape known only in run(): allocate with RunContext::allocate_output
    int alias_of = -1;     ///< input index this output may view (same element count)
    int inplace_of = -1;   ///< input index this output overwrites in place (set_output_inplace)
  };

  PrepareContext(const ir::Node& node, int64_t opset, const ExecOptions& options, std::vector<In> inputs,
                 size_t num_outputs, std::vector<In> implicit = {});

  const ir::Node& node() const { return node_; }
  int64_t opset() const { return opset_; }
  const ExecOptions& options() const { return options_; }

  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i].kind != Value::Kind::kNone; }
  bool has_output(size_t i) const { return i < outputs_.size() && outputs_[i].requested; }
  Value::Kind input_kind(size_t i) const { return i < inputs_.size() ? inputs_[i].kind : Value::Kind::kNone; }
  DType input_dtype(size_t i) const;
  /// Key type of a map (or sequence of maps) input; kUndefined for other inputs.
  DType input_key_dtype(size_t i) const { return i < inputs_.size() ? inputs_[i].key : DType::kUndefined; }
  const Shape& input_shape(size_t i) const;
  size_t input_rank(size_t i) const { return input_shape(i).size(); }
  /// The input's tensor when known at this time (constants; every input at run time); else null.
  const Tensor* input_value(size_t i) const;
  /// Input i as constant weights a kernel may pack into its own layout once, at prepare: its
  /// tensor where known now and ExecOptions::prepack_weights allows packing; else null.
  const Tensor* constant_weights(size_t i) const { return options_.prepack_weights ? input_value(i) : nullptr; }
  const Value* input_full_value(size_t i) const { return i < inputs_.size() ? inputs_[i].value : nullptr; }
  const std::vector<In>& implicit_inputs() const { return implicit_; }

  void set_output(size_t i, DType dtype, Shape shape);
  /// Output whose shape is only known while running (NonZero, control flow).
  void set_output_dynamic(size_t i, DType dtype);
  /// Output that is `input` reshaped: the executor makes it a view when it can; otherwise run()
  /// must copy (see RunContext::output_aliases_input).
  void set_output_alias(size_t i, size_t input, Shape shape);
  /// Output i overwrites input `input` in place (an optimizer's weight or moment, an accumulator,
  /// a running statistic): same dtype and shape, and at run time the same memory. The planner
  /// guarantees it: it aliases the two when nothing reads the input afterwards, and otherwise
  /// copies the input into the output's buffer before run() and passes that buffer as the input.
  void set_output_inplace(size_t i, size_t input);
  /// Sequence output (always dynamic).
  void set_output_sequence(size_t i, DType elem);
  /// Output that is a map (`sequence` false) or a sequence of maps with int64 or string keys;
  /// run() fills RunContext::output_value(i).
  void set_output_maps(size_t i, DType key, DType value, bool sequence);
  /// Scratch memory for run(), carved from the plan's arena.
  /// Refused (naming the node) past the allocation limit.
  void request_workspace(size_t bytes) {
    if (bytes > allocation_limit()) fail("scratch memory of ", bytes, " bytes is over ", allocation_limit_text());
    workspace_ = std::max(workspace_, bytes);
  }
  /// Marks the node as random or stateful: never constant-folded.
  void set_nondeterministic() { deterministic_ = false; }
  /// The node reads only the shapes (and dtypes) of its inputs, never their data (Shape, Size):
  /// it is folded at plan time whenever its input shapes are known. In that run() the inputs'
  /// tensors carry shapes but no data.
  void set_reads_shapes_only() { shapes_only_ = true; }

  /// Throws InvalidArgument naming the node.
  template <class... Args>
  [[noreturn]] void fail(Args&&... args) const {
    throw_error<InvalidArgument>(node_.describe(), ": ", std::forward<Args>(args)...);
  }

  // Executor side.
  const std::vector<Out>& outputs() const { return outputs_; }
  size_t workspace() const { return workspace_; }
  bool deterministic() const { return deterministic_; }
  bool reads_shapes_only() const { return shapes_only_; }

 private:
  const ir::Node& node_;
  int64_t opset_;
  const ExecOptions& options_;
  std::vector<In> inputs_;
  std::vector<In> implicit_;
  std::vector<Out> outputs_;
  size_t workspace_ = 0;
  bool deterministic_ = true;
  bool shapes_only_ = false;
};

/// What run() sees.
class RunContext {
 public:
  RunContext(const ir::Node& node, Value* const* inputs, size_t num_inputs, Value* const* outputs,
             size_t num_outputs, Value* const* implicit, size_t num_implicit, void* workspace,
             size_t workspace_bytes, const ExecOptions& options, int num_threads, DeviceContext* device = nullptr)
      : node_(node), in_(inputs), nin_(num_inputs), out_(outputs), nout_(num_outputs), imp_(implicit),
        nimp_(num_implicit), ws_(workspace), ws_bytes_(workspace_bytes), options_(options),
        num_threads_(num_threads), device_(device) {}

  const ir::Node& node() const { return node_; }
  const ExecOptions& options() const { return options_; }
  int num_threads() const { return num_threads_; }
  /// The device context of the provider running this node (null only in hand-made contexts).
  DeviceContext* device() const { return device_; }

  size_t num_inputs() const { return nin_; }
  size_t num_outputs() const { return nout_; }
  bool has_input(size_t i) const { return i < nin_ && in_[i] && in_[i]->kind != Value::Kind::kNone; }
  bool has_output(size_t i) const { return i < nout_ && out_[i] != nullptr; }
  const Tensor& input(size_t i) const { return in_[i]->tensor; }
  const Value& input_value(size_t i) const { return *in_[i]; }
  Tensor& output(size_t i) { return out_[i]->tensor; }
  Value& output_value(size_t i) { return *out_[i]; }
  /// For outputs prepared with set_output_dynamic.
  Tensor& allocate_output(size_t i, DType dtype, Shape shape);
  /// True when output i already is a view of input `in` (nothing to copy).
  bool output_aliases_input(size_t i, size_t in) const {
    return out_[i]->tensor.raw_data() == in_[in]->tensor.raw_data();
  }
  size_t num_implicit() const { return nimp_; }
  const Value& implicit(size_t i) const { return *imp_[i]; }

  void* workspace() { return ws_; }
  size_t workspace_bytes() const { return ws_bytes_; }

  /// Index of the current run of the executor (0, 1, 2, ...; restored from checkpoints).
  /// Random operators derive their streams from it so runs are reproducible.
  uint64_t run_index() const { return run_index_; }
  void set_run_index(uint64_t r) { run_index_ = r; }

  template <class... Args>
  [[noreturn]] void fail(Args&&... args) const {
    throw_error<InvalidArgument>(node_.describe(), ": ", std::forward<Args>(args)...);
  }

 private:
  const ir::Node& node_;
  Value* const* in_;
  size_t nin_;
  Value* const* out_;
  size_t nout_;
  Value* const* imp_;
  size_t nimp_;
  void* ws_;
  size_t ws_bytes_;
  const ExecOptions& options_;
  int num_threads_;
  DeviceContext* device_;
  uint64_t run_index_ = 0;
};

/// A kernel instance (one per node per plan).
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual void prepare(PrepareContext& ctx) = 0;
  virtual void run(RunContext& ctx) = 0;
};

using KernelFactory = std::function<std::unique_ptr<Kernel>(const KernelInfo&)>;

/// The kernels of one execution provider, keyed by (domain, op type, opset range); with the
/// provider that owns it, lookups are keyed by (execution provider, domain, op, opset range).
class KernelRegistry {
 public:
  struct Entry {
    std::string domain, op;
    int64_t since, until;  ///< inclusive opset range of the node's domain
    KernelFactory make;
    /// Inputs the kernel reads in host memory whatever its provider's device (shapes, axes, a
    /// trip count, the learning rate): the planner copies them there.
    std::vector<size_t> host_inputs;
  };
  /// The CPU provider's registry: every built-in kernel.
  static const KernelRegistry& global();

  void add(const std::string& domain, const std::string& op, int64_t since, int64_t until, KernelFactory f,
           std::vector<size_t> host_inputs = {});
  void add(Entry e);
  /// Adds for the default domain.
  void add(const std::string& op, int64_t since, int64_t until, KernelFactory f) {
    add("", op, since, until, std::move(f));
  }
  template <class K>
  void add(const std::string& op, int64_t since, int64_t until) {
    add("", op, since, until, [](const KernelInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<K>(info); });
  }
  /// Registers the kernels of (from_domain, op) for (domain, op) too: the same operator under
  /// another domain's name (onnxruntime's com.microsoft names of com.onnxtrain operators).
  void alias(const std::string& domain, const std::string& from_domain, const std::string& op);
  const Entry* find(const std::string& domain, const std::string& op, int64_t opset) const;
  /// True if some opset of (domain, op) has a kernel.
  bool knows(const std::string& domain, const std::string& op) const;
  std::vector<std::pair<std::string, std::string>> ops() const;

 private:
  std::map<std::pair<std::string, std::string>, std::vector<Entry>> entries_;
};

/// Creates the kernel for `node` from `registry` (default: the CPU provider's), or throws
/// NotImplemented naming the node, op, domain and opset.
std::unique_ptr<Kernel> create_kernel(const ir::Node& node, const OpsetMap& opsets, const ExecOptions& options,
                                      const KernelRegistry& registry = KernelRegistry::global());

/// An execution provider: a device, its allocator, its kernels, its per-run device context and
/// copies between its device and the host.
class ExecutionProvider {
 public:
  virtual ~ExecutionProvider() = default;
  /// onnxruntime's provider name, e.g. "CPUExecutionProvider".
  virtual const std::string& name() const = 0;
  virtual Device device() const = 0;
  virtual Allocator& allocator() = 0;
  virtual const KernelRegistry& registry() const = 0;
  /// A context for runs with `options` (one per executor; a run uses it on one thread at a time).
  virtual std::unique_ptr<DeviceContext> make_context(const ExecOptions& options) = 0;
  /// Copies `src` into `dst` (same dtype and element count), one of them on this provider's device
  /// and the other in host memory (or both on this device).
  virtual void copy(const Tensor& src, Tensor& dst, DeviceContext& ctx) = 0;
  /// Waits until the work queued in `ctx` is done (providers whose kernels run asynchronously; the
  /// profiler calls it after each node so that a node's time is its own).
  virtual void synchronize(DeviceContext& ctx) {}
};

/// The CPU provider: every built-in kernel, host memory.
ExecutionProvider& cpu_provider();

/// The execution provider named `name` (onnxruntime's names: "CPUExecutionProvider",
/// "CUDAExecutionProvider"), or null with the reason in `why`: a name no build has, a provider
/// this build was configured without, or a device that does not answer.
ExecutionProvider* find_execution_provider(const std::string& name, std::string* why = nullptr);
/// The providers this build has and whose device answers now, in preference order (the CPU last).
std::vector<std::string> available_execution_providers();
/// The provider whose memory domain is `device`: the CPU provider for the host, the CUDA provider
/// for cuda:0 (where the build has it and a device answers), or one made known with
/// register_device_provider; otherwise null with the reason in `why`.
ExecutionProvider* provider_of_device(const Device& device, std::string* why = nullptr);
/// Makes `p` the provider of p.device() for provider_of_device (tests: a second host device).
void register_device_provider(ExecutionProvider& p);

}  // namespace onnxtrain
