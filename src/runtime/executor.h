// GraphExecutor: runs one graph. For every input-shape signature it builds a Plan once: kernels
// instantiated and prepared with concrete shapes, constant subgraphs folded, intermediate
// buffers laid out in one arena by liveness. A steady-state run then only calls kernels.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/ir.h"
#include "kernels/kernel.h"

namespace onnxtrain::runtime {

/// Figures about one plan.
struct PlanStats {
  size_t arena_bytes = 0;     ///< intermediate values and workspaces, reused by liveness
  size_t naive_bytes = 0;     ///< what the same buffers would take without reuse
  size_t constant_bytes = 0;  ///< folded constants created at plan time
  size_t steps = 0;           ///< kernels called per run
  size_t dynamic_steps = 0;   ///< steps whose shapes are only known while running
  size_t folded_nodes = 0;    ///< nodes evaluated once at plan time
};

struct Plan;

class GraphExecutor {
 public:
  /// `outer_names`: values of enclosing scopes the graph reads (subgraphs); they follow the
  /// declared graph inputs in input_names(). `mutable_initializers` are never constant-folded
  /// (training updates them in place).
  GraphExecutor(std::shared_ptr<const ir::Graph> graph, OpsetMap opsets, ExecOptions options,
                std::vector<std::string> outer_names = {},
                std::unordered_set<std::string> mutable_initializers = {});
  ~GraphExecutor();

  const std::vector<std::string>& input_names() const { return input_names_; }
  const std::vector<std::string>& output_names() const { return output_names_; }
  const ir::Graph& graph() const { return *graph_; }
  const ExecOptions& options() const { return options_; }

  /// True when input i has an initializer default (may be left unfed).
  bool input_has_default(size_t i) const { return input_default_[i]; }

  /// Runs the graph. inputs[i] feeds input_names()[i] (null: not fed; allowed only for inputs
  /// with a default). `outputs` lists indices into output_names() (empty: all). Returns the
  /// requested outputs in order.
  std::vector<Value> run(const std::vector<const Value*>& inputs, const std::vector<size_t>& outputs = {});

  /// Runs done so far (RunContext::run_index of the next run). Settable to resume exactly.
  uint64_t run_counter() const { return run_counter_; }
  void set_run_counter(uint64_t r) { run_counter_ = r; }

  /// Stats of the plan used by the last run.
  PlanStats last_stats() const;
  size_t num_plans() const { return plans_.size(); }

 private:
  struct KeyHash {
    size_t operator()(const std::vector<int64_t>& k) const noexcept;
  };
  std::unique_ptr<Plan> build_plan(const std::vector<const Value*>& inputs, const std::vector<size_t>& outputs);
  void execute(Plan& plan, const std::vector<const Value*>& inputs, std::vector<Value>& results);

  std::shared_ptr<const ir::Graph> graph_;
  OpsetMap opsets_;
  ExecOptions options_;
  std::vector<std::string> input_names_;
  std::vector<bool> input_default_;
  std::vector<std::string> output_names_;
  std::unordered_set<std::string> mutable_;
  std::vector<size_t> order_;                          // topological node order
  std::vector<std::vector<std::string>> implicit_;     // per node: outer values its subgraphs read
  std::unordered_map<std::string, size_t> producer_;   // value -> node index

  std::mutex mu_;
  std::vector<int64_t> key_;
  std::unordered_map<std::vector<int64_t>, std::unique_ptr<Plan>, KeyHash> plans_;
  Plan* last_plan_ = nullptr;
  uint64_t run_counter_ = 0;
};

}  // namespace onnxtrain::runtime
