// Error context shared by the planner and the executor: every error raised while planning or
// running a node names that node, keeping the error's type.
#pragma once

#include <new>
#include <string>

#include "ir/ir.h"
#include "onnxtrain/error.h"

namespace onnxtrain::runtime {

/// Re-throws `e` with `prefix` prepended, keeping its type.
[[noreturn]] void rethrow_with(const Error& e, const std::string& prefix);

/// Calls f(), making sure any error names `node`.
template <class F>
void with_node_context(const ir::Node& node, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    const std::string d = node.describe();
    if (std::string(e.what()).find(d) != std::string::npos) throw;
    rethrow_with(e, d + ": ");
  } catch (const std::bad_alloc&) {
    throw_error<RuntimeError>(node.describe(), ": out of memory");
  }
}

}  // namespace onnxtrain::runtime
