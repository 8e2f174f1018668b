#include "distributed/comm.h"

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "onnxtrain/error.h"

#ifdef ONNXTRAIN_WITH_MPI
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace onnxtrain::distributed {

namespace {

int env_int(const char* name, int dflt, bool* found = nullptr) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end || x < 0 || x > INT_MAX) return dflt;
  if (found) *found = true;
  return int(x);
}

using Clock = std::chrono::steady_clock;

}  // namespace

LaunchInfo launch_info() {
  LaunchInfo li;
  bool found = false;
  // OpenMPI's mpirun; then MPICH/Hydra (PMI_*); then onnxtrain's own variables.
  for (const char* prefix : {"OMPI_COMM_WORLD_", "PMI_", "ONNXTRAIN_WORLD_"}) {
    const std::string p = prefix;
    const bool ompi = p == "OMPI_COMM_WORLD_";
    found = false;
    const int size = env_int((p + "SIZE").c_str(), 0, &found);
    if (!found || size < 1) continue;
    li.size = size;
    li.rank = env_int((p + "RANK").c_str(), 0);
    li.local_rank = env_int(ompi ? "OMPI_COMM_WORLD_LOCAL_RANK" : (p + "LOCAL_RANK").c_str(), 0);
    li.local_size = env_int(ompi ? "OMPI_COMM_WORLD_LOCAL_SIZE" : (p + "LOCAL_SIZE").c_str(), 1);
    li.launched = true;
    break;
  }
  return li;
}

double comm_timeout_seconds() {
  const char* v = std::getenv("ONNXTRAIN_COMM_TIMEOUT");
  if (v && *v) {
    char* end = nullptr;
    const double t = std::strtod(v, &end);
    if (!*end && t > 0) return t;
  }
  return 60.0;
}

struct Comm::Impl {
  struct Job {
    Ticket id;
    std::function<void()> fn;
    std::string what;
    int64_t bytes;
  };
  std::mutex mu;
  std::condition_variable cv_job, cv_done;
  std::deque<Job> queue;
  std::map<Ticket, std::exception_ptr> finished;  // finished jobs not yet waited for
  Ticket next = 1;
  bool stop = false;
  std::thread thread;
  std::map<Ticket, std::string> pending_what;  // for the timeout message
  CommStats stats;

  void loop() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv_job.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        job = std::move(queue.front());
        queue.pop_front();
      }
      std::exception_ptr err;
      const auto t0 = Clock::now();
      try {
        job.fn();
      } catch (...) {
        err = std::current_exception();
      }
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      {
        std::lock_guard<std::mutex> lock(mu);
        finished[job.id] = err;
        if (job.bytes >= 0) {
          ++stats.collectives;
          stats.bytes += job.bytes;
          stats.comm_seconds += dt;
        }
      }
      cv_done.notify_all();
    }
  }
};

Comm::Ticket Comm::submit(std::function<void()> job, std::string what, int64_t bytes) {
  Impl& m = *impl_;
  Ticket id;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    id = m.next++;
    m.pending_what[id] = what;
    m.queue.push_back(Impl::Job{id, std::move(job), std::move(what), bytes});
  }
  m.cv_job.notify_one();
  return id;
}

void Comm::wait(Ticket t) {
  Impl& m = *impl_;
  const double limit = comm_timeout_seconds();
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit));
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> lock(m.mu);
    while (!m.finished.count(t)) {
      if (m.cv_done.wait_until(lock, deadline) == std::cv_status::timeout && !m.finished.count(t)) {
        const std::string what = m.pending_what.count(t) ? m.pending_what[t] : "a collective";
        std::fprintf(stderr,
                     "onnxtrain: error: rank %d of %d: %s did not complete within %g s: another rank has died, "
                     "stopped or left the job (ONNXTRAIN_COMM_TIMEOUT sets the limit); exiting\n",
                     rank_, size_, what.c_str(), limit);
        std::fflush(stderr);
        std::_Exit(70);
      }
    }
    err = m.finished[t];
    m.finished.erase(t);
    m.pending_what.erase(t);
    m.stats.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  if (err) std::rethrow_exception(err);
}

