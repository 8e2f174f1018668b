#include "kernels/cpu/dnnl_util.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "core/parallel.h"
#include "kernels/cpu/strided_copy.h"

namespace onnxtrain::kernels::cpu::dnnl_util {

namespace {
constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

dnnl::engine& cpu_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

bool bf16_available() {
  // oneDNN 2.6 has bfloat16 kernels from AVX-512 on (native with AVX512-BF16 or AMX): asked once
  // with a small matmul, which fails to be created (or is only the reference kernel) without them.
  static const bool ok = [] {
    try {
      using dnnl::memory;
      const memory::desc a({16, 16}, memory::data_type::bf16, memory::format_tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, a), default_attr(), cpu_engine());
      return !is_reference(pd);
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

std::optional<dnnl::memory::data_type> float_type(DType dt) {
  if (dt == DType::kFloat32) return dnnl::memory::data_type::f32;
  if (dt == DType::kBFloat16 && bf16_available()) return dnnl::memory::data_type::bf16;
  return std::nullopt;
}

dnnl::memory::desc plain_md(const Shape& s, dnnl::memory::data_type dt) {
  dnnl::memory::dims st(s.size());
  int64_t stride = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = stride;
    stride *= std::max<int64_t>(s[i], 1);
  }
  return dnnl::memory::desc(dims(s), dt, st);
}

int max_threads() { return omp_get_max_threads(); }

size_t l2_cache_bytes() {
  static const size_t bytes = [] {
    const long b = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return b > 0 ? size_t(b) : size_t(1) << 20;
  }();
  return bytes;
}

Wino2x3 wino_2x3_verdict(double scratch_bytes, int threads, int64_t C, int64_t M, double l2_bytes) {
  const double c = double((C + 15) / 16 * 16), m = double((M + 15) / 16 * 16);
  const double per_thread = scratch_bytes / double(std::max(threads, 1));
  const double tiles = per_thread / (64.0 * (c + m));  // a block's tiles (and a row more: oneDNN's margin)
  if (per_thread > 2.0 * l2_bytes) return Wino2x3::kNextImpl;
  if (64.0 * c * m > l2_bytes && tiles < 16.0) return Wino2x3::kDirect;
  return Wino2x3::kKeep;
}

dnnl::primitive_attr default_attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

size_t DnnlOp::carve(size_t bytes) {
  const size_t off = ws_bytes_;
  ws_bytes_ += align_up(bytes);
  return off;
}

void DnnlOp::init(dnnl::primitive prim, const dnnl::memory::desc& scratchpad_md) {
  prim_ = std::move(prim);
  args_.clear();
  exec_.clear();
  packed_.clear();
  c_args_.clear();
  ws_bytes_ = 0;
  scratch_ = dnnl::memory();
  if (scratchpad_md.get_size() > 0) {
    scratch_offset_ = carve(scratchpad_md.get_size());
    scratch_ = dnnl::memory(scratchpad_md, cpu_engine(), DNNL_MEMORY_NONE);
    exec_.emplace(DNNL_ARG_SCRATCHPAD, scratch_);
  }
}

void DnnlOp::add_arg(int arg, const dnnl::memory::desc& user, const dnnl::memory::desc& prim, bool output, bool read) {
  Arg a{arg, output, output && read, user != prim, 0, nullptr, dnnl::memory(user, cpu_engine(), DNNL_MEMORY_NONE), {}, {}, {}};
  if (a.reorder) {
    a.offset = carve(prim.get_size());
    a.prim = dnnl::memory(prim, cpu_engine(), DNNL_MEMORY_NONE);
    a.re = output ? dnnl::reorder(a.prim, a.user) : dnnl::reorder(a.user, a.prim);
    if (a.read) a.re_in = dnnl::reorder(a.user, a.prim);
  } else {
    a.prim = a.user;
  }
  exec_[arg] = a.prim;  // memory objects are handles: set_data_handle later reaches this copy
  args_.push_back(std::move(a));
}

void DnnlOp::add_const_arg(int arg, const dnnl::memory::desc& user, const dnnl::memory::desc& prim,
                           const void* data) {
  if (user == prim) {
    add_arg(arg, user, prim, false);
    return;
  }
  // Owned as a tensor: the allocation counts against the session's memory limit like the plan's.
  Tensor buf = Tensor::empty(DType::kUInt8, {int64_t(prim.get_size())});
  dnnl::memory from(user, cpu_engine(), const_cast<void*>(data)), to(prim, cpu_engine(), buf.raw_data());
  dnnl::stream s(cpu_engine());
  dnnl::reorder(from, to).execute(s, from, to);
  s.wait();
  exec_[arg] = to;
  packed_.emplace(arg, std::move(buf));
}

void DnnlOp::bind(int arg, const void* data) {
  for (auto& a : args_)
    if (a.id == arg) a.user.set_data_handle(const_cast<void*>(data));
}

dnnl::memory::desc DnnlOp::prim_desc(int arg) const {
  for (const auto& a : args_)
    if (a.id == arg) return a.prim.get_desc();
  return {};
}

void DnnlOp::bind_prim(int arg, const void* data) {
  for (auto& a : args_)
    if (a.id == arg && !a.output) a.prim_data = data;
}

void DnnlOp::execute(void* workspace, dnnl::stream& s) {
  std::optional<ThreadScope> one;
  if (single_threaded_ && current_threads() > 1) one.emplace(1);
  auto* ws = static_cast<char*>(workspace);
  if (scratch_) scratch_.set_data_handle(ws + scratch_offset_);
  for (auto& a : args_) {
    if (a.reorder && a.prim_data) {
      a.prim.set_data_handle(const_cast<void*>(a.prim_data));
    } else if (a.reorder) {
      a.prim.set_data_handle(ws + a.offset);
      if (!a.output) run_reorder(a.re, s, a.user, a.prim);
      else if (a.read) run_reorder(a.re_in, s, a.user, a.prim);
    }
  }
  // Through the C API with argument arrays built once: the C++ execute() builds a vector per call.
  if (c_args_.size() != exec_.size()) {
    c_args_.clear();
    for (const auto& [id, m] : exec_) c_args_.push_back(dnnl_exec_arg_t{id, m.get()});
  }
  check(dnnl_primitive_execute(prim_.get(), s.get(), int(c_args_.size()), c_args_.data()));
  for (auto& a : args_)
    if (a.reorder && a.output) run_reorder(a.re, s, a.prim, a.user);
  s.wait();
}

void DnnlOp::run_reorder(const dnnl::reorder& re, dnnl::stream& s, const dnnl::memory& from, const dnnl::memory& to) {
  const dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from.get()}, {DNNL_ARG_TO, to.get()}};
  check(dnnl_primitive_execute(re.get(), s.get(), 2, args));
}

void DnnlOp::check(dnnl_status_t st) {
  if (st != dnnl_success) throw_error<RuntimeError>("oneDNN primitive failed with status ", int(st));
}

}  // namespace onnxtrain::kernels::cpu::dnnl_util

