// The C InferenceSession object (onnxruntime's onnxruntime_pybind11_state.InferenceSession),
// shared by bind_session.cpp (which binds it) and bind_agent.cpp (TrainingAgent runs one).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "convert.h"
#include "onnxtrain/error.h"
#include "onnxtrain/session.h"

namespace onnxtrain::python {

/// The C InferenceSession: created with its options and model, loaded by initialize_session().
struct PySession {
  SessionOptions options;
  py::object model;  // str path or bytes
  bool is_path = true;
  std::unique_ptr<InferenceSession> sess;
  std::vector<std::string> providers;
  py::dict provider_options;
  /// Inputs the model declares sparse_tensor, with their type: a dense feed for one is refused.
  std::vector<std::pair<std::string, std::string>> sparse_inputs;

  InferenceSession& get() {
    if (!sess) throw_error<InvalidArgument>("the session is not initialized: call initialize_session() first");
    return *sess;
  }
};

}  // namespace onnxtrain::python