CommStats Comm::stats() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

size_t Comm::unwaited() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->pending_what.size();
}

void Comm::reset_stats() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stats = {};
}

CommStats comm_stats() { return initialized() ? Comm::world().stats() : CommStats{}; }

void reset_comm_stats() {
  if (initialized()) Comm::world().reset_stats();
}

#ifdef ONNXTRAIN_WITH_MPI

namespace {

std::atomic<bool> g_initialized{false};
std::map<int, MPI_Comm> g_groups;  // group size -> communicator (communication thread only)

MPI_Datatype mpi_type(DType dt, const char* what) {
  switch (dt) {
    case DType::kFloat32: return MPI_FLOAT;
    case DType::kFloat64: return MPI_DOUBLE;
    case DType::kInt64: return MPI_INT64_T;
    case DType::kInt32: return MPI_INT32_T;
    case DType::kUInt8: return MPI_UINT8_T;
    default: throw_error<NotImplemented>(what, ": element type ", dtype_name(dt), " is not communicated");
  }
}

int count_of(int64_t n, const char* what) {
  if (n < 0 || n > INT_MAX) throw_error<RuntimeError>(what, ": ", n, " elements exceed MPI's int count");
  return int(n);
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw_error<RuntimeError>(what, ": MPI error: ", std::string(msg, size_t(len)));
}

void finalize_at_exit() {
  if (!g_initialized) return;
  Comm& c = Comm::world();
  try {
    c.run([] { MPI_Finalize(); }, "MPI_Finalize", -1);
  } catch (...) {
  }
}

}  // namespace

namespace raw {
void allreduce_sum(void* data, int64_t count, DType dt, const char* what) {
  check(MPI_Allreduce(MPI_IN_PLACE, data, count_of(count, what), mpi_type(dt, what), MPI_SUM, MPI_COMM_WORLD), what);
}
void group_allreduce_sum(void* data, int64_t count, DType dt, int group_size, const char* what) {
  auto it = g_groups.find(group_size);
  if (it == g_groups.end()) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm sub;
    check(MPI_Comm_split(MPI_COMM_WORLD, rank / group_size, rank, &sub), what);
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    it = g_groups.emplace(group_size, sub).first;
  }
  check(MPI_Allreduce(MPI_IN_PLACE, data, count_of(count, what), mpi_type(dt, what), MPI_SUM, it->second), what);
}
void reduce_scatter_block(const void* send, void* recv, int64_t count_per_rank, DType dt, const char* what) {
  check(MPI_Reduce_scatter_block(send, recv, count_of(count_per_rank, what), mpi_type(dt, what), MPI_SUM,
                                 MPI_COMM_WORLD),
        what);
}
void allgather(const void* send, void* recv, int64_t count_per_rank, DType dt, const char* what) {
  const MPI_Datatype t = mpi_type(dt, what);
  const int n = count_of(count_per_rank, what);
  check(MPI_Allgather(send == recv ? MPI_IN_PLACE : send, n, t, recv, n, t, MPI_COMM_WORLD), what);
}
void broadcast(void* data, int64_t bytes, int root, const char* what) {
  check(MPI_Bcast(data, count_of(bytes, what), MPI_BYTE, root, MPI_COMM_WORLD), what);
}
void sendrecv(const void* send, int64_t send_count, void* recv, int64_t recv_count, DType dt, int peer,
              const char* what) {
  const MPI_Datatype t = mpi_type(dt, what);
  check(MPI_Sendrecv(send, count_of(send_count, what), t, peer, 17, recv, count_of(recv_count, what), t, peer, 17,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE),
        what);
}
void barrier(const char* what) { check(MPI_Barrier(MPI_COMM_WORLD), what); }
}  // namespace raw

