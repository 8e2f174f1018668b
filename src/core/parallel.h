// The one threading runtime: OpenMP (the runtime oneDNN uses too). The executor sets the thread
// count of the calling thread for the duration of a run; kernels split loops with parallel_for.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>

namespace onnxtrain {

/// Number of hardware threads (cores available to this process).
int hardware_threads();
/// The thread budget where none is given (intra_op_num_threads = 0): OMP_NUM_THREADS as the
/// process started with it (threads_from_env), else hardware_threads().
int default_threads();
/// The threads a session or kernel asking for `requested` (intra_op_num_threads) gets: that
/// number, or default_threads() where it is 0 or less. ThreadScope and every per-thread sizing use it.
int thread_budget(int requested);
/// OMP_NUM_THREADS's value as a thread count: its first entry ("4", "4,2") when a positive
/// integer, at most `cores`; otherwise (unset, empty, 0, not a number) `cores`.
int threads_from_env(const char* value, int cores);
/// Threads kernels may use on this thread right now (set by ThreadScope; default 1).
int current_threads();

/// Sets the thread budget for the current thread (our kernels and oneDNN) and restores it.
class ThreadScope {
 public:
  explicit ThreadScope(int n);
  ~ThreadScope();
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int prev_threads_;
  int prev_omp_;
};

/// Elements per chunk, at least, for pure data movement (copies, transposes, layout reorders): a
/// tensor that fits in one core's second-level cache moves faster on that core than split across
/// cores that must first fetch it (20 transposes of 91K floats: 2 threads 3x slower than 1; of
/// 365K floats 1.7x faster).
inline constexpr int64_t kCopyGrain = int64_t(1) << 17;

/// Runs f(begin, end) over [0, n) split in contiguous chunks of at least `grain` items across the
/// current thread budget. Exceptions thrown by f are rethrown on the calling thread.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int threads = int(std::min<int64_t>(current_threads(), max_chunks));
  if (threads <= 1 || omp_in_parallel()) {
    f(int64_t(0), n);
    return;
  }
  std::exception_ptr err;
  std::mutex mu;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    const int nt = omp_get_num_threads();
    const int64_t b = n * t / nt, e = n * (t + 1) / nt;
    try {
      if (b < e) f(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace onnxtrain
