// Recurrent operators: RNN, GRU, LSTM (opsets 1-13; 14+ adds `layout`). Forward only.
//   X [seq, batch, in] (layout 1: [batch, seq, in])     G gates: RNN 1 (i), GRU 3 (zrh), LSTM 4 (iofc)
//   W [dirs, G*H, in]   R [dirs, G*H, H]   B [dirs, 2*G*H] (Wb then Rb)   P [dirs, 3H] (iof, LSTM)
//   sequence_lens [batch]   initial_h, initial_c [dirs, batch, H] (layout 1: [batch, dirs, H])
//   Y [seq, dirs, batch, H] (layout 1: [batch, seq, dirs, H])   Y_h, Y_c: like initial_h
// Per direction one gemm projects every time step (Xp = X·W^T, [seq*batch, G*H]); each step adds
// H·R^T with one gemm (GRU without linear_before_reset: a second one on r⊙H) and applies the gates
// row by row:
//   RNN : H = f(Xp + H·R^T + Wb + Rb)
//   GRU : z = f(Xp_z + H·Rz^T + bz), r = f(Xp_r + H·Rr^T + br),
//         h = g(Xp_h + (r⊙H)·Rh^T + Rbh + Wbh)    (linear_before_reset: g(Xp_h + r⊙(H·Rh^T + Rbh) + Wbh))
//         H = (1 - z)⊙h + z⊙H
//   LSTM: i = f(.. + Pi⊙C), f = f(.. + Pf⊙C) (input_forget: 1 - i), c = g(..), C = f⊙C + i⊙c,
//         o = f(.. + Po⊙C), H = o⊙h(C)
// `clip` bounds every activation's input. sequence_lens: a batch entry stops at its length; Y is
// zero past it, Y_h/Y_c hold its last state; the reverse direction starts at the entry's own last
// step. An entry of length 0 keeps its initial state.
// Threads: the hidden units are split into one chunk per thread; a step's gemm and gate math for a
// chunk touch only its units, so each step is one parallel region (GRU without
// linear_before_reset: two). float32 recurrence weights are packed once per direction (oneDNN
// matmul); float32 sigmoid/tanh are AVX2 approximations (~1e-7 relative, tested against libm).
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/common.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/registry.h"
#include "kernels/shape/rnn.h"
#include "ops/onnxtrain_ops.h"

namespace onnxtrain::kernels::cpu {

// ---------------------------------------------------------------- float32 vector math (AVX2)
// sigmoid through vec_math's exp8 (x below -88.7 gives exactly 0 rather than a denormal).
static inline __m256 sigmoid_avx2(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.f);
  return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

// tanh: odd rational minimax approximation of degree 13/6 on [-7.9053, 7.9053] (where float tanh
// reaches ±1); keeps relative accuracy near 0, unlike 1 - 2/(e^2x + 1).
static inline __m256 tanh_avx2(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(7.90531110763549805f), x);
  x = _mm256_max_ps(_mm256_set1_ps(-7.90531110763549805f), x);
  const __m256 x2 = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-2.76076847742355e-16f);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.00018790482477e-13f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-8.60467152213735e-11f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(5.12229709037114e-08f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(1.48572235717979e-05f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(6.37261928875436e-04f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(4.89352455891786e-03f));
  p = _mm256_mul_ps(p, x);
  __m256 q = _mm256_set1_ps(1.19825839466702e-06f);
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(1.18534705686654e-04f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(2.26843463243900e-03f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(4.89352518554385e-03f));
  return _mm256_div_ps(p, q);
}

// x[i] = F(x[i]) eight lanes at a time; the tail goes through a padded copy.
template <__m256 (*F)(__m256)>
static void map_avx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, F(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float tail[8] = {0};
    std::memcpy(tail, x + i, size_t(n - i) * sizeof(float));
    _mm256_store_ps(tail, F(_mm256_load_ps(tail)));
    std::memcpy(x + i, tail, size_t(n - i) * sizeof(float));
  }
}

// Test hooks (tests/cpp/test_rnn.cpp checks the approximations against libm).
void rnn_test_sigmoid_f32(float* x, int64_t n) { map_avx2<sigmoid_avx2>(x, n); }
void rnn_test_tanh_f32(float* x, int64_t n) { map_avx2<tanh_avx2>(x, n); }

namespace {

// ---------------------------------------------------------------- activations
// An activation (kind, alpha, beta: shape::RnnConfig parses them) with its math.
struct Activation : shape::RnnActivation {
  template <class T>
  static T sigmoid(T v) {
    return T(1) / (T(1) + std::exp(-v));
  }

  /// x[i] = act(x[i]) for i < n.
  template <class T>
  void apply(T* x, int64_t n) const {
    const T a = T(alpha), b = T(beta);
    switch (kind) {
      case Kind::kSigmoid:
        if constexpr (std::is_same_v<T, float>) return map_avx2<sigmoid_avx2>(x, n);
        for (int64_t i = 0; i < n; ++i) x[i] = sigmoid(x[i]);
        return;
      case Kind::kTanh:
        if constexpr (std::is_same_v<T, float>) return map_avx2<tanh_avx2>(x, n);
        for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
        return;
      case Kind::kRelu:
        for (int64_t i = 0; i < n; ++i) x[i] = x[i] > T(0) ? x[i] : T(0);
        return;
      case Kind::kAffine:
        for (int64_t i = 0; i < n; ++i) x[i] = a * x[i] + b;
        return;
      case Kind::kLeakyRelu:
        for (int64_t i = 0; i < n; ++i) x[i] = x[i] >= T(0) ? x[i] : a * x[i];
        return;
      case Kind::kThresholdedRelu:
        for (int64_t i = 0; i < n; ++i) x[i] = x[i] > a ? x[i] : T(0);
        return;
      case Kind::kScaledTanh:
        for (int64_t i = 0; i < n; ++i) x[i] = a * std::tanh(b * x[i]);
        return;
      case Kind::kHardSigmoid:
        for (int64_t i = 0; i < n; ++i) x[i] = std::min(T(1), std::max(T(0), a * x[i] + b));
        return;
      case Kind::kElu:
        for (int64_t i = 0; i < n; ++i) x[i] = x[i] >= T(0) ? x[i] : a * (std::exp(x[i]) - T(1));
        return;
      case Kind::kSoftsign:
        for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (T(1) + std::abs(x[i]));
        return;
      case Kind::kSoftplus:
        for (int64_t i = 0; i < n; ++i) x[i] = x[i] > T(30) ? x[i] : std::log1p(std::exp(x[i]));
        return;
    }
  }

  /// Training: y[i] = act(clip(x[i])) and d[i] = act'(clip(x[i])), zero where the clip (0: none)
  /// cut x[i]. Sigmoid and tanh go through apply() (the forward's own approximations).
  template <class T>
  void grad(const T* x, T* y, T* d, int64_t n, T clip) const {
    if (clip > T(0)) clip_copy(x, y, n, clip);
    else std::memcpy(y, x, size_t(n) * sizeof(T));
    const T a = T(alpha), b = T(beta), one(1), zero(0);
    switch (kind) {
      case Kind::kSigmoid:
        apply(y, n);
        for (int64_t i = 0; i < n; ++i) d[i] = y[i] * (one - y[i]);
        break;
      case Kind::kTanh:
        apply(y, n);
        for (int64_t i = 0; i < n; ++i) d[i] = one - y[i] * y[i];
        break;
      case Kind::kRelu:
        for (int64_t i = 0; i < n; ++i) {
          d[i] = y[i] > zero ? one : zero;
          y[i] = y[i] > zero ? y[i] : zero;
        }
        break;
      case Kind::kAffine:
        for (int64_t i = 0; i < n; ++i) {
          d[i] = a;
          y[i] = a * y[i] + b;
        }
        break;
      case Kind::kLeakyRelu:
        for (int64_t i = 0; i < n; ++i) {
          d[i] = y[i] >= zero ? one : a;
          y[i] = y[i] >= zero ? y[i] : a * y[i];
        }
        break;
      case Kind::kThresholdedRelu:
        for (int64_t i = 0; i < n; ++i) {
          d[i] = y[i] > a ? one : zero;
          y[i] = y[i] > a ? y[i] : zero;
        }
        break;
      case Kind::kScaledTanh:
        for (int64_t i = 0; i < n; ++i) {
          const T t = std::tanh(b * y[i]);
          y[i] = a * t;
          d[i] = a * b * (one - t * t);
        }
        break;
      case Kind::kHardSigmoid:
        for (int64_t i = 0; i < n; ++i) {
          const T z = a * y[i] + b;
          d[i] = z > zero && z < one ? a : zero;
          y[i] = std::min(one, std::max(zero, z));
        }
        break;
      case Kind::kElu:
        for (int64_t i = 0; i < n; ++i) {
          if (y[i] >= zero) {
            d[i] = one;
          } else {
            const T e = std::exp(y[i]);
            y[i] = a * (e - one);
            d[i] = a * e;
          }
        }
        break;
      case Kind::kSoftsign:
        for (int64_t i = 0; i < n; ++i) {
          const T s = one + std::abs(y[i]);
          d[i] = one / (s * s);
          y[i] = y[i] / s;
        }
        break;
      case Kind::kSoftplus:
        for (int64_t i = 0; i < n; ++i) {
          d[i] = sigmoid(y[i]);
          y[i] = y[i] > T(30) ? y[i] : std::log1p(std::exp(y[i]));
        }
        break;
    }
    if (clip > T(0))
      for (int64_t i = 0; i < n; ++i)
        if (std::abs(x[i]) > clip) d[i] = zero;
  }

  template <class T>
  static void clip_copy(const T* x, T* y, int64_t n, T c) {
    for (int64_t i = 0; i < n; ++i) y[i] = std::min(c, std::max(-c, x[i]));
  }
};

template <class T>
void clip_inplace(T* x, int64_t n, T c) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::min(c, std::max(-c, x[i]));
}

// ---------------------------------------------------------------- float32 recurrence gemm
// C[M, N] (+)= A[M, K] · Bt[N, K]^T through a oneDNN matmul whose weights are reordered once per
// direction into oneDNN's blocked layout: the per-step gemm then skips repacking R (measured
// ~25% faster than sgemm for batch-sized M). Scratchpads are the caller's, so that chunks may run
// concurrently.
class PackedGemm {
 public:
  /// False when oneDNN offers no such primitive (the caller falls back to gemm()).
  bool init(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldc, bool accumulate) {
    using md = dnnl::memory::desc;
    const auto f32 = dnnl::memory::data_type::f32;
    try {
      a_ = md({M, K}, f32, {lda, 1});
      c_ = md({M, N}, f32, {ldc, 1});
      const md plain({K, N}, f32, {1, K});
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      if (accumulate) {
        dnnl::post_ops po;
        po.append_sum(1.f);
        attr.set_post_ops(po);
      }
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_, md({K, N}, f32, dnnl::memory::format_tag::any), c_), attr,
                                      engine());
      dnnl::primitive_attr rattr;
      rattr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      dnnl::reorder::primitive_desc rpd(engine(), plain, engine(), pd.weights_desc(), rattr);
      plain_ = plain;
      packed_ = pd.weights_desc();
      matmul_ = dnnl::matmul(pd);
      reorder_ = dnnl::reorder(rpd);
      scratch_bytes_ = std::max(pd.scratchpad_desc().get_size(), rpd.scratchpad_desc().get_size());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }
  size_t packed_bytes() const { return packed_.get_size(); }
  size_t scratch_bytes() const { return scratch_bytes_; }

  void pack(const float* Bt, void* packed, void* scratch) const {
    dnnl::stream st(engine());
    reorder_.execute(st, {{DNNL_ARG_FROM, mem(plain_, const_cast<float*>(Bt))},
                          {DNNL_ARG_TO, mem(packed_, packed)},
                          {DNNL_ARG_SCRATCHPAD, mem(scratch_md(), scratch)}});
    st.wait();
  }
  void run(const float* A, const void* packed, float* C, void* scratch) const {
    dnnl::stream st(engine());
    matmul_.execute(st, {{DNNL_ARG_SRC, mem(a_, const_cast<float*>(A))},
                         {DNNL_ARG_WEIGHTS, mem(packed_, const_cast<void*>(packed))},
                         {DNNL_ARG_DST, mem(c_, C)},
                         {DNNL_ARG_SCRATCHPAD, mem(scratch_md(), scratch)}});
    st.wait();
  }

 private:
  static const dnnl::engine& engine() {
    static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    return eng;
  }
  static dnnl::memory mem(const dnnl::memory::desc& d, void* p) { return dnnl::memory(d, engine(), p); }
  dnnl::memory::desc scratch_md() const {
    return dnnl::memory::desc({int64_t(std::max<size_t>(scratch_bytes_, 1))}, dnnl::memory::data_type::u8,
                              dnnl::memory::format_tag::a);
  }
  dnnl::memory::desc a_, c_, plain_, packed_;
  dnnl::matmul matmul_;
  dnnl::reorder reorder_;
  size_t scratch_bytes_ = 0;
};