bool mpi_available() { return true; }
bool initialized() { return g_initialized; }

Comm& Comm::world() {
  static Comm* c = [] {
    auto* comm = new Comm();
    comm->impl_ = new Impl();
    Impl& m = *comm->impl_;
    m.thread = std::thread([&m] { m.loop(); });
    m.thread.detach();
    int rank = 0, size = 1;
    comm->run(
        [&] {
          int provided = 0;
          check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
          MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
          MPI_Comm_rank(MPI_COMM_WORLD, &rank);
          MPI_Comm_size(MPI_COMM_WORLD, &size);
        },
        "MPI initialization", -1);
    comm->rank_ = rank;
    comm->size_ = size;
    g_initialized = true;
    std::atexit(finalize_at_exit);
    return comm;
  }();
  return *c;
}

#else  // no MPI in this build

namespace raw {
[[noreturn]] static void no_mpi() { throw_error<NotImplemented>("this onnxtrain was built without MPI"); }
void allreduce_sum(void*, int64_t, DType, const char*) { no_mpi(); }
void group_allreduce_sum(void*, int64_t, DType, int, const char*) { no_mpi(); }
void reduce_scatter_block(const void*, void*, int64_t, DType, const char*) { no_mpi(); }
void allgather(const void*, void*, int64_t, DType, const char*) { no_mpi(); }
void broadcast(void*, int64_t, int, const char*) { no_mpi(); }
void sendrecv(const void*, int64_t, void*, int64_t, DType, int, const char*) { no_mpi(); }
void barrier(const char*) { no_mpi(); }
}  // namespace raw

bool mpi_available() { return false; }
bool initialized() { return false; }

Comm& Comm::world() {
  throw_error<NotImplemented>("distributed training needs MPI, and this onnxtrain was built without it "
                              "(install libopenmpi-dev through scripts/install_deps.sh and rebuild)");
}

#endif

void Comm::allreduce_sum(void* data, int64_t count, DType dt, const char* what) {
  run([=] { raw::allreduce_sum(data, count, dt, what); }, what, count * int64_t(dtype_size(dt)));
}

std::vector<std::string> Comm::allgather_bytes(const std::string& mine, const char* what) {
  int64_t max_len = int64_t(mine.size());
  // The longest contribution sizes every block.
  std::vector<int64_t> lens(size_t(size_), 0);
  lens[size_t(rank_)] = int64_t(mine.size());
  run([&] { raw::allreduce_sum(lens.data(), int64_t(lens.size()), DType::kInt64, what); }, what, 8 * size_);
  for (int64_t l : lens) max_len = std::max(max_len, l);
  std::string block(size_t(max_len), '\0');
  std::copy(mine.begin(), mine.end(), block.begin());
  std::string all(size_t(max_len) * size_t(size_), '\0');
  run([&] { raw::allgather(block.data(), all.data(), max_len, DType::kUInt8, what); }, what, max_len);
  std::vector<std::string> r;
  for (int i = 0; i < size_; ++i) r.push_back(all.substr(size_t(i) * size_t(max_len), size_t(lens[size_t(i)])));
  return r;
}

void Comm::broadcast(void* data, int64_t bytes, int root, const char* what) {
  run([=] { raw::broadcast(data, bytes, root, what); }, what, bytes);
}

void Comm::barrier(const char* what) {
  run([=] { raw::barrier(what); }, what, 0);
}

int world_rank() {
  const LaunchInfo li = launch_info();
  if (li.size <= 1 && !initialized()) return 0;
  return Comm::world().rank();
}

int world_size() {
  const LaunchInfo li = launch_info();
  if (li.size <= 1 && !initialized()) return 1;
  return Comm::world().size();
}

void barrier() {
  if (world_size() > 1) Comm::world().barrier("barrier");
}

}  // namespace onnxtrain::distributed
