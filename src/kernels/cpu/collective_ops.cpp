// Data-parallel collectives as nodes of the training plan (com.onnxtrain, inserted by
// train/data_parallel.cpp). A bucket of gradients is reduced by a pair of nodes:
//
//   GradientReduceStart(contribution: float64 [1], G_1..G_n) -> token: int64 [1]
//       packs contribution * G_i into the bucket's buffer and queues its reduction on the
//       communication thread; returns at once (the backward pass goes on meanwhile).
//   GradientReduceWait(token, G_1..G_n) -> R_1..R_n
//       waits for the reduction and unpacks it (the G_i give the shapes only).
//
// mode "mean": R_i = sum over ranks of contribution_r * G_i,r (contribution 1/world_size averages;
// the trainer feeds local_rows / global_rows so uneven shards still give the global batch's mean).
// mode "adasum": R_i = the Adasum combination of the ranks' G_i (contribution unused).
//
//   ZeroAllGather(P_1..P_p, W_1..W_n) -> W'_1..W'_n   (attribute pieces = p; W'_i in place over W_i)
//       ZeRO stage 1: the weights flattened and concatenated are split in world_size blocks of
//       ceil(total / world_size) elements; this rank updated the parts P of its block (in weight
//       order, the weights its block does not touch have none); an allgather gives every rank
//       every block, which the node writes into the weights.
// Two ranks reduce with one allreduce (a + b rounds the same on both); more ranks with a
// reduce-scatter and an allgather, so each element is summed by one rank and every rank ends with
// the same bits.
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "distributed/adasum.h"
#include "distributed/comm.h"
#include "kernels/registry.h"
#include "kernels/shape/collective.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

namespace {

// Buffers of the reductions in flight, by token (a Start kernel owns the buffer; the Wait of the
// same run reads it). A Wait finds its token here before it waits on the communicator, so a token
// that no Start issued is an error, never a wait on a collective that does not exist.
struct Pending {
  const void* data = nullptr;
  int64_t count = 0;
  DType dtype = DType::kUndefined;
};
std::mutex g_mu;
std::unordered_map<int64_t, Pending> g_pending;

// Removes token `t` from the reductions in flight; true when it was there (its Wait never took it).
bool take_pending(int64_t t, Pending* out = nullptr) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_pending.find(t);
  if (it == g_pending.end()) return false;
  if (out) *out = it->second;
  g_pending.erase(it);
  return true;
}

class GradientReduceStartKernel final : public Kernel {
 public:
  explicit GradientReduceStartKernel(const KernelInfo& info)
      : mode_(shape::read_reduce_mode(info)), what_("the gradient reduction of " + info.node().name) {}
  // A reduction still in flight writes into buf_: it completes before the buffer goes.
  ~GradientReduceStartKernel() override { settle(); }
  void prepare(PrepareContext& ctx) override {
    const shape::Bucket b = shape::check_gradient_reduce_start(ctx);
    dt_ = b.dtype;
    sizes_ = b.sizes;
    count_ = b.count;
    ctx.set_output(0, DType::kInt64, {1});
    ctx.set_nondeterministic();
  }
  void run(RunContext& ctx) override {
    settle();  // a run that failed between this node and its Wait left its reduction in flight
    distributed::Comm& comm = distributed::Comm::world();
    const int n = comm.size();
    const size_t es = dtype_size(dt_);
    const int64_t padded = (count_ + n - 1) / n * n;  // reduce-scatter blocks of equal size
    buf_.resize(size_t(padded) * es);
    const double c = mode_ == shape::ReduceMode::kAdasum ? 1.0 : ctx.input(0).data<double>()[0];
    int64_t off = 0;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      const Tensor& g = ctx.input(1 + i);
      if (dt_ == DType::kFloat32) {
        const float* s = g.data<float>();
        float* d = reinterpret_cast<float*>(buf_.data()) + off;
        const float cf = float(c);
        for (int64_t j = 0; j < sizes_[i]; ++j) d[j] = s[j] * cf;
      } else {
        const double* s = g.data<double>();
        double* d = reinterpret_cast<double*>(buf_.data()) + off;
        for (int64_t j = 0; j < sizes_[i]; ++j) d[j] = s[j] * c;
      }
      off += sizes_[i];
    }
    std::memset(buf_.data() + size_t(count_) * es, 0, size_t(padded - count_) * es);
    void* data = buf_.data();
    const DType dt = dt_;
    const int rank = comm.rank();
    const char* what = what_.c_str();
    std::function<void()> job;
    if (mode_ == shape::ReduceMode::kAdasum) {
      job = [=, sizes = sizes_] { distributed::adasum_allreduce(data, dt, sizes, rank, n, what); };
    } else if (n <= 2) {
      job = [=, count = count_] { distributed::raw::allreduce_sum(data, count, dt, what); };
    } else {
      block_.resize(size_t(padded / n) * es);
      void* block = block_.data();
      job = [=] {
        distributed::raw::reduce_scatter_block(data, block, padded / n, dt, what);
        distributed::raw::allgather(block, data, padded / n, dt, what);
      };
    }
    const auto ticket = int64_t(comm.submit(std::move(job), what_, count_ * int64_t(es)));
    {
      std::lock_guard<std::mutex> lock(g_mu);
      g_pending[ticket] = Pending{data, count_, dt_};
    }
    issued_ = ticket;
    ctx.output(0).data<int64_t>()[0] = ticket;
  }

 private:
  // The reduction this kernel issued last, when no Wait took it (the run stopped in between):
  // waited for (its job still reads and writes buf_) and forgotten, so nothing accumulates in the
  // table of reductions in flight or in the communicator's finished jobs.
  void settle() {
    if (issued_ < 0) return;
    const int64_t t = issued_;
    issued_ = -1;
    if (!take_pending(t)) return;  // its Wait took it
    try {
      distributed::Comm::world().wait(distributed::Comm::Ticket(t));
    } catch (const std::exception&) {
      // the job failed; its error was the failed run's concern, the buffer is free again
    }
  }

  shape::ReduceMode mode_;
  std::string what_;
  DType dt_ = DType::kFloat32;
  std::vector<int64_t> sizes_;
  int64_t count_ = 0;
  int64_t issued_ = -1;
  std::vector<char> buf_, block_;
};