// Workspace layout in 64-byte aligned blocks.
struct WorkspaceLayout {
  size_t elem_size, bytes = 0;
  size_t block(size_t n) {
    const size_t at = bytes;
    bytes += (std::max<size_t>(n, 1) + 63) / 64 * 64;
    return at;
  }
  size_t elems(int64_t n) { return block(size_t(std::max<int64_t>(n, 0)) * elem_size); }
};

// Per chunk of hidden units: the float32 recurrence weights packed for oneDNN (main, and h: GRU's
// second gemm without linear_before_reset) and where they and the scratchpad sit.
struct ChunkGemm {
  PackedGemm main, h;
  size_t ws_main = 0, ws_h = 0, ws_scratch = 0;
};

// One ChunkGemm per chunk [bounds[c], bounds[c+1]): init(cg, n) sets its primitives up; none at
// all when one fails (the kernel then uses gemm()). Their buffers are placed in `ws`.
template <class Init>
void make_chunk_gemms(std::vector<ChunkGemm>& gemms, const std::vector<int64_t>& bounds, Init&& init) {
  gemms.clear();
  for (size_t c = 0; c + 1 < bounds.size(); ++c) {
    ChunkGemm cg;
    if (!init(cg, bounds[c + 1] - bounds[c])) {
      gemms.clear();
      return;
    }
    gemms.push_back(std::move(cg));
  }
}
void place_chunk_gemms(std::vector<ChunkGemm>& gemms, WorkspaceLayout& ws) {
  for (ChunkGemm& cg : gemms) {
    cg.ws_main = ws.block(cg.main.packed_bytes());
    cg.ws_h = ws.block(cg.h.packed_bytes());
    cg.ws_scratch = ws.block(std::max(cg.main.scratch_bytes(), cg.h.scratch_bytes()));
  }
}

// ---------------------------------------------------------------- shared configuration
using Cell = shape::RnnCell;

// The shared configuration (attributes, input checks, sizes and output shapes: shape::RnnConfig)
// with the CPU kernels' activations, addressing in X's layout and sequence lengths.
struct RnnConfig : shape::RnnConfig {
  RnnConfig(const KernelInfo& info, Cell cell, bool custom) : shape::RnnConfig(info, cell, custom) {
    for (const shape::RnnActivation& a : activations_) acts_.push_back(Activation{a});
  }

