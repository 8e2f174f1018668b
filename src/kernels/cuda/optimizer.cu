// CUDA update step (com.onnxtrain, rows of src/ops/optimizers.h), as cpu/optimizer_ops.cpp computes it:
//   SGD, Momentum, Adam, AdamW, Adagrad optimizers (lr, step, grad_scale?, update_signal?, W1..n,
//     G1..n, states) -> W1..n', states' in place: w, s = rule(w, g * grad_scale, s) per element
//     (optimizer_rules.h, the CPU rules' rounding). LambOptimizer: the moments and the direction
//     r by the CPU's rule, each tensor's trust ratio ||w|| / ||r|| from per-chunk partial sums (a
//     tree per chunk of 8192: the norms' last bits may differ from the CPU's sequential sums).
//     lr, step and grad_scale are host inputs; update_signal is read on the device (no host
//     sync): false copies w and the states to their outputs unchanged.
//   AccumulateGradients(reset, A1..n, G1..n) -> A1..n': A' = reset ? G : A + G (reset on the host).
//   GlobalNormClip(G1..n) -> scale[1], norm[1] (float64, device): norm = sqrt(sum g^2) in double,
//     scale = min(max_norm / (norm + 1e-6), 1) (NaN: 1).
//   LossScaleCheck(loss_scale, G1..n) -> grad_scale[1], all_finite[1] on the same sum.
// Multi-tensor launches: a table of up to kMaxSlots tensors is a kernel argument; each tensor is
// cut into chunks of kChunk elements and the blocks walk the chunks of the table.
// Declined (NotImplemented: the CPU provider runs them): the ai.onnx.preview.training optimizers and
// the com.microsoft ones (not registered).
#include <cmath>

#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_provider.h"
#include "kernels/cuda/optimizer_rules.h"
#include "kernels/cuda/reduce_util.h"
#include "kernels/shape/optimizer.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cuda {

namespace {

using ops::kOptimizerGradScaleInput;
using ops::kOptimizerLrInput;
using ops::kOptimizerStepInput;
using ops::kOptimizerUpdateSignalInput;
using Algo = ops::OptimizerAlgorithm;

constexpr int kThreads = 256;
constexpr int kMaxSlots = 24;        // tensors per launch (the table stays well under 4 KiB)
constexpr int64_t kChunk = 4096;     // elements per chunk of an update
constexpr int64_t kNormChunk = 8192; // elements per partial sum of a norm

// ---------------------------------------------------------------- update tables
// Tensor k of a launch: chunks [chunk0[k], chunk0[k + 1]), numel[k] elements; pointers to the
// weight (in, out), gradient and states (in, out). Outputs may be their inputs (in place).
template <class T>
struct SlotTable {
  int n = 0;
  int64_t chunk0[kMaxSlots + 1] = {};
  int64_t numel[kMaxSlots] = {};
  const T* w[kMaxSlots] = {};
  T* wo[kMaxSlots] = {};
  const T* g[kMaxSlots] = {};
  const T* s0[kMaxSlots] = {};
  const T* s1[kMaxSlots] = {};
  T* s0o[kMaxSlots] = {};
  T* s1o[kMaxSlots] = {};
};

// Chunk q of the table: its tensor k (returned) and element range [lo, hi), chunks of `chunk`.
template <class Table>
__device__ inline int chunk_of(const Table& tab, int64_t q, int64_t chunk, int64_t* lo, int64_t* hi) {
  int k = 0;
  while (q >= tab.chunk0[k + 1]) ++k;
  *lo = (q - tab.chunk0[k]) * chunk;
  *hi = *lo + chunk < tab.numel[k] ? *lo + chunk : tab.numel[k];
  return k;
}

// One thread per element of a chunk: reads w, g, states, then writes (safe in place). skip
// (*signal false): outputs keep their inputs.
template <class T, class Rule>
__global__ void update_kernel(SlotTable<T> tab, Rule rule, double grad_scale, const bool* signal) {
  constexpr int S = Rule::kStates;
  const bool skip = signal != nullptr && !*signal;
  const T scale = T(grad_scale);
  const int64_t chunks = tab.chunk0[tab.n];
  for (int64_t q = blockIdx.x; q < chunks; q += gridDim.x) {
    int64_t lo, hi;
    const int k = chunk_of(tab, q, kChunk, &lo, &hi);
    const T* W = tab.w[k];
    const T* G = tab.g[k];
    T* Wo = tab.wo[k];
    const T* S0 = tab.s0[k];
    const T* S1 = tab.s1[k];
    T* S0o = tab.s0o[k];
    T* S1o = tab.s1o[k];
    if (skip) {
      for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        if (Wo != W) Wo[i] = W[i];
        if constexpr (S > 0)
          if (S0o != S0) S0o[i] = S0[i];
        if constexpr (S > 1)
          if (S1o != S1) S1o[i] = S1[i];
      }
      continue;
    }
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      T a = T(0), b = T(0);
      if constexpr (S > 0) a = S0[i];
      if constexpr (S > 1) b = S1[i];
      const Updated<T> u = apply_rule(rule, W[i], G[i], scale, a, b);
      Wo[i] = u.w;
      if constexpr (S > 0) S0o[i] = u.s0;
      if constexpr (S > 1) S1o[i] = u.s1;
    }
  }
}

