// Internals shared by the session classes.
#pragma once

#include <memory>

#include "ir/ir.h"
#include "onnxtrain/session.h"
#include "runtime/executor.h"
#include "runtime/feeds.h"

namespace onnxtrain {

using runtime::check_feed;
using runtime::node_arg_of;

struct InferenceSession::Impl {
  ir::Model model;
  std::unique_ptr<runtime::GraphExecutor> exec;
  SessionOptions options;
  std::unordered_map<std::string, size_t> input_index;   // executor input position
  std::unordered_map<std::string, size_t> output_index;  // executor output position
  void init();
  std::vector<Value> run(const std::vector<std::string>& output_names,
                         const std::vector<std::pair<std::string, const Value*>>& feeds);
};

}  // namespace onnxtrain