  // Row of (step t, batch entry b) in X's layout: the projected gates, the training reserve and
  // the gate gradients follow it, so that one gemm covers every step.
  int64_t row(int64_t t, int64_t b) const { return layout_ ? b * seq_ + t : t * batch_ + b; }
  // Distance between the rows of consecutive batch entries of one step.
  int64_t row_stride() const { return layout_ ? seq_ : 1; }
  int64_t state_at(int64_t d, int64_t b) const { return layout_ ? (b * dirs_ + d) * H_ : (d * batch_ + b) * H_; }
  int64_t y_at(int64_t t, int64_t d, int64_t b) const {
    return layout_ ? ((b * seq_ + t) * dirs_ + d) * H_ : ((t * dirs_ + d) * batch_ + b) * H_;
  }
  // Reads sequence_lens (validated) into lens_; returns the longest.
  int64_t read_lens(const RunContext& ctx) {
    lens_.assign(size_t(batch_), seq_);
    if (ctx.has_input(kSeqLens)) {
      const Tensor& l = ctx.input(kSeqLens);
      for (int64_t b = 0; b < batch_; ++b) {
        const int64_t v = l.dtype() == DType::kInt32 ? l.data<int32_t>()[b] : l.data<int64_t>()[b];
        if (v < 0 || v > seq_) ctx.fail("sequence_lens[", b, "] = ", v, " is outside [0, ", seq_, "]");
        lens_[size_t(b)] = v;
      }
    }
    int64_t max_len = 0;
    for (int64_t v : lens_) max_len = std::max(max_len, v);
    return max_len;
  }

  // Chunk boundaries over the hidden units: multiples of 8 but the last.
  void chunk_bounds(int64_t chunks, std::vector<int64_t>& b) const {
    b.assign(size_t(chunks + 1), H_);
    for (int64_t c = 0; c < chunks; ++c) b[size_t(c)] = H_ * c / chunks / 8 * 8;
  }

  std::vector<Activation> acts_;  // activations_ with their math
  std::vector<int64_t> lens_;
};

// ---------------------------------------------------------------- the recurrent kernel
// `train` (com.onnxtrain LSTMTrain, GRUTrain, RNNTrain): one more output, the training reserve.
template <Cell C>
class RecurrentKernel final : public Kernel, RnnConfig {
  static constexpr int64_t kGates = shape::rnn_gates(C);
  static constexpr size_t kReserveOut = shape::rnn_reserve_output(C);

 public:
  RecurrentKernel(const KernelInfo& info, bool train = false) : RnnConfig(info, C, train), train_(train) {}

  void prepare(PrepareContext& ctx) override {
    const DType dt = read_shapes(ctx);
    set_forward_outputs(ctx, dt, train_);
    const int64_t gh = kGates * H_;

    // Hidden units are split into chunks, one per thread: a step's gemm and gate math for a chunk
    // touch only its units, so a step is one parallel region. W, R and the biases are permuted so
    // that each chunk's gate columns are contiguous: [chunk][gate][unit of the chunk].
    max_chunks_ = std::max<int64_t>(1, std::min<int64_t>(current_threads(), H_ / kMinChunkUnits));
    // Workspace (64-byte aligned blocks): projected gates for every step, two hidden states (read
    // one, write the other), the cell state, GRU scratch, biases, permuted weights; for float32,
    // per chunk the packed recurrence weights and oneDNN's scratchpad.
    WorkspaceLayout ws{dtype_size(dt)};
    auto elems = [&](int64_t n) { return ws.elems(n); };
    ws_gx_ = elems(seq_ * batch_ * gh);
    ws_h_[0] = elems(batch_ * H_);
    ws_h_[1] = elems(batch_ * H_);
    ws_c_ = elems(C == Cell::kLstm ? batch_ * H_ : 0);
    ws_aux_ = elems(C == Cell::kGru ? (linear_before_reset_ ? batch_ * gh : batch_ * H_) : 0);
    ws_bias_ = elems(2 * gh + H_);
    ws_w_ = elems(max_chunks_ > 1 ? gh * input_ : 0);
    ws_r_ = elems(max_chunks_ > 1 ? gh * H_ : 0);
    chunk_bounds(max_chunks_, bounds_);
    // Prepared again at run time when shapes are only known then: keep the primitives if the
    // shapes did not change.
    const std::vector<int64_t> key = {int64_t(dt), seq_, batch_, input_, H_, max_chunks_};
    if (key != packed_key_) packed_.clear();
    packed_key_ = key;
    if (dt == DType::kFloat32 && seq_ > 0 && batch_ > 0 && packed_.empty()) {
      const int64_t ldg = row_stride() * gh;
      make_chunk_gemms(packed_, bounds_, [&](ChunkGemm& cg, int64_t n) {
        if (C == Cell::kGru && !linear_before_reset_)
          return cg.main.init(batch_, 2 * n, H_, H_, ldg, true) && cg.h.init(batch_, n, H_, H_, ldg, true);
        if (C == Cell::kGru) return cg.main.init(batch_, 3 * n, H_, H_, gh, false);
        return cg.main.init(batch_, kGates * n, H_, H_, ldg, true);
      });
    }
    place_chunk_gemms(packed_, ws);
    ctx.request_workspace(ws.bytes);
  }

  void run(RunContext& ctx) override {
    dispatch<TypeList<float, double>>(ctx.input(kX).dtype(), ctx.node(), [&]<class T>() { run_typed<T>(ctx); });
  }

 private:
  static constexpr int64_t kMinChunkUnits = 32;

  template <class T>
  void run_typed(RunContext& ctx) {
    const int64_t seq = seq_, batch = batch_, H = H_, gh = kGates * H_, dirs = dirs_;
    const int64_t max_len = read_lens(ctx);  // validated before any arithmetic
    // Fewer threads than at prepare time: fewer chunks, plain gemm.
    const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(max_chunks_, ctx.num_threads()));
    if (chunks != int64_t(bounds_.size()) - 1) {
      chunk_bounds(chunks, bounds_);
      packed_.clear();
    }
    const bool packed = std::is_same_v<T, float> && !packed_.empty();

    const T* X = ctx.input(kX).data<T>();
    const T* W = ctx.input(kW).data<T>();
    const T* R = ctx.input(kR).data<T>();
    const T* B = ctx.has_input(kB) ? ctx.input(kB).data<T>() : nullptr;
    const T* H0 = ctx.has_input(kInitH) ? ctx.input(kInitH).data<T>() : nullptr;
    const T* C0 = ctx.has_input(kInitC) ? ctx.input(kInitC).data<T>() : nullptr;
    const T* P = ctx.has_input(kP) ? ctx.input(kP).data<T>() : nullptr;
    auto out_ptr = [&](int i) -> T* {
      return size_t(i) < ctx.num_outputs() && ctx.has_output(size_t(i)) ? ctx.output(size_t(i)).data<T>() : nullptr;
    };
    T* Y = out_ptr(kY);
    T* Yh = out_ptr(kYh);
    T* Yc = C == Cell::kLstm ? out_ptr(kYc) : nullptr;
    T* reserve = train_ ? out_ptr(int(kReserveOut)) : nullptr;

    char* ws = static_cast<char*>(ctx.workspace());
    auto at = [&](size_t offset) { return reinterpret_cast<T*>(ws + offset); };
    T* gx = at(ws_gx_);
    T* cs = at(ws_c_);
    T* aux = at(ws_aux_);
    T* bias = at(ws_bias_);    // [gh] folded biases, natural order
    T* biasp = bias + gh;      // [gh] the same, permuted
    T* rbh = biasp + gh;       // [H] GRU's Rbh under linear_before_reset
    const T clip = T(clip_);

