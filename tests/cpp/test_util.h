// Helpers for kernel tests: run one node through the executor, random tensors, naive
// double-precision references and tolerant comparison.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "onnxtrain/tensor.h"
#include "onnxtrain/value.h"

namespace onnxtrain {
struct ExecOptions;
namespace runtime {
class GraphExecutor;
}
}  // namespace onnxtrain

namespace ot_test {

/// A temporary folder, removed with its contents at scope exit.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/onnxtrain_test_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

/// Names in a folder (without "." and ".."); empty when it cannot be read.
std::set<std::string> list_dir(const std::string& dir);
/// A whole file's bytes ("" when it cannot be read).
std::string slurp(const std::string& path);
/// `prefix` followed by `i` ("x3"); spelled out because GCC 12 at -O3 reports a false -Wrestrict
/// for `"x" + std::to_string(i)` (GCC bug 105651).
inline std::string numbered(const char* prefix, size_t i) {
  std::string s(prefix);
  s += std::to_string(i);
  return s;
}
/// Writes `s` to `path` (a plain, non-atomic write: test fixtures).
void write_text(const std::string& path, const std::string& s);

using onnxtrain::DType;
using onnxtrain::Shape;
using onnxtrain::Tensor;
namespace ir = onnxtrain::ir;

ir::Attribute attr_int(const std::string& name, int64_t v);
ir::Attribute attr_float(const std::string& name, float v);
ir::Attribute attr_string(const std::string& name, const std::string& v);
ir::Attribute attr_ints(const std::string& name, const std::vector<int64_t>& v);
ir::Attribute attr_floats(const std::string& name, const std::vector<float>& v);
ir::Attribute attr_tensor(const std::string& name, const Tensor& v);
ir::Attribute attr_graph(const std::string& name, std::shared_ptr<ir::Graph> g);

/// A node named after its op and first output.
ir::Node make_node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                   std::vector<ir::Attribute> attrs = {}, const std::string& domain = "");
/// A tensor value declaration (shape unknown when `shape` is empty and `rank0` false).
ir::ValueInfo value_info(const std::string& name, DType dt = DType::kFloat32, const Shape& shape = {});

struct RunOptions {
  int64_t opset = 17;
  std::string domain{};        ///< node domain ("" = ai.onnx)
  size_t num_outputs = 1;
  bool inputs_as_constants = false;  ///< feed inputs as initializers (exercises constant folding)
  int threads = 1;
  int64_t domain_opset = 1;  ///< the opset imported for `domain` (when not ai.onnx)
};

/// Runs a single `op` node on `inputs` (an undefined Tensor marks an omitted optional input) and
/// returns its outputs.
std::vector<Tensor> run_node(const std::string& op, const std::vector<Tensor>& inputs,
                             const std::vector<ir::Attribute>& attrs = {}, const RunOptions& opts = {});

/// Where run_kernel puts an output the kernel declares in place (PrepareContext::set_output_inplace).
enum class InPlace {
  kAliased,   ///< the input's memory (a copy of the caller's tensor): what the planner does when it can
  kSeparate,  ///< a buffer of its own, filled with NaN bytes first (today's executor)
};

/// Outputs of run_kernel, and for each output the input it overwrites in place (-1: none).
struct KernelRun {
  std::vector<Tensor> outputs;  ///< undefined for outputs left unnamed
  std::vector<int> inplace_of;
};

/// Runs one `op` node's kernel directly, without the executor: prepare from the inputs' dtypes and
/// shapes, then run once with opts.threads threads. Inputs not overwritten in place are passed as
/// they are (compare them afterwards to catch a kernel writing into them). Outputs whose index is in
/// `unnamed` are not named by the node.
KernelRun run_kernel(const std::string& op, const std::vector<Tensor>& inputs, const std::vector<ir::Attribute>& attrs,
                     const RunOptions& opts, InPlace mode, const std::vector<size_t>& unnamed = {});

/// True when both tensors have the same dtype, shape and bytes.
bool same_bits(const Tensor& a, const Tensor& b);

/// Runs an executor on tensors fed in input order; returns every output.
std::vector<onnxtrain::Value> run(onnxtrain::runtime::GraphExecutor& ex, const std::vector<Tensor>& inputs);

/// Runs a model (graph inputs fed in order) and returns its outputs.
std::vector<Tensor> run_model(const ir::Model& m, const std::vector<Tensor>& inputs, int threads = 1);
/// The same with the executor's options (threads, session config such as the Winograd choice).
std::vector<Tensor> run_model(const ir::Model& m, const std::vector<Tensor>& inputs,
                              const onnxtrain::ExecOptions& eo);

/// Uniform random tensor in [lo, hi) (integers: rounded; bool: coin flips). Deterministic per rng.
/// y = X W + b (times a constant s [1] = 2 when `scaled`): X float [N, 2], W [2, 1] = (0.5, -0.25),
/// b [1] = 0.1, opset 14; serialized. The artifacts tests' model.
std::string linear_model_bytes(bool scaled);

Tensor random_tensor(DType dt, const Shape& shape, std::mt19937& rng, double lo = -1.0, double hi = 1.0);
/// Elements as doubles (any numeric or bool dtype).
std::vector<double> to_double(const Tensor& t);
/// Tensor of dtype `dt` from doubles.
Tensor from_double(DType dt, const Shape& shape, const std::vector<double>& v);

/// Checks shape and values: |a - e| <= atol + rtol * |e| (NaNs must match).
::testing::AssertionResult all_close(const Tensor& actual, const Shape& shape, const std::vector<double>& expected,
                                     double rtol = 1e-5, double atol = 1e-6);

/// Row-major index helpers for naive references.
std::vector<int64_t> unravel(int64_t flat, const Shape& shape);
int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape);
/// Index into a broadcast operand: idx is an output index of rank >= shape's rank.
int64_t broadcast_index(const std::vector<int64_t>& out_idx, const Shape& in_shape);

}  // namespace ot_test
