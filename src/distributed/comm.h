// The MPI communicator of a data-parallel job (internal). One communication thread makes every
// MPI call (MPI_THREAD_FUNNELED: the thread that initialized MPI is the only one that calls it), so
// a collective launched by one node of the training plan runs while the following nodes compute,
// and a later node waits for it. Waits are bounded: past the timeout the process exits with an
// error naming the collective (a dead or stopped rank must not hang the others).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "onnxtrain/distributed.h"
#include "onnxtrain/dtype.h"

namespace onnxtrain::distributed {

/// Raw MPI operations for jobs that run on the communication thread (Comm::submit). Each throws
/// RuntimeError naming `what` and MPI's message on failure.
namespace raw {
void allreduce_sum(void* data, int64_t count, DType dt, const char* what);
/// Sum within this rank's group of `group_size` consecutive ranks (ranks [k * group_size,
/// (k + 1) * group_size)); collective over the world: every rank calls it with the same size.
void group_allreduce_sum(void* data, int64_t count, DType dt, int group_size, const char* what);
/// send: count_per_rank * size elements; recv: count_per_rank (this rank's block of the sum).
void reduce_scatter_block(const void* send, void* recv, int64_t count_per_rank, DType dt, const char* what);
/// Every rank's block of count_per_rank elements, in rank order (recv: count_per_rank * size).
void allgather(const void* send, void* recv, int64_t count_per_rank, DType dt, const char* what);
void broadcast(void* data, int64_t bytes, int root, const char* what);
/// Exchanges with `peer`: sends `send_count` elements, receives `recv_count`.
void sendrecv(const void* send, int64_t send_count, void* recv, int64_t recv_count, DType dt, int peer,
              const char* what);
void barrier(const char* what);
}  // namespace raw

class Comm {
 public:
  /// The world communicator; starts MPI and the communication thread on first use. Throws
  /// NotImplemented when the build has no MPI, RuntimeError when MPI fails to start.
  static Comm& world();
  int rank() const { return rank_; }
  int size() const { return size_; }

  using Ticket = uint64_t;
  /// Queues `job` (MPI calls through raw::) on the communication thread; `bytes` counts in the
  /// statistics. Returns at once.
  Ticket submit(std::function<void()> job, std::string what, int64_t bytes);
  /// Waits for `t` (bounded by the timeout); rethrows the job's exception.
  void wait(Ticket t);
  /// submit + wait.
  void run(std::function<void()> job, std::string what, int64_t bytes = 0) { wait(submit(std::move(job), std::move(what), bytes)); }

  /// Convenience collectives (synchronous).
  void allreduce_sum(void* data, int64_t count, DType dt, const char* what);
  /// Every rank's `bytes` bytes in rank order.
  std::vector<std::string> allgather_bytes(const std::string& mine, const char* what);
  void broadcast(void* data, int64_t bytes, int root, const char* what);
  void barrier(const char* what);

  CommStats stats();
  void reset_stats();
  /// Jobs submitted and not waited for yet, finished or not (each holds an entry until its wait).
  size_t unwaited();

  struct Impl;

 private:
  Comm() = default;
  int rank_ = 0, size_ = 1;
  Impl* impl_ = nullptr;  // lives until exit (MPI finalizes at exit)
};

/// Seconds a wait may last (ONNXTRAIN_COMM_TIMEOUT, default 60).
double comm_timeout_seconds();

}  // namespace onnxtrain::distributed