    for (int64_t d = 0; d < dirs; ++d) {
      const bool reverse = reverse_only_ || d == 1;
      const Activation* act = &acts_[size_t(d) * acts_.size() / size_t(dirs)];
      const T* Pd = P ? P + d * 3 * H : nullptr;
      // Training reserve of this direction (see RnnConfig::reserve_per_dir).
      T* sv_pre = reserve ? reserve + d * reserve_per_dir() : nullptr;
      T* sv_h = sv_pre ? sv_pre + seq * batch * gh : nullptr;
      T* sv_x = sv_h ? sv_h + seq * batch * H : nullptr;  // LSTM: cell state; GRU: H·Rh^T + Rbh
      // Reserve pointers of row (t, b) at unit u0 (null when not training).
      auto sv_at = [&](T* base, int64_t t, int64_t b, int64_t width, int64_t u0) -> T* {
        return base ? base + row(t, b) * width + u0 : nullptr;
      };
      // Biases: Wb + Rb, except GRU's Rbh under linear_before_reset (it is multiplied by r).
      const bool split_rbh = C == Cell::kGru && linear_before_reset_;
      const T* Wb = B ? B + d * 2 * gh : nullptr;
      const T* Rb = B ? Wb + gh : nullptr;
      for (int64_t j = 0; j < gh; ++j) bias[j] = B ? (split_rbh && j >= 2 * H ? Wb[j] : Wb[j] + Rb[j]) : T(0);
      if (split_rbh)
        for (int64_t j = 0; j < H; ++j) rbh[j] = B ? Rb[2 * H + j] : T(0);
      // Permuted W, R (rows) and biases: chunk c, gate g, unit k <- row g*H + bounds[c] + k.
      const T* Wd = W + d * gh * input_;
      const T* Rd = R + d * gh * H;
      if (chunks > 1) {
        T* wp = at(ws_w_);
        T* rp = at(ws_r_);
        for (int64_t c = 0; c < chunks; ++c) {
          const int64_t u0 = bounds_[size_t(c)], n = bounds_[size_t(c + 1)] - u0;
          for (int64_t g = 0; g < kGates; ++g) {
            const int64_t to = kGates * u0 + g * n, from = g * H + u0;
            std::memcpy(wp + to * input_, Wd + from * input_, size_t(n * input_) * sizeof(T));
            std::memcpy(rp + to * H, Rd + from * H, size_t(n * H) * sizeof(T));
            std::memcpy(biasp + to, bias + from, size_t(n) * sizeof(T));
          }
        }
        Wd = wp;
        Rd = rp;
      } else {
        std::memcpy(biasp, bias, size_t(gh) * sizeof(T));
      }
      if constexpr (std::is_same_v<T, float>)
        if (packed)
          for (int64_t c = 0; c < chunks; ++c) {
            const ChunkGemm& cg = packed_[size_t(c)];
            const int64_t col0 = kGates * bounds_[size_t(c)], n = bounds_[size_t(c) + 1] - bounds_[size_t(c)];
            cg.main.pack(Rd + col0 * H, ws + cg.ws_main, ws + cg.ws_scratch);
            if (C == Cell::kGru && !linear_before_reset_) cg.h.pack(Rd + (col0 + 2 * n) * H, ws + cg.ws_h, ws + cg.ws_scratch);
          }
      // Input projection of every step at once; rows follow X's layout.
      gemm(false, true, seq * batch, gh, input_, T(1), X, input_, Wd, input_, T(0), gx, gh);
      auto state_at = [&](int64_t b) { return RnnConfig::state_at(d, b); };
      T* hp = at(ws_h_[0]);  // state read by this step
      T* hn = at(ws_h_[1]);  // state written by this step
      for (int64_t b = 0; b < batch; ++b) {
        if (H0) std::memcpy(hp + b * H, H0 + state_at(b), size_t(H) * sizeof(T));
        else std::fill(hp + b * H, hp + (b + 1) * H, T(0));
        if constexpr (C == Cell::kLstm) {
          if (C0) std::memcpy(cs + b * H, C0 + state_at(b), size_t(H) * sizeof(T));
          else std::fill(cs + b * H, cs + (b + 1) * H, T(0));
        }
      }
      bool h_zero = H0 == nullptr;  // skip H·R^T while the hidden state is still all zeros
      // Gates of step t: row (t, b) of gx; rows of one step are ldg apart.
      const int64_t ldg = layout_ ? seq * gh : gh;
      for (int64_t s = 0; s < seq; ++s) {
        const int64_t t = reverse ? seq - 1 - s : s;
        T* gt = gx + (layout_ ? t * gh : t * batch * gh);
        auto y_row = [&](int64_t b) -> T* { return Y + y_at(t, d, b); };
        if (t >= max_len) {  // every entry has ended: Y is zero here
          for (int64_t b = 0; b < batch; ++b) {
            if (Y) std::fill(y_row(b), y_row(b) + H, T(0));
            if (sv_h) std::fill(sv_at(sv_h, t, b, H, 0), sv_at(sv_h, t, b, H, H), T(0));
          }
          continue;
        }
        auto active = [&](int64_t b) { return t < lens_[size_t(b)]; };
        // Units [u0, u0+n) of row b after the step: Y gets the new state (zero for entries that
        // have ended, whose state carries over).
        auto finish = [&](int64_t b, int64_t u0, int64_t n) {
          const T* src = hn + b * H + u0;
          if (!active(b)) std::memcpy(hn + b * H + u0, hp + b * H + u0, size_t(n) * sizeof(T));
          if (!Y) return;
          if (active(b)) std::memcpy(y_row(b) + u0, src, size_t(n) * sizeof(T));
          else std::fill(y_row(b) + u0, y_row(b) + u0 + n, T(0));
        };
        // Runs f(c, u0, n, col0) for every chunk c in parallel: units [u0, u0+n), first gate
        // column col0.
        auto for_chunks = [&](auto&& f) {
          parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
            for (int64_t c = c0; c < c1; ++c) {
              const int64_t u0 = bounds_[size_t(c)];
              f(c, u0, bounds_[size_t(c + 1)] - u0, kGates * u0);
            }
          });
        };
        // Training: the states this step starts from, units [u0, u0+n) of every row.
        auto save_states = [&](int64_t u0, int64_t n) {
          if (!sv_h) return;
          for (int64_t b = 0; b < batch; ++b) {
            std::memcpy(sv_at(sv_h, t, b, H, u0), hp + b * H + u0, size_t(n) * sizeof(T));
            if (C == Cell::kLstm) std::memcpy(sv_at(sv_x, t, b, H, u0), cs + b * H + u0, size_t(n) * sizeof(T));
          }
        };
        // out[:, col0 : col0+width] (+)= A·Rd[col0 : col0+width]^T for chunk c (h_gate: GRU's
        // second gemm).
        auto recur = [&](int64_t c, bool h_gate, const T* A, int64_t col0, int64_t width, T* out, int64_t ldo, T beta) {
          if constexpr (std::is_same_v<T, float>)
            if (packed) {
              const ChunkGemm& cg = packed_[size_t(c)];
              (h_gate ? cg.h : cg.main).run(A, ws + (h_gate ? cg.ws_h : cg.ws_main), out + col0, ws + cg.ws_scratch);
              return;
            }
          gemm(false, true, batch, width, H, T(1), A, H, Rd + col0 * H, H, beta, out + col0, ldo);
        };

