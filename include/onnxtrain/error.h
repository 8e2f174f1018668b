// onnxtrain error types. Every failure the library reports is one of these; each message names
// the offending tensor, node, input or option.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace onnxtrain {

/// What kind of failure an Error reports (mirrors onnxruntime's status codes).
enum class ErrorCode {
  kFail = 1,             ///< generic runtime failure
  kInvalidArgument = 2,  ///< bad caller input: feed names, dtypes, shapes, options
  kInvalidModel = 3,     ///< malformed model file or bytes (tensor data, external data, IR version)
  kInvalidGraph = 4,     ///< structurally wrong graph: cycles, undefined or duplicate names
  kNotImplemented = 5,   ///< valid ONNX that onnxtrain does not support (operator, opset, dtype)
  kIOError = 6,          ///< file system failure
  kNoSuchFile = 7,       ///< a file that does not exist (a kind of kIOError)
  kTerminated = 8,       ///< a run stopped on request (RunOptions.terminate)
};

/// Base class of every exception onnxtrain throws.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

/// Bad caller input (feeds, options).
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& w) : Error(ErrorCode::kInvalidArgument, w) {}
};
/// Malformed model bytes or tensor data.
class InvalidModel : public Error {
 public:
  explicit InvalidModel(const std::string& w, ErrorCode c = ErrorCode::kInvalidModel) : Error(c, w) {}
};
/// Structurally invalid graph (a kind of InvalidModel).
class InvalidGraph : public InvalidModel {
 public:
  explicit InvalidGraph(const std::string& w) : InvalidModel(w, ErrorCode::kInvalidGraph) {}
};
/// Valid ONNX that onnxtrain does not support.
class NotImplemented : public Error {
 public:
  explicit NotImplemented(const std::string& w) : Error(ErrorCode::kNotImplemented, w) {}
};
/// File system failure (missing file, permission, short read).
class IOError : public Error {
 public:
  explicit IOError(const std::string& w, ErrorCode c = ErrorCode::kIOError) : Error(c, w) {}
};
/// A file that does not exist.
class NoSuchFile : public IOError {
 public:
  explicit NoSuchFile(const std::string& w) : IOError(w, ErrorCode::kNoSuchFile) {}
};
/// Generic runtime failure (for example a kernel rejecting its inputs at run time).
class RuntimeError : public Error {
 public:
  explicit RuntimeError(const std::string& w, ErrorCode c = ErrorCode::kFail) : Error(c, w) {}
};
/// A run stopped because its caller asked it to (RunOptions.terminate).
class Terminated : public RuntimeError {
 public:
  explicit Terminated(const std::string& w) : RuntimeError(w, ErrorCode::kTerminated) {}
};

namespace detail {
template <class... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

/// Throws E with the streamed concatenation of args: `throw_error<InvalidModel>("tensor ", n, ...)`.
template <class E, class... Args>
[[noreturn]] void throw_error(Args&&... args) {
  throw E(detail::concat(std::forward<Args>(args)...));
}

}  // namespace onnxtrain

/// Check that throws onnxtrain::E with a streamed message when cond is false.
#define OT_CHECK(cond, E, ...)                       \
  do {                                               \
    if (!(cond)) ::onnxtrain::throw_error<E>(__VA_ARGS__); \
  } while (0)