// Pointers of one tensor of an update (as the CPU kernel's Slot).
struct Slot {
  DType dtype = DType::kFloat32;
  int64_t numel = 0;
  const void* w = nullptr;
  void* wo = nullptr;
  const void* g = nullptr;
  const void* s[2] = {nullptr, nullptr};
  void* so[2] = {nullptr, nullptr};
};

// Appends slot p to the table, cut into chunks of `chunk` elements; true when the table is full.
template <class T>
bool add_slot(SlotTable<T>& tab, const Slot& p, int64_t chunk) {
  const int k = tab.n;
  tab.numel[k] = p.numel;
  tab.chunk0[k + 1] = tab.chunk0[k] + (p.numel + chunk - 1) / chunk;
  tab.w[k] = static_cast<const T*>(p.w);
  tab.wo[k] = static_cast<T*>(p.wo);
  tab.g[k] = static_cast<const T*>(p.g);
  tab.s0[k] = static_cast<const T*>(p.s[0]);
  tab.s1[k] = static_cast<const T*>(p.s[1]);
  tab.s0o[k] = static_cast<T*>(p.so[0]);
  tab.s1o[k] = static_cast<T*>(p.so[1]);
  return ++tab.n == kMaxSlots;
}

template <class T, class Rule>
void launch_update(const CudaContext& c, SlotTable<T>& tab, const Rule& rule, double scale, const bool* signal) {
  const int64_t chunks = tab.chunk0[tab.n];
  if (chunks == 0) return;
  const unsigned grid = unsigned(std::min<int64_t>(chunks, int64_t(c.multiprocessors()) * 16));
  update_kernel<T, Rule><<<grid, kThreads, 0, c.stream()>>>(tab, rule, scale, signal);
  check_launch("update_kernel");
}

// Runs rule R over every slot: float32 slots with R<float>, float64 slots with R<double>, up to
// kMaxSlots tensors per launch. make.template operator()<T>() builds the rule (host scalars).
template <template <class> class R, class Make>
void update_all(const CudaContext& c, const std::vector<Slot>& slots, double scale, const bool* signal,
                Make&& make) {
  auto run_type = [&]<class T>(DType dt) {
    const R<T> rule = make.template operator()<T>();
    SlotTable<T> tab;
    for (const Slot& p : slots) {
      if (p.dtype != dt || p.numel == 0) continue;
      if (add_slot(tab, p, kChunk)) {
        launch_update(c, tab, rule, scale, signal);
        tab = SlotTable<T>{};
      }
    }
    if (tab.n > 0) launch_update(c, tab, rule, scale, signal);
  };
  run_type.template operator()<float>(DType::kFloat32);
  run_type.template operator()<double>(DType::kFloat64);
}