        if constexpr (C == Cell::kGru) {
          if (linear_before_reset_) {
            // aux = H·R^T (all three gates); r multiplies the h part, so it stays apart from gx.
            for_chunks([&](int64_t c, int64_t u0, int64_t n, int64_t col0) {
              save_states(u0, n);
              if (h_zero)
                for (int64_t b = 0; b < batch; ++b) std::fill(aux + b * gh + col0, aux + b * gh + col0 + 3 * n, T(0));
              else recur(c, false, hp, col0, 3 * n, aux, gh, T(0));
              for (int64_t b = 0; b < batch; ++b) {
                if (active(b))
                  gru_lbr_cell<T>(gt + b * ldg + col0, aux + b * gh + col0, n, hp + b * H + u0, hn + b * H + u0,
                                  biasp + col0, rbh + u0, act, clip, sv_at(sv_pre, t, b, gh, u0),
                                  sv_at(sv_x, t, b, H, u0));
                finish(b, u0, n);
              }
            });
          } else {
            // z and r first; aux = r⊙H (every unit) feeds the h gate's gemm.
            for_chunks([&](int64_t c, int64_t u0, int64_t n, int64_t col0) {
              save_states(u0, n);
              if (!h_zero) recur(c, false, hp, col0, 2 * n, gt, ldg, T(1));
              for (int64_t b = 0; b < batch; ++b) {
                T* rh = aux + b * H + u0;
                if (!active(b)) {
                  std::fill(rh, rh + n, T(0));
                  continue;
                }
                T* g = gt + b * ldg + col0;
                const T* h = hp + b * H + u0;
                for (int64_t j = 0; j < 2 * n; ++j) g[j] += biasp[col0 + j];
                save_gates(sv_at(sv_pre, t, b, gh, u0), g, n, 2);
                if (clip_ > 0.f) clip_inplace(g, 2 * n, clip);
                act[0].apply(g, 2 * n);
                for (int64_t j = 0; j < n; ++j) rh[j] = g[n + j] * h[j];
              }
            });
            for_chunks([&](int64_t c, int64_t u0, int64_t n, int64_t col0) {
              if (!h_zero) recur(c, true, aux, col0 + 2 * n, n, gt, ldg, T(1));
              for (int64_t b = 0; b < batch; ++b) {
                if (active(b)) {
                  const T* g = gt + b * ldg + col0;
                  const T* h = hp + b * H + u0;
                  T* hh = gt + b * ldg + col0 + 2 * n;
                  T* out = hn + b * H + u0;
                  for (int64_t j = 0; j < n; ++j) hh[j] += biasp[col0 + 2 * n + j];
                  if (sv_pre) std::memcpy(sv_at(sv_pre, t, b, gh, u0 + 2 * H), hh, size_t(n) * sizeof(T));
                  if (clip_ > 0.f) clip_inplace(hh, n, clip);
                  act[1].apply(hh, n);
                  for (int64_t j = 0; j < n; ++j) out[j] = (T(1) - g[j]) * hh[j] + g[j] * h[j];
                }
                finish(b, u0, n);
              }
            });
          }
        } else {
          for_chunks([&](int64_t c, int64_t u0, int64_t n, int64_t col0) {
            save_states(u0, n);
            if (!h_zero) recur(c, false, hp, col0, kGates * n, gt, ldg, T(1));
            for (int64_t b = 0; b < batch; ++b) {
              if (active(b)) {
                T* g = gt + b * ldg + col0;
                T* sv = sv_at(sv_pre, t, b, gh, u0);
                if constexpr (C == Cell::kLstm)
                  lstm_cell<T>(g, n, cs + b * H + u0, hn + b * H + u0, biasp + col0, Pd ? Pd + u0 : nullptr, act, clip,
                               sv);
                else
                  rnn_cell<T>(g, n, hn + b * H + u0, biasp + col0, act, clip, sv);
              }
              finish(b, u0, n);
            }
          });
        }
        std::swap(hp, hn);
        h_zero = false;
      }
      for (int64_t b = 0; b < batch; ++b) {
        if (Yh) std::memcpy(Yh + state_at(b), hp + b * H, size_t(H) * sizeof(T));
        if (Yc) std::memcpy(Yc + state_at(b), cs + b * H, size_t(H) * sizeof(T));
      }
    }
  }

  // One batch row, n units of one step. g: their gates, [gate][n], holding X·W^T + H·R^T
  // (bias not yet added); overwritten.
  // Training: copies `gates` gates of n units (g: [gate][n]) to the reserve row sv (gate stride H).
  template <class T>
  void save_gates(T* sv, const T* g, int64_t n, int64_t gates) const {
    if (sv)
      for (int64_t k = 0; k < gates; ++k) std::memcpy(sv + k * H_, g + k * n, size_t(n) * sizeof(T));
  }

  // sv: the reserve row of these units (pre-activations saved there), or null.
  template <class T>
  void rnn_cell(T* g, int64_t n, T* h_out, const T* bias, const Activation* act, T clip, T* sv) const {
    for (int64_t j = 0; j < n; ++j) g[j] += bias[j];
    save_gates(sv, g, n, 1);
    if (clip_ > 0.f) clip_inplace(g, n, clip);
    act[0].apply(g, n);
    std::memcpy(h_out, g, size_t(n) * sizeof(T));
  }

  // g: [z r h] = X·W^T (the h part without any R term); hr: H·R^T for [z r h].
  // sv_hr: the reserve's H·Rh^T + Rbh of these units, or null.
  template <class T>
  void gru_lbr_cell(T* g, const T* hr, int64_t n, const T* h, T* h_out, const T* bias, const T* rbh,
                    const Activation* act, T clip, T* sv, T* sv_hr) const {
    for (int64_t j = 0; j < 2 * n; ++j) g[j] += hr[j] + bias[j];
    save_gates(sv, g, n, 2);
    if (sv_hr)
      for (int64_t j = 0; j < n; ++j) sv_hr[j] = hr[2 * n + j] + rbh[j];
    if (clip_ > 0.f) clip_inplace(g, 2 * n, clip);
    act[0].apply(g, 2 * n);
    T* hh = g + 2 * n;
    for (int64_t j = 0; j < n; ++j) hh[j] += bias[2 * n + j] + g[n + j] * (hr[2 * n + j] + rbh[j]);
    if (sv) std::memcpy(sv + 2 * H_, hh, size_t(n) * sizeof(T));
    if (clip_ > 0.f) clip_inplace(hh, n, clip);
    act[1].apply(hh, n);
    for (int64_t j = 0; j < n; ++j) h_out[j] = (T(1) - g[j]) * hh[j] + g[j] * h[j];
  }

  // g: [i o f c]; c: the cell state, updated in place; peep: Pi of the first unit (Po, Pf follow
  // H_ apart), or null.
  template <class T>
  void lstm_cell(T* g, int64_t n, T* c, T* h_out, const T* bias, const T* peep, const Activation* act, T clip,
                 T* sv) const {
    T* gi = g;
    T* go = g + n;
    T* gf = g + 2 * n;
    T* gc = g + 3 * n;
    for (int64_t j = 0; j < 4 * n; ++j) g[j] += bias[j];
    if (peep) {
      for (int64_t j = 0; j < n; ++j) gi[j] += peep[j] * c[j];
      if (!input_forget_)
        for (int64_t j = 0; j < n; ++j) gf[j] += peep[2 * H_ + j] * c[j];
    }
    if (sv) {  // i, f, c now; o once its peephole term is known
      std::memcpy(sv, gi, size_t(n) * sizeof(T));
      std::memcpy(sv + 2 * H_, gf, size_t(n) * sizeof(T));
      std::memcpy(sv + 3 * H_, gc, size_t(n) * sizeof(T));
    }
    if (clip_ > 0.f) {
      clip_inplace(gi, n, clip);
      clip_inplace(gf, 2 * n, clip);  // f and c
    }
    act[0].apply(gi, n);
    if (input_forget_) {
      for (int64_t j = 0; j < n; ++j) gf[j] = T(1) - gi[j];
    } else {
      act[0].apply(gf, n);
    }
    act[1].apply(gc, n);
    for (int64_t j = 0; j < n; ++j) c[j] = gf[j] * c[j] + gi[j] * gc[j];
    if (peep)
      for (int64_t j = 0; j < n; ++j) go[j] += peep[H_ + j] * c[j];
    if (sv) std::memcpy(sv + H_, go, size_t(n) * sizeof(T));
    if (clip_ > 0.f) clip_inplace(go, n, clip);
    act[0].apply(go, n);
    std::memcpy(gc, c, size_t(n) * sizeof(T));
    act[2].apply(gc, n);
    for (int64_t j = 0; j < n; ++j) h_out[j] = go[j] * gc[j];
  }

  bool train_ = false;
  int64_t max_chunks_ = 1;
  std::vector<ChunkGemm> packed_;  // float32; empty: gemm()
  std::vector<int64_t> packed_key_;  // shapes packed_ was made for
  size_t ws_gx_ = 0, ws_h_[2] = {0, 0}, ws_c_ = 0, ws_aux_ = 0, ws_bias_ = 0, ws_w_ = 0, ws_r_ = 0;
  std::vector<int64_t> bounds_;
};