class GradientReduceWaitKernel final : public Kernel {
 public:
  explicit GradientReduceWaitKernel(const KernelInfo&) {}
  void prepare(PrepareContext& ctx) override {
    const shape::Bucket b = shape::check_gradient_reduce_wait(ctx);
    dt_ = b.dtype;
    sizes_ = b.sizes;
    count_ = b.count;
    for (size_t i = 0; i < sizes_.size(); ++i) ctx.set_output(i, dt_, ctx.input_shape(1 + i));
    ctx.set_nondeterministic();
  }
  void run(RunContext& ctx) override {
    const int64_t ticket = ctx.input(0).data<int64_t>()[0];
    Pending p;
    if (!take_pending(ticket, &p))
      ctx.fail("no reduction in flight for token ", ticket, " (the token of a GradientReduceStart of this run)");
    if (p.dtype != dt_ || p.count != count_) {
      distributed::Comm::world().wait(distributed::Comm::Ticket(ticket));  // its buffer is in use until then
      ctx.fail("token ", ticket, " is a reduction of ", p.count, " ", dtype_name(p.dtype), " elements; the gradients "
               "given to this node hold ", count_, " ", dtype_name(dt_), " elements");
    }
    distributed::Comm::world().wait(distributed::Comm::Ticket(ticket));
    const size_t es = dtype_size(dt_);
    int64_t off = 0;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      if (ctx.has_output(i))
        std::memcpy(ctx.output(i).raw_data(), static_cast<const char*>(p.data) + size_t(off) * es, size_t(sizes_[i]) * es);
      off += sizes_[i];
    }
  }

 private:
  DType dt_ = DType::kFloat32;
  std::vector<int64_t> sizes_;
  int64_t count_ = 0;
};

class ZeroAllGatherKernel final : public Kernel {
 public:
  explicit ZeroAllGatherKernel(const KernelInfo& info) : pieces_(shape::read_zero_pieces(info)) {}
  void prepare(PrepareContext& ctx) override {
    const shape::ZeroGeom g = shape::check_zero_all_gather(ctx, pieces_);
    dt_ = g.weights.dtype;
    sizes_ = g.weights.sizes;
    total_ = g.weights.count;
    part_sizes_ = g.part_sizes;
    for (size_t i = 0; i < sizes_.size(); ++i) ctx.set_output_inplace(i, pieces_ + i);
    ctx.set_nondeterministic();
  }
  void run(RunContext& ctx) override {
    distributed::Comm& comm = distributed::Comm::world();
    const int n = comm.size(), rank = comm.rank();
    const int64_t block = (total_ + n - 1) / n;
    const int64_t lo = std::min(total_, block * rank), hi = std::min(total_, block * (rank + 1));
    const size_t es = dtype_size(dt_);
    // This rank's parts fill its block exactly: checked before anything is copied.
    int64_t got = 0;
    for (size_t i = 0; i < pieces_; ++i) got += part_sizes_[i];
    if (got != hi - lo) ctx.fail("the parts hold ", got, " elements, this rank's block ", hi - lo);
    flat_.resize(size_t(block * n) * es);
    got = 0;
    for (size_t i = 0; i < pieces_; ++i) {
      std::memcpy(flat_.data() + size_t(lo + got) * es, ctx.input(i).raw_data(), size_t(part_sizes_[i]) * es);
      got += part_sizes_[i];
    }
    char* data = flat_.data();
    const DType dt = dt_;
    comm.run([=] { distributed::raw::allgather(data, data, block, dt, "the ZeRO allgather of the weights"); },
             "the ZeRO allgather of the weights", block * int64_t(es));
    int64_t off = 0;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      std::memcpy(ctx.output(i).raw_data(), flat_.data() + size_t(off) * es, size_t(sizes_[i]) * es);
      off += sizes_[i];
    }
  }

 private:
  size_t pieces_ = 0;
  DType dt_ = DType::kFloat32;
  std::vector<int64_t> sizes_, part_sizes_;
  int64_t total_ = 0;
  std::vector<char> flat_;
};

}  // namespace

size_t reductions_in_flight() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_pending.size();
}

void register_collectives(KernelRegistry& r) {
  r.add(ops::kDomain, "ZeroAllGather", ops::kOpset, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<ZeroAllGatherKernel>(i); });
  r.add(ops::kDomain, "GradientReduceStart", ops::kOpset, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<GradientReduceStartKernel>(i); });
  r.add(ops::kDomain, "GradientReduceWait", ops::kOpset, kMaxOpsetAll,
        [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<GradientReduceWaitKernel>(i); });
}

}  // namespace onnxtrain::kernels::cpu