// ---------------------------------------------------------------- LAMB
// Three launches per table of tensors (chunks of kNormChunk elements): the moments and each chunk's
// partial sums of w^2 and r^2 (part[2 q], part[2 q + 1]); one thread per tensor summing its
// chunks into coef[k] = -lr * trust ratio; the update from this step's moments. skip (*signal
// false): the outputs keep their inputs.
template <class T>
__global__ void lamb_moments_kernel(SlotTable<T> tab, LambRule<T> rule, double grad_scale, const bool* signal,
                                    double* part) {
  const bool skip = signal != nullptr && !*signal;
  const T scale = T(grad_scale);
  const int64_t chunks = tab.chunk0[tab.n];
  for (int64_t q = blockIdx.x; q < chunks; q += gridDim.x) {
    int64_t lo, hi;
    const int k = chunk_of(tab, q, kNormChunk, &lo, &hi);
    double wn = 0, rn = 0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      if (skip) {
        if (tab.s0o[k] != tab.s0[k]) tab.s0o[k][i] = tab.s0[k][i];
        if (tab.s1o[k] != tab.s1[k]) tab.s1o[k][i] = tab.s1[k][i];
        continue;
      }
      const T w = tab.w[k][i];
      T r;
      const Updated<T> u = rule.moments(w, op_mul(tab.g[k][i], scale), tab.s0[k][i], tab.s1[k][i], &r);
      tab.s0o[k][i] = u.s0;
      tab.s1o[k][i] = u.s1;
      wn = op_fma(double(w), double(w), wn);
      rn = op_fma(double(r), double(r), rn);
    }
    wn = red::group_reduce<kThreads>(wn, red::SumOp{});
    rn = red::group_reduce<kThreads>(rn, red::SumOp{});
    if (threadIdx.x == 0) part[2 * q] = wn, part[2 * q + 1] = rn;
  }
}

template <class T>
__global__ void lamb_coef_kernel(SlotTable<T> tab, const double* part, double* coef, double lr, double ratio_min,
                                 double ratio_max) {
  const int k = threadIdx.x;
  if (k >= tab.n) return;
  double w2 = 0, r2 = 0;
  for (int64_t q = tab.chunk0[k]; q < tab.chunk0[k + 1]; ++q) w2 += part[2 * q], r2 += part[2 * q + 1];
  coef[k] = lamb_coef(w2, r2, lr, ratio_min, ratio_max);
}

template <class T>
__global__ void lamb_apply_kernel(SlotTable<T> tab, LambRule<T> rule, const double* coef, const bool* signal) {
  const bool skip = signal != nullptr && !*signal;
  const int64_t chunks = tab.chunk0[tab.n];
  for (int64_t q = blockIdx.x; q < chunks; q += gridDim.x) {
    int64_t lo, hi;
    const int k = chunk_of(tab, q, kNormChunk, &lo, &hi);
    const T a = T(coef[k]);
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      if (skip) {
        if (tab.wo[k] != tab.w[k]) tab.wo[k][i] = tab.w[k][i];
        continue;
      }
      tab.wo[k][i] = rule.apply(a, tab.s0o[k][i], tab.s1o[k][i], tab.w[k][i]);
    }
  }
}

/// Chunks of kNormChunk elements over the slots (LAMB's partial sums): the workspace holds two
/// doubles per chunk, then one per tensor.
int64_t lamb_chunks(const std::vector<Slot>& slots) {
  int64_t n = 0;
  for (const Slot& p : slots) n += (p.numel + kNormChunk - 1) / kNormChunk;
  return n;
}

void run_lamb(const CudaContext& c, const std::vector<Slot>& slots, const shape::OptimizerAttrs& at, float lr, int64_t t,
              double scale, const bool* signal, double* workspace) {
  double* part = workspace;
  double* coef = workspace + 2 * lamb_chunks(slots);
  auto run_type = [&]<class T>(DType dt) {
    const LambRule<T> rule = lamb_rule<T>(at, t);
    SlotTable<T> tab;
    auto launch = [&] {
      const int64_t chunks = tab.chunk0[tab.n];
      if (chunks > 0) {
        const unsigned grid = unsigned(std::min<int64_t>(chunks, int64_t(c.multiprocessors()) * 16));
        lamb_moments_kernel<T><<<grid, kThreads, 0, c.stream()>>>(tab, rule, scale, signal, part);
        check_launch("lamb_moments_kernel");
        lamb_coef_kernel<T><<<1, kMaxSlots, 0, c.stream()>>>(tab, part, coef, double(lr), at.ratio_min, at.ratio_max);
        check_launch("lamb_coef_kernel");
        lamb_apply_kernel<T><<<grid, kThreads, 0, c.stream()>>>(tab, rule, coef, signal);
        check_launch("lamb_apply_kernel");
      }
      part += 2 * chunks;
      coef += tab.n;
      tab = SlotTable<T>{};
    };
    for (const Slot& p : slots) {
      if (p.dtype != dt || p.numel == 0) continue;
      if (add_slot(tab, p, kNormChunk)) launch();
    }
    if (tab.n > 0) launch();
  };
  run_type.template operator()<float>(DType::kFloat32);
  run_type.template operator()<double>(DType::kFloat64);
}