// ---------------------------------------------------------------- backward
// com.onnxtrain LSTMGrad, GRUGrad, RNNGrad: attributes of the forward node (layout at any opset).
// Inputs: the forward's (X, W, R, B, sequence_lens, initial_h[, initial_c, P]), the training
// reserve written by the *Train forward, then dY, dY_h[, dY_c] (absent: zero).
// Outputs: dX, dW, dR, dB, dinitial_h[, dinitial_c, dP]; unnamed ones are not computed.
// Backpropagation through time, per direction, steps in the reverse of the forward's order:
//   dh = dY_t + carry + dG'·R      dG': the previous backward step's pre-activation gradients
//   dG from the cell's derivative, activations recomputed from the saved pre-activations;
//   carry: what reaches the previous state elementwise (GRU: dh⊙z + d(r⊙h)⊙r; an entry past its
//   length passes dh on unchanged). Then one gemm each over every step: dX += dG·W, dW = dG^T·X,
//   dR = dG_R^T·H_prev; dB and dP are column sums.
//   LSTM: C = f⊙Cp + i⊙g, h = o⊙h(C): do = dh⊙h(C), dC = dc + dh⊙o⊙h'(C) + do⊙Po,
//         di = dC⊙g, df = dC⊙Cp, dg = dC⊙i (input_forget: f = 1 - i, di -= dC⊙Cp),
//         dc_prev = dC⊙f + di⊙Pi + df⊙Pf   (d: pre-activation gradients)
//   GRU : h = (1-z)⊙h~ + z⊙hp: dz = dh⊙(hp - h~), dh~ = dh⊙(1-z), carry dh⊙z; r: d(r⊙hp) =
//         dh~·Rh, dr = d(r⊙hp)⊙hp, carry += d(r⊙hp)⊙r (second gemm per step); linear_before_reset:
//         dr = dh~⊙(hp·Rh^T + Rbh) and the h rows of dG_R are dh~⊙r
//   RNN : d = dh⊙f'
// Threads: as in the forward, hidden units are split into chunks, one parallel region per step
// (GRU without linear_before_reset: two); the recurrence weights are transposed and, in float32,
// packed once per direction.
template <Cell C>
class RecurrentGradKernel final : public Kernel, RnnConfig {
  static constexpr int64_t kGates = shape::rnn_gates(C);
  static constexpr shape::RnnGradInputs kIn = shape::rnn_grad_inputs(C);
  static constexpr int64_t kMinChunkUnits = 32;
  static constexpr int64_t kScratch = C == Cell::kLstm ? 11 : C == Cell::kGru ? 6 : 2;  // per unit

 public:
  explicit RecurrentGradKernel(const KernelInfo& info) : RnnConfig(info, C, true) {}

  void prepare(PrepareContext& ctx) override {
    const DType dt = read_shapes(ctx);
    set_grad_outputs(ctx, dt);

    const int64_t gh = kGates * H_;
    const bool lbr = C == Cell::kGru && linear_before_reset_, gru2 = C == Cell::kGru && !linear_before_reset_;
    const int64_t rows = seq_ * batch_, krec = gru2 ? 2 * H_ : gh;
    max_chunks_ = std::max<int64_t>(1, std::min<int64_t>(current_threads(), H_ / kMinChunkUnits));
    WorkspaceLayout ws{dtype_size(dt)};
    auto elems = [&](int64_t n) { return ws.elems(n); };
    ws_dg_ = elems(rows * gh);
    ws_dgr_ = elems(lbr ? rows * gh : 0);
    ws_rh_ = elems(gru2 ? rows * H_ : 0);
    ws_dh_ = elems(batch_ * H_);
    ws_carry_ = elems(batch_ * H_);
    ws_dc_ = elems(C == Cell::kLstm ? batch_ * H_ : 0);
    ws_drh_ = elems(gru2 ? batch_ * H_ : 0);
    ws_rt_ = elems(H_ * krec);
    ws_rt2_ = elems(gru2 ? H_ * H_ : 0);
    ws_dp_ = elems(C == Cell::kLstm ? 3 * H_ : 0);
    ws_wt_ = elems(std::max(input_, H_) * gh);
    ws_scratch_ = elems(kScratch * H_);  // chunk of units [u0, u0+n) uses [kScratch*u0, kScratch*(u0+n))
    chunk_bounds(max_chunks_, bounds_);
    packed_.clear();
    if (dt == DType::kFloat32 && batch_ > 0 && H_ > 0) {
      const int64_t ldg = row_stride() * gh;
      make_chunk_gemms(packed_, bounds_, [&](ChunkGemm& cg, int64_t n) {
        return cg.main.init(batch_, n, krec, ldg, H_, true) && (!gru2 || cg.h.init(batch_, n, H_, ldg, H_, false));
      });
    }
    place_chunk_gemms(packed_, ws);
    ctx.request_workspace(ws.bytes);
  }

  void run(RunContext& ctx) override {
    dispatch<TypeList<float, double>>(ctx.input(kX).dtype(), ctx.node(), [&]<class T>() { run_typed<T>(ctx); });
  }

 private:
  template <class T>
  void run_typed(RunContext& ctx) {
    const int64_t seq = seq_, batch = batch_, H = H_, gh = kGates * H_, dirs = dirs_, I = input_;
    const int64_t rows = seq * batch, ldg = row_stride() * gh;
    const bool lbr = C == Cell::kGru && linear_before_reset_, gru2 = C == Cell::kGru && !linear_before_reset_;
    const int64_t krec = gru2 ? 2 * H : gh;
    const int64_t max_len = read_lens(ctx);
    const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(max_chunks_, ctx.num_threads()));
    if (chunks != int64_t(bounds_.size()) - 1) {
      chunk_bounds(chunks, bounds_);
      packed_.clear();
    }
    const bool packed = std::is_same_v<T, float> && !packed_.empty();

    auto in_ptr = [&](size_t i) -> const T* { return ctx.has_input(i) ? ctx.input(i).data<T>() : nullptr; };
    auto out_ptr = [&](int i) -> T* {
      return size_t(i) < ctx.num_outputs() && ctx.has_output(size_t(i)) ? ctx.output(size_t(i)).data<T>() : nullptr;
    };
    const T *X = in_ptr(kX), *W = in_ptr(kW), *R = in_ptr(kR), *P = C == Cell::kLstm ? in_ptr(kP) : nullptr;
    const T *reserve = in_ptr(kIn.reserve), *dY = in_ptr(kIn.dy), *dYh = in_ptr(kIn.dyh);
    const T* dYc = C == Cell::kLstm ? in_ptr(kIn.dyc) : nullptr;
    T *dX = out_ptr(kDX), *dW = out_ptr(kDW), *dR = out_ptr(kDR), *dB = out_ptr(kDB), *dH0 = out_ptr(kDH0);
    T* dC0 = C == Cell::kLstm ? out_ptr(kDC0) : nullptr;
    T* dP = C == Cell::kLstm ? out_ptr(kDP) : nullptr;

    char* ws = static_cast<char*>(ctx.workspace());
    auto at = [&](size_t offset) { return reinterpret_cast<T*>(ws + offset); };
    T *dg = at(ws_dg_), *dgr = lbr ? at(ws_dgr_) : dg, *rh = at(ws_rh_), *dh = at(ws_dh_), *carry = at(ws_carry_);
    T *dc = at(ws_dc_), *drh = at(ws_drh_), *rt = at(ws_rt_), *rt2 = at(ws_rt2_), *dp = at(ws_dp_);
    T* scratch = at(ws_scratch_);
    T* wt = at(ws_wt_);
    const T clip = T(clip_);