namespace onnxtrain::kernels::cpu::nchwc {

namespace {

// One (image, channel block) per task: a [16, HW] slab of planes to [HW, 16] (to_blocked) or back,
// nc of the 16 channels present. Whole blocks go through 8 x 8 register transposes.
template <bool ToBlocked>
void reorder(const float* x, float* y, int64_t N, int64_t C, int64_t HW) {
  const int64_t CB = blocks(C), HW8 = HW / 8 * 8;
  parallel_for(N * CB, std::max<int64_t>(1, kCopyGrain / std::max<int64_t>(HW * kBlock, 1)), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n = b / CB, c0 = (b % CB) * kBlock, nc = std::min(kBlock, C - c0);
      // The slab's offset in the blocked tensor and the planes' in the plain one, whichever is x.
      const int64_t blocked_off = b * HW * kBlock, plain_off = (n * C + c0) * HW;
      const float* src = x + (ToBlocked ? plain_off : blocked_off);
      float* dst = y + (ToBlocked ? blocked_off : plain_off);
      int64_t p = 0;
      if (nc == kBlock) {
        for (; p < HW8; p += 8)
          for (int64_t c = 0; c < kBlock; c += 8) {
            if constexpr (ToBlocked) StridedCopy::block<4>(dst + p * kBlock + c, kBlock, src + c * HW + p, HW);
            else StridedCopy::block<4>(dst + c * HW + p, HW, src + p * kBlock + c, kBlock);
          }
      }
      for (; p < HW; ++p)
        for (int64_t c = 0; c < kBlock; ++c) {
          if constexpr (ToBlocked) dst[p * kBlock + c] = c < nc ? src[c * HW + p] : 0.f;
          else if (c < nc) dst[c * HW + p] = src[p * kBlock + c];
        }
    }
  });
}

}  // namespace

void to_blocked(const float* x, float* y, int64_t N, int64_t C, int64_t HW) { reorder<true>(x, y, N, C, HW); }

void from_blocked(const float* x, float* y, int64_t N, int64_t C, int64_t HW) { reorder<false>(x, y, N, C, HW); }

}  // namespace onnxtrain::kernels::cpu::nchwc
