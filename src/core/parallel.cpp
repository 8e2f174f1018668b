#include "core/parallel.h"

#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

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

int threads_from_env(const char* value, int cores) {
  if (!value || !*value) return cores;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(value, &end, 10);
  if (errno != 0 || end == value || (*end != '\0' && *end != ',') || n <= 0) return cores;
  return int(std::min<long>(n, cores));
}

int default_threads() {
  // Read once, as the OpenMP runtime reads it: every later prepare and run sees the same budget.
  static const int n = threads_from_env(std::getenv("OMP_NUM_THREADS"), hardware_threads());
  return n;
}

int current_threads() { return t_threads; }

int thread_budget(int requested) { return requested > 0 ? requested : default_threads(); }

ThreadScope::ThreadScope(int n) : prev_threads_(t_threads), prev_omp_(omp_get_max_threads()) {
  n = thread_budget(n);
  t_threads = n;
  omp_set_num_threads(n);
}

ThreadScope::~ThreadScope() {
  t_threads = prev_threads_;
  omp_set_num_threads(prev_omp_);
}

}  // namespace onnxtrain