    for (int64_t d = 0; d < dirs; ++d) {
      const bool reverse = reverse_only_ || d == 1;
      const Activation* act = &acts_[size_t(d) * acts_.size() / size_t(dirs)];
      const T* Pd = P ? P + d * 3 * H : nullptr;
      const T* pre = reserve + d * reserve_per_dir();
      const T* hprev = pre + rows * gh;
      const T* extra = hprev + rows * H;  // LSTM: cell state before the step; GRU lbr: H·Rh^T + Rbh
      const T* Wd = W + d * gh * I;
      const T* Rd = R + d * gh * H;
      // Recurrence weights, transposed: rt[u][k] = R[k][u] (k < krec); GRU: rt2[u][k] = Rh[k][u].
      parallel_for(H, 16, [&](int64_t u0, int64_t u1) {
        for (int64_t u = u0; u < u1; ++u) {
          for (int64_t k = 0; k < krec; ++k) rt[u * krec + k] = Rd[k * H + u];
          if (gru2)
            for (int64_t k = 0; k < H; ++k) rt2[u * H + k] = Rd[(2 * H + k) * H + u];
        }
      });
      if constexpr (std::is_same_v<T, float>)
        if (packed)
          for (int64_t c = 0; c < chunks; ++c) {
            const ChunkGemm& cg = packed_[size_t(c)];
            const int64_t u0 = bounds_[size_t(c)];
            cg.main.pack(rt + u0 * krec, ws + cg.ws_main, ws + cg.ws_scratch);
            if (gru2) cg.h.pack(rt2 + u0 * H, ws + cg.ws_h, ws + cg.ws_scratch);
          }
      for (int64_t b = 0; b < batch; ++b) {
        if (dYh) std::memcpy(carry + b * H, dYh + state_at(d, b), size_t(H) * sizeof(T));
        else std::fill(carry + b * H, carry + (b + 1) * H, T(0));
        if (C == Cell::kLstm) {
          if (dYc) std::memcpy(dc + b * H, dYc + state_at(d, b), size_t(H) * sizeof(T));
          else std::fill(dc + b * H, dc + (b + 1) * H, T(0));
        }
      }
      if (C == Cell::kLstm) std::fill(dp, dp + 3 * H, T(0));

      auto for_chunks = [&](auto&& f) {
        parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
          for (int64_t c = c0; c < c1; ++c) f(c, bounds_[size_t(c)], bounds_[size_t(c + 1)] - bounds_[size_t(c)]);
        });
      };
      // out[:, u0 : u0+n] (+)= A·R_rec[:, u0 : u0+n] for chunk c (h_gate: GRU's A·Rh, overwriting).
      auto recur = [&](int64_t c, bool h_gate, const T* A, int64_t u0, int64_t n, T* out) {
        if constexpr (std::is_same_v<T, float>)
          if (packed) {
            const ChunkGemm& cg = packed_[size_t(c)];
            (h_gate ? cg.h : cg.main).run(A, ws + (h_gate ? cg.ws_h : cg.ws_main), out, ws + cg.ws_scratch);
            return;
          }
        if (h_gate) gemm(false, true, batch, n, H, T(1), A, ldg, rt2 + u0 * H, H, T(0), out, H);
        else gemm(false, true, batch, n, krec, T(1), A, ldg, rt + u0 * krec, krec, T(1), out, H);
      };
      // dh[:, chunk] = carry + dG_prev·R (prev_t: the previous backward step, -1 for none).
      auto incoming = [&](int64_t c, int64_t u0, int64_t n, int64_t prev_t) {
        for (int64_t b = 0; b < batch; ++b) std::memcpy(dh + b * H + u0, carry + b * H + u0, size_t(n) * sizeof(T));
        if (prev_t >= 0) recur(c, false, dgr + row(prev_t, 0) * gh, u0, n, dh + u0);
      };

      int64_t prev_t = -1;
      for (int64_t s = seq - 1; s >= 0; --s) {
        const int64_t t = reverse ? seq - 1 - s : s;
        // Zero gate gradients of inactive rows (they enter the weight gemms).
        auto clear_row = [&](int64_t b, int64_t u0, int64_t n) {
          for (int64_t k = 0; k < kGates; ++k) {
            std::fill_n(dg + row(t, b) * gh + k * H + u0, n, T(0));
            if (lbr) std::fill_n(dgr + row(t, b) * gh + k * H + u0, n, T(0));
          }
          if (gru2) std::fill_n(rh + row(t, b) * H + u0, n, T(0));
        };
        if (t >= max_len) {  // no entry is active: nothing flows, the states pass through
          for (int64_t b = 0; b < batch; ++b) clear_row(b, 0, H);
          continue;
        }
        for_chunks([&](int64_t c, int64_t u0, int64_t n) {
          incoming(c, u0, n, prev_t);
          T* scr = scratch + kScratch * u0;
          for (int64_t b = 0; b < batch; ++b) {
            T* dhb = dh + b * H + u0;
            T* cb = carry + b * H + u0;
            if (t >= lens_[size_t(b)]) {
              clear_row(b, u0, n);
              std::memcpy(cb, dhb, size_t(n) * sizeof(T));
              continue;
            }
            if (dY) {
              const T* y = dY + y_at(t, d, b) + u0;
              for (int64_t j = 0; j < n; ++j) dhb[j] += y[j];
            }
            const int64_t r = row(t, b);
            const T* p = pre + r * gh + u0;
            T* g = dg + r * gh + u0;
            if constexpr (C == Cell::kLstm) {
              lstm_cell_backward<T>(p, extra + r * H + u0, dhb, dc + b * H + u0, g, Pd ? Pd + u0 : nullptr,
                                    Pd ? dp + u0 : nullptr, act, clip, scr, n);
              std::fill_n(cb, n, T(0));
            } else if constexpr (C == Cell::kGru) {
              gru_cell_backward<T>(p, hprev + r * H + u0, lbr ? extra + r * H + u0 : nullptr, dhb, cb, g,
                                   lbr ? dgr + r * gh + u0 : nullptr, act, clip, scr, n);
            } else {
              T* y = scr;
              T* dy = scr + n;
              act[0].grad(p, y, dy, n, clip);
              for (int64_t j = 0; j < n; ++j) g[j] = dhb[j] * dy[j];
              std::fill_n(cb, n, T(0));
            }
          }
        });
        if (gru2)  // r: d(r⊙hp) = dh~·Rh
          for_chunks([&](int64_t c, int64_t u0, int64_t n) {
            recur(c, true, dg + row(t, 0) * gh + 2 * H, u0, n, drh + u0);
            T* yr = scratch + kScratch * u0;
            T* dr = yr + n;
            for (int64_t b = 0; b < batch; ++b) {
              if (t >= lens_[size_t(b)]) continue;
              const int64_t r = row(t, b);
              const T* hp = hprev + r * H + u0;
              const T* dx = drh + b * H + u0;
              T* cb = carry + b * H + u0;
              T* g = dg + r * gh + H + u0;
              T* rhr = rh + r * H + u0;
              act[0].grad(pre + r * gh + H + u0, yr, dr, n, clip);
              for (int64_t j = 0; j < n; ++j) {
                g[j] = dx[j] * hp[j] * dr[j];
                cb[j] += dx[j] * yr[j];
                rhr[j] = yr[j] * hp[j];
              }
            }
          });
        prev_t = t;
      }
      // Gradients of the initial states: what flows out of the first forward step.
      if (dH0) {
        for_chunks([&](int64_t c, int64_t u0, int64_t n) { incoming(c, u0, n, prev_t); });
        for (int64_t b = 0; b < batch; ++b) std::memcpy(dH0 + state_at(d, b), dh + b * H, size_t(H) * sizeof(T));
      }
      if (dC0)
        for (int64_t b = 0; b < batch; ++b) std::memcpy(dC0 + state_at(d, b), dc + b * H, size_t(H) * sizeof(T));
      if (dP) std::memcpy(dP + d * 3 * H, dp, size_t(3 * H) * sizeof(T));

      // Weights, biases and X: one gemm each over every step.
      if (dX) gemm(false, false, rows, I, gh, T(1), dg, gh, Wd, I, T(d > 0 ? 1 : 0), dX, I);
      using Part = WeightPart<T>;
      if (dW) weight_grad<T>(I, {Part{dg, X, gh}}, rows, wt, dW + d * gh * I);
      if (dR) {  // GRU without linear_before_reset: the h rows pair with r⊙H_prev
        if (gru2) weight_grad<T>(H, {Part{dg, hprev, 2 * H}, Part{dg + 2 * H, rh, H}}, rows, wt, dR + d * gh * H);
        else weight_grad<T>(H, {Part{dgr, hprev, gh}}, rows, wt, dR + d * gh * H);
      }
      if (dB) {
        column_sums(dg, rows, gh, dB + d * 2 * gh);
        column_sums(dgr, rows, gh, dB + d * 2 * gh + gh);
      }
    }
  }

  // Rows [g0, g0 + width) of a weight gradient out[gh][k]: sum over rows r of dg[r][g]·a[r][k]
  // (dg: gate columns, ld gh; a: [rows, k]).
  template <class T>
  struct WeightPart {
    const T* dg;
    const T* a;
    int64_t width;
  };
  // out[gh][k] from its parts in order. Computed transposed, tmp[k][g] = a^T·dg (the wide output
  // runs ~25% faster in sgemm than out = dg^T·a), then transposed into place.
  template <class T>
  void weight_grad(int64_t k, std::initializer_list<WeightPart<T>> parts, int64_t rows, T* tmp, T* out) const {
    const int64_t gh = kGates * H_;
    int64_t g0 = 0;
    for (const auto& p : parts) {
      gemm(true, false, k, p.width, rows, T(1), p.a, k, p.dg, gh, T(0), tmp + g0, gh);
      g0 += p.width;
    }
    parallel_for(gh, 64, [&](int64_t g1, int64_t g2) {
      for (int64_t g = g1; g < g2; ++g)
        for (int64_t j = 0; j < k; ++j) out[g * k + j] = tmp[j * gh + g];
    });
  }

  // out[j] = sum over rows of m[r][j] (m: [rows, cols]).
  template <class T>
  static void column_sums(const T* m, int64_t rows, int64_t cols, T* out) {
    parallel_for(cols, 256, [&](int64_t j0, int64_t j1) {
      std::fill(out + j0, out + j1, T(0));
      for (int64_t r = 0; r < rows; ++r) {
        const T* src = m + r * cols;
        for (int64_t j = j0; j < j1; ++j) out[j] += src[j];
      }
    });
  }

  // One batch row, n units. p: saved pre-activations (gate stride H_), cp: cell state before the
  // step, dh: gradient of the new hidden state, dc: of the new cell state (becomes that of the
  // previous one), g: pre-activation gradients out (gate stride H_), dpeep: dP accumulators.
  template <class T>
  void lstm_cell_backward(const T* p, const T* cp, const T* dh, T* dc, T* g, const T* peep, T* dpeep,
                          const Activation* act, T clip, T* scr, int64_t n) const {
    T *yi = scr, *di = yi + n, *yo = di + n, *dO = yo + n, *yf = dO + n, *df = yf + n, *yg = df + n, *dgg = yg + n;
    T *cn = dgg + n, *hc = cn + n, *dhc = hc + n;
    const int64_t H = H_;
    act[0].grad(p, yi, di, n, clip);
    act[0].grad(p + H, yo, dO, n, clip);
    if (input_forget_) {
      for (int64_t j = 0; j < n; ++j) {
        yf[j] = T(1) - yi[j];
        df[j] = T(0);
      }
    } else {
      act[0].grad(p + 2 * H, yf, df, n, clip);
    }
    act[1].grad(p + 3 * H, yg, dgg, n, clip);
    for (int64_t j = 0; j < n; ++j) cn[j] = yf[j] * cp[j] + yi[j] * yg[j];
    act[2].grad(cn, hc, dhc, n, T(0));
    for (int64_t j = 0; j < n; ++j) {
      const T dpo = dh[j] * hc[j] * dO[j];
      const T dC = dc[j] + dh[j] * yo[j] * dhc[j] + (peep ? dpo * peep[H + j] : T(0));
      const T dpi = (dC * yg[j] - (input_forget_ ? dC * cp[j] : T(0))) * di[j];
      const T dpf = dC * cp[j] * df[j];
      g[j] = dpi;
      g[H + j] = dpo;
      g[2 * H + j] = dpf;
      g[3 * H + j] = dC * yi[j] * dgg[j];
      dc[j] = dC * yf[j] + (peep ? dpi * peep[j] + dpf * peep[2 * H + j] : T(0));
      if (dpeep) {
        dpeep[j] += dpi * cp[j];
        dpeep[H + j] += dpo * cn[j];
        dpeep[2 * H + j] += dpf * cp[j];
      }
    }
  }

  // hp: state before the step; hr: (linear_before_reset) the saved H·Rh^T + Rbh, else null (r's
  // gradient then comes in the second pass); carry: dh⊙z out; gr: (lbr) the dG_R row.
  template <class T>
  void gru_cell_backward(const T* p, const T* hp, const T* hr, const T* dh, T* carry, T* g, T* gr,
                         const Activation* act, T clip, T* scr, int64_t n) const {
    T *yz = scr, *dz = yz + n, *yh = dz + n, *dhh = yh + n, *yr = dhh + n, *dr = yr + n;
    const int64_t H = H_;
    act[0].grad(p, yz, dz, n, clip);
    act[1].grad(p + 2 * H, yh, dhh, n, clip);
    if (hr) act[0].grad(p + H, yr, dr, n, clip);
    for (int64_t j = 0; j < n; ++j) {
      const T dph = dh[j] * (T(1) - yz[j]) * dhh[j];
      g[j] = dh[j] * (hp[j] - yh[j]) * dz[j];
      g[2 * H + j] = dph;
      carry[j] = dh[j] * yz[j];
      if (hr) {
        g[H + j] = dph * hr[j] * dr[j];
        gr[j] = g[j];
        gr[H + j] = g[H + j];
        gr[2 * H + j] = dph * yr[j];
      }
    }
  }

  int64_t max_chunks_ = 1;
  std::vector<ChunkGemm> packed_;
  size_t ws_dg_ = 0, ws_dgr_ = 0, ws_rh_ = 0, ws_dh_ = 0, ws_carry_ = 0, ws_dc_ = 0, ws_drh_ = 0, ws_rt_ = 0,
         ws_rt2_ = 0, ws_dp_ = 0, ws_wt_ = 0, ws_scratch_ = 0;
  std::vector<int64_t> bounds_;
};

}  // namespace

void register_rnn(KernelRegistry& r) {
  // Opsets 1-13 share semantics here (opset 1's output_sequence only concerns which outputs are
  // named); 14 adds `layout`.
  for (auto [since, until] : {std::pair<int64_t, int64_t>{1, 13}, {14, kMaxOpsetAll}}) {
    r.add<RecurrentKernel<Cell::kRnn>>("RNN", since, until);
    r.add<RecurrentKernel<Cell::kGru>>("GRU", since, until);
    r.add<RecurrentKernel<Cell::kLstm>>("LSTM", since, until);
  }
  // Training: the forward with its reserve (pre-activations, states) and the backward.
  auto train = [&]<Cell C>(const char* op) {
    const std::string name = op;
    r.add(ops::kDomain, name + "Train", 1, kMaxOpsetAll,
          [](const KernelInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<RecurrentKernel<C>>(info, true); });
    r.add(ops::kDomain, name + "Grad", 1, kMaxOpsetAll,
          [](const KernelInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<RecurrentGradKernel<C>>(info); });
  };
  train.operator()<Cell::kRnn>("RNN");
  train.operator()<Cell::kGru>("GRU");
  train.operator()<Cell::kLstm>("LSTM");
}

}  // namespace onnxtrain::kernels::cpu
