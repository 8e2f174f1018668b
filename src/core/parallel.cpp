#include "core/parallel.h"

#include <sched.h>
#include <unistd.h>

namespace onnxtrain {

namespace {
thread_local int t_threads = 1;
}

int hardware_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? int(n) : 1;
}

int current_threads() { return t_threads; }

ThreadScope::ThreadScope(int n) : prev_threads_(t_threads), prev_omp_(omp_get_max_threads()) {
  if (n <= 0) n = hardware_threads();
  t_threads = n;
  omp_set_num_threads(n);
}

ThreadScope::~ThreadScope() {
  t_threads = prev_threads_;
  omp_set_num_threads(prev_omp_);
}

}  // namespace onnxtrain