// ---------------------------------------------------------------- com.onnxtrain optimizers
class OptimizerKernel final : public Kernel {
 public:
  OptimizerKernel(const KernelInfo& info, const ops::OptimizerSpec& spec)
      : algo_(spec.algorithm), at_(shape::read_optimizer_attrs(info, spec)) {}

  void prepare(PrepareContext& ctx) override {
    n_ = shape::check_optimizer_inputs(ctx, at_);
    const size_t S = at_.spec->states.size(), first = at_.first;
    slots_.assign(n_, Slot{});
    for (size_t i = 0; i < n_; ++i) {
      for (size_t g = 0; g <= S; ++g) ctx.set_output_inplace(g * n_ + i, shape::updated_input(first, n_, g * n_ + i));
      slots_[i].dtype = ctx.input_dtype(first + i);
      slots_[i].numel = shape_numel(ctx.input_shape(first + i));
    }
    if (algo_ == Algo::kLamb) ctx.request_workspace(size_t(2 * lamb_chunks(slots_) + int64_t(n_)) * sizeof(double));
    ctx.set_nondeterministic();  // updates state: never folded
  }

  void run(RunContext& ctx) override {
    const float lr = *ctx.input(kOptimizerLrInput).data<float>();          // host input
    const int64_t t = *ctx.input(kOptimizerStepInput).data<int64_t>();     // host input
    shape::check_optimizer_step(ctx, lr, t);
    const double scale =  // host input (the operator table's row)
        ctx.has_input(kOptimizerGradScaleInput) ? *ctx.input(kOptimizerGradScaleInput).data<double>() : 1.0;
    const bool* signal =
        at_.gated() ? static_cast<const bool*>(ctx.input(kOptimizerUpdateSignalInput).raw_data()) : nullptr;  // device
    const size_t first = at_.first, S = at_.spec->states.size();
    for (size_t i = 0; i < n_; ++i) {
      Slot& p = slots_[i];
      p.w = ctx.input(first + i).raw_data();
      p.wo = ctx.output(i).raw_data();
      p.g = ctx.input(first + n_ + i).raw_data();
      for (size_t s = 0; s < S; ++s) {
        p.s[s] = ctx.input(first + (2 + s) * n_ + i).raw_data();
        p.so[s] = ctx.output((1 + s) * n_ + i).raw_data();
      }
    }
    const CudaContext& c = CudaContext::of(ctx);
    switch (algo_) {
      case Algo::kSgd:
        update_all<SgdRule>(c, slots_, scale, signal, [&]<class T>() { return sgd_rule<T>(at_, lr); });
        break;
      case Algo::kMomentum:
        update_all<MomentumRule>(c, slots_, scale, signal, [&]<class T>() { return momentum_rule<T>(at_, lr, t); });
        break;
      case Algo::kAdam:
      case Algo::kAdamW:
        update_all<AdamRule>(c, slots_, scale, signal,
                             [&]<class T>() { return adam_rule<T>(at_, lr, t, algo_ == Algo::kAdamW); });
        break;
      case Algo::kAdagrad:
        update_all<AdagradRule>(c, slots_, scale, signal, [&]<class T>() { return adagrad_rule<T>(at_, lr, t); });
        break;
      case Algo::kLamb:
        run_lamb(c, slots_, at_, lr, t, scale, signal, static_cast<double*>(ctx.workspace()));
        break;
    }
  }

 private:
  Algo algo_;
  shape::OptimizerAttrs at_;
  size_t n_ = 0;
  std::vector<Slot> slots_;  // pointers filled per run
};

// ---------------------------------------------------------------- AccumulateGradients
class AccumulateGradientsKernel final : public Kernel {
 public:
  explicit AccumulateGradientsKernel(const KernelInfo& info) { shape::check_accumulate_gradients_attrs(info); }
  void prepare(PrepareContext& ctx) override {
    n_ = shape::check_accumulate_gradients(ctx);
    slots_.assign(n_, Slot{});
    for (size_t i = 0; i < n_; ++i) {
      ctx.set_output_inplace(i, shape::updated_input(1, n_, i));
      slots_[i].dtype = ctx.input_dtype(1 + i);
      slots_[i].numel = shape_numel(ctx.input_shape(1 + i));
    }
    ctx.set_nondeterministic();  // updates state: never folded
  }
  void run(RunContext& ctx) override {
    const bool reset = *ctx.input(0).data<bool>();  // host input
    for (size_t i = 0; i < n_; ++i) {
      slots_[i].w = ctx.input(1 + i).raw_data();
      slots_[i].g = ctx.input(1 + n_ + i).raw_data();
      slots_[i].wo = ctx.output(i).raw_data();
    }
    update_all<AccumulateRule>(CudaContext::of(ctx), slots_, 1.0, nullptr,
                               [&]<class T>() { return AccumulateRule<T>{.reset = reset}; });
  }

