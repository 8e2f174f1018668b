#include "runtime/run_hooks.h"

#include <chrono>

namespace onnxtrain::runtime {

namespace {
thread_local RunHooks* tls_hooks = nullptr;
}

RunHooks* current_run_hooks() { return tls_hooks; }

ScopedRunHooks::ScopedRunHooks(RunHooks* hooks) : prev_(tls_hooks) { tls_hooks = hooks; }
ScopedRunHooks::~ScopedRunHooks() { tls_hooks = prev_; }

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace onnxtrain::runtime