 private:
  size_t n_ = 0;
  std::vector<Slot> slots_;
};

// ---------------------------------------------------------------- sums of squares (norms)
// Tensor k of a launch: chunks [chunk0[k], chunk0[k + 1]) of kNormChunk elements; float32 or
// float64 data. partial[first + q] = sum of x^2 over chunk q of the launch (double, fma).
struct NormTable {
  int n = 0;
  int64_t first = 0;  // index of the launch's first chunk in the partial sums
  int64_t chunk0[kMaxSlots + 1] = {};
  int64_t numel[kMaxSlots] = {};
  const void* p[kMaxSlots] = {};
  bool dbl[kMaxSlots] = {};
};

/// Sum of v over the block's threads (blockDim.x == kThreads); valid in thread 0.
__device__ double block_sum(double v) {
  __shared__ double warp_sums[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // warp_sums may still be read from a previous call
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = 0;
  if (warp == 0) {
    v = lane < kThreads / 32 ? warp_sums[lane] : 0.0;
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  }
  return v;
}

__global__ void sum_squares_kernel(NormTable tab, double* partial) {
  const int64_t chunks = tab.chunk0[tab.n];
  for (int64_t q = blockIdx.x; q < chunks; q += gridDim.x) {
    int64_t lo, hi;
    const int k = chunk_of(tab, q, kNormChunk, &lo, &hi);
    double s = 0;
    if (tab.dbl[k]) {
      const double* x = static_cast<const double*>(tab.p[k]);
      for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) s = fma(x[i], x[i], s);
    } else {
      const float* x = static_cast<const float*>(tab.p[k]);
      for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        const double v = double(x[i]);
        s = fma(v, v, s);
      }
    }
    s = block_sum(s);
    if (threadIdx.x == 0) partial[tab.first + q] = s;
  }
}

// One block: total = the partial sums added in a fixed order; then the outputs.
//   mode 0 (GlobalNormClip): out0 = scale, out1 (optional) = norm.
//   mode 1 (LossScaleCheck): out0 = grad_scale, flag = all finite.
__global__ void finish_norm_kernel(const double* partial, int64_t count, int mode, double max_norm, double loss_scale,
                                   double* out0, double* out1, bool* flag) {
  double s = 0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) s += partial[j];
  s = block_sum(s);
  if (threadIdx.x != 0) return;
  if (mode == 0) {
    const double norm = sqrt(s);
    const double coef = max_norm / (norm + 1e-6);
    *out0 = coef < 1.0 ? coef : 1.0;
    if (out1) *out1 = norm;
  } else {
    const bool finite = isfinite(s);
    double scale = 1.0 / loss_scale;
    if (finite && max_norm > 0) {
      const double coef = max_norm / (sqrt(s) / loss_scale + 1e-6);
      if (coef < 1.0) scale *= coef;
    }
    *out0 = finite ? scale : 0.0;
    *flag = finite;
  }
}

// Sum-of-squares geometry of inputs [first, num_inputs): chunks per tensor.
struct NormPlan {
  std::vector<DType> dtype;
  std::vector<int64_t> numel;
  int64_t chunks = 0;

  void init(const PrepareContext& ctx, size_t first) {
    dtype.clear();
    numel.clear();
    chunks = 0;
    for (size_t i = first; i < ctx.num_inputs(); ++i) {
      dtype.push_back(ctx.input_dtype(i));
      numel.push_back(shape_numel(ctx.input_shape(i)));
      chunks += (numel.back() + kNormChunk - 1) / kNormChunk;
    }
  }
  size_t workspace() const { return size_t(std::max<int64_t>(chunks, 1)) * sizeof(double); }

  /// Writes the partial sums of inputs first.. into the workspace, then runs finish_norm_kernel.
  void run(RunContext& ctx, size_t first, int mode, double max_norm, double loss_scale, double* out0, double* out1,
           bool* flag) const {
    const CudaContext& c = CudaContext::of(ctx);
    double* partial = static_cast<double*>(ctx.workspace());
    NormTable tab;
    int64_t done = 0;
    auto launch = [&]() {
      const int64_t n = tab.chunk0[tab.n];
      if (n > 0) {
        const unsigned grid = unsigned(std::min<int64_t>(n, int64_t(c.multiprocessors()) * 16));
        sum_squares_kernel<<<grid, kThreads, 0, c.stream()>>>(tab, partial);
        check_launch("sum_squares_kernel");
      }
      done += n;
      tab = NormTable{};
      tab.first = done;
    };
    for (size_t k = 0; k < dtype.size(); ++k) {
      if (numel[k] == 0) continue;
      const int j = tab.n;
      tab.numel[j] = numel[k];
      tab.chunk0[j + 1] = tab.chunk0[j] + (numel[k] + kNormChunk - 1) / kNormChunk;
      tab.p[j] = ctx.input(first + k).raw_data();
      tab.dbl[j] = dtype[k] == DType::kFloat64;
      if (++tab.n == kMaxSlots) launch();
    }
    if (tab.n > 0) launch();
    finish_norm_kernel<<<1, kThreads, 0, c.stream()>>>(partial, done, mode, max_norm, loss_scale, out0, out1, flag);
    check_launch("finish_norm_kernel");
  }
};

// ---------------------------------------------------------------- GlobalNormClip
class GlobalNormClipKernel final : public Kernel {
 public:
  explicit GlobalNormClipKernel(const KernelInfo& info) : max_norm_(shape::read_global_norm_clip_max_norm(info)) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_global_norm_clip(ctx);
    plan_.init(ctx, 0);
    ctx.set_output(0, DType::kFloat64, {1});
    if (ctx.has_output(1)) ctx.set_output(1, DType::kFloat64, {1});
    ctx.request_workspace(plan_.workspace());
  }
  void run(RunContext& ctx) override {
    // Outputs are device memory: raw pointers (data<T>() is for host memory).
    double* norm = ctx.has_output(1) ? static_cast<double*>(ctx.output(1).raw_data()) : nullptr;
    plan_.run(ctx, 0, 0, double(max_norm_), 1.0, static_cast<double*>(ctx.output(0).raw_data()), norm, nullptr);
  }

 private:
  float max_norm_ = 0;
  NormPlan plan_;
};

// ---------------------------------------------------------------- LossScaleCheck
class LossScaleCheckKernel final : public Kernel {
 public:
  explicit LossScaleCheckKernel(const KernelInfo& info) : max_norm_(shape::read_loss_scale_max_norm(info)) {}
  void prepare(PrepareContext& ctx) override {
    shape::check_loss_scale_check(ctx);
    plan_.init(ctx, 1);
    ctx.set_output(0, DType::kFloat64, {1});
    ctx.set_output(1, DType::kBool, {1});
    ctx.request_workspace(plan_.workspace());
    ctx.set_nondeterministic();  // depends on the step's gradients: never folded
  }
  void run(RunContext& ctx) override {
    const double ls = double(*ctx.input(0).data<float>());  // host input
    shape::check_loss_scale(ctx, ls);
    plan_.run(ctx, 1, 1, double(max_norm_), ls, static_cast<double*>(ctx.output(0).raw_data()), nullptr,
              static_cast<bool*>(ctx.output(1).raw_data()));
  }

 private:
  float max_norm_ = 0;
  NormPlan plan_;
};

}  // namespace

void register_training(KernelRegistry& r) {
  // Host inputs (as the operator table's rows say): lr, step and grad_scale (optimizers), reset
  // (AccumulateGradients), loss_scale (LossScaleCheck).
  for (const ops::OptimizerSpec& spec : ops::optimizer_specs()) {
    r.add(
        ops::kDomain, spec.name, ops::kOpset, kMaxOpsetAll,
        [&spec](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<OptimizerKernel>(i, spec); },
        {kOptimizerLrInput, kOptimizerStepInput, kOptimizerGradScaleInput});
  }
  r.add(
      ops::kDomain, ops::kAccumulateGradients, ops::kOpset, kMaxOpsetAll,
      [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<AccumulateGradientsKernel>(i); },
      {0});
  r.add(
      ops::kDomain, ops::kGlobalNormClip, ops::kOpset, kMaxOpsetAll,
      [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<GlobalNormClipKernel>(i); });
  r.add(
      ops::kDomain, ops::kLossScaleCheck, ops::kOpset, kMaxOpsetAll,
      [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<LossScaleCheckKernel>(i); }, {0});
}

}  // namespace onnxtrain::kernels::cuda
