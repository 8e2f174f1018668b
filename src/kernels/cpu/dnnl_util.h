// oneDNN glue shared by kernels: one CPU engine, a stream per thread, and DnnlOp, a primitive
// created in prepare() for concrete shapes whose plain (row-major) arguments are bound to tensor
// pointers in run().
//
//   prepare:  op.init(primitive_desc, ...) ; op.add_arg(DNNL_ARG_SRC, plain_md, pd.src_desc(), false) ...
//             ctx.request_workspace(op.workspace_bytes())
//   run:      op.bind(DNNL_ARG_SRC, x.raw_data()) ... ; op.execute(ctx.workspace(), CpuContext::of(ctx).stream())
//
// Arguments whose layout the primitive chose differently from the plain one (format_tag::any) get a
// reorder into / out of the workspace; the primitive's scratchpad also lives in the workspace
// (scratchpad_mode::user), so run() never allocates and concurrent runs of one primitive are safe.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "onnxtrain/tensor.h"

namespace onnxtrain::kernels::cpu::dnnl_util {

dnnl::engine& cpu_engine();

/// oneDNN dims of a shape.
inline dnnl::memory::dims dims(const Shape& s) { return dnnl::memory::dims(s.begin(), s.end()); }
/// The oneDNN data type of the float types its matmul and convolution kernels run: float32, and
/// bfloat16 where bf16_available() (natively with AVX512-BF16 or AMX, else converted inside its
/// AVX-512 kernels; fp32 accumulation either way); none for the others (the kernels' own loops).
std::optional<dnnl::memory::data_type> float_type(DType dt);
/// True when oneDNN has optimized bfloat16 kernels on this CPU (AVX-512 or newer).
bool bf16_available();
/// Plain row-major float32 memory descriptor of a shape.
dnnl::memory::desc plain_md(const Shape& s, dnnl::memory::data_type dt = dnnl::memory::data_type::f32);
/// Primitive attributes every kernel should start from (user scratchpad).
dnnl::primitive_attr default_attr();
/// The threads oneDNN's primitives created now are planned for (OpenMP's current maximum).
int max_threads();
/// Bytes of one core's second-level cache (sysconf; 1 MB where the system does not say).
size_t l2_cache_bytes();
/// What NchwcConv does with oneDNN 2.6's F(2x2, 3x3) Winograd kernel ("jit_fp32_wino_2x3": float32
/// inference on AVX-512, taken before its F(4x4, 3x3) one wherever it accepts the problem, which
/// is at batch sizes up to the thread count). It splits the image into blocks of 2x2-output tiles;
/// each thread transforms a block into its part of the scratchpad, 64 (C + M) bytes a tile (C, M
/// rounded up to 16; `scratch_bytes` over `threads` is one thread's part), then multiplies it by
/// the transformed weights, 64 C M bytes. Two of its blockings lose (per-node profiles of the
/// bench's networks at batch 1, Sapphire Rapids, 2 MB of second-level cache a core):
/// - a thread's block over twice that cache (Inception-v3's 80 -> 192 layer at 71x71: one block of
///   703 tiles, 13.5 MB; 8.2 ms at one thread, 7.3 ms direct, 3.5 ms with the 4x3 kernel; at two
///   threads 4.5 / 3.7 / 1.8 ms. VGG-16's 128 -> 128 at 112x112: 12.4 -> 7.5 ms; DenseNet-121's
///   128 -> 32 at 56x56: 1.1 -> 0.7 ms): kNextImpl, oneDNN's next kernel (the 4x3 one);
/// - transformed weights larger than that cache read again for each block of fewer than 16 tiles
///   (Inception-v3's 448 -> 384 at 8x8, one thread: four blocks of 4 tiles, 11 MB of weights from
///   memory for each: 2.6 ms against 1.4 ms direct, the 4x3 kernel as slow): kDirect, the direct
///   kernel (nchwc_direct.h). Whole small images (ResNet's 512 -> 512 at 7x7: 24 tiles a block)
///   and larger blocks (256 -> 256 at 14x14: 42) stay with this kernel, its best there.
/// kKeep otherwise.
enum class Wino2x3 { kKeep, kNextImpl, kDirect };
Wino2x3 wino_2x3_verdict(double scratch_bytes, int threads, int64_t C, int64_t M, double l2_bytes);
/// True when oneDNN fell back to a reference (unoptimized, often very slow) implementation.
inline bool is_reference(const dnnl::primitive_desc_base& pd) {
  const char* impl = pd.impl_info_str();
  return impl && std::string(impl).rfind("ref", 0) == 0;
}

class DnnlOp {
 public:
  DnnlOp() = default;
  bool valid() const { return bool(prim_); }
  /// Sets the primitive and its scratchpad descriptor; drops previous arguments.
  void init(dnnl::primitive prim, const dnnl::memory::desc& scratchpad_md);
  /// Registers an argument. `user` is the layout of the tensor bound in run(), `prim` the layout
  /// the primitive wants: when they differ, a reorder buffer is carved from the workspace. An
  /// output that is `read` too (a sum post-op's destination) is reordered in before and out after.
  void add_arg(int arg, const dnnl::memory::desc& user, const dnnl::memory::desc& prim, bool output, bool read = false);
  /// Registers an input whose data is known and fixed for the op's lifetime (a constant weight):
  /// when `prim` differs from `user` it is reordered once, now, into memory the op owns, and
  /// execute() uses that copy (bind() of `arg` is then ignored); otherwise it is a plain add_arg.
  void add_const_arg(int arg, const dnnl::memory::desc& user, const dnnl::memory::desc& prim, const void* data);
  /// True when argument `arg` was reordered once by add_const_arg.
  bool prepacked(int arg) const { return packed_.count(arg) > 0; }
  /// Workspace bytes needed by execute().
  size_t workspace_bytes() const { return ws_bytes_; }
  /// Points argument `arg` at tensor memory (call for every argument before execute()).
  void bind(int arg, const void* data);
  /// The layout the primitive runs argument `arg` in (its `prim` descriptor of add_arg).
  dnnl::memory::desc prim_desc(int arg) const;
  /// Points input `arg` at memory already in the primitive's layout (prim_desc): execute() then
  /// skips its reorder (one reorder of a tensor shared by two primitives). Null: bind() again.
  void bind_prim(int arg, const void* data);
  /// Runs the reorders and the primitive on `stream` (the run's CpuContext::stream()).
  void execute(void* workspace, dnnl::stream& stream);
  /// Runs on the calling thread only: for primitives too small to repay waking other threads.
  void set_single_threaded(bool s) { single_threaded_ = s; }

 private:
  struct Arg {
    int id;
    bool output;
    bool read;  // an output read by the primitive too
    bool reorder;
    size_t offset;  // of the reordered buffer in the workspace
    const void* prim_data;  // bind_prim's memory (already in the prim layout), else null
    dnnl::memory user, prim;
    dnnl::reorder re, re_in;  // re: user -> prim (inputs), prim -> user (outputs); re_in: user -> prim (read outputs)
  };
  size_t carve(size_t bytes);
  static void run_reorder(const dnnl::reorder& re, dnnl::stream& s, const dnnl::memory& from, const dnnl::memory& to);
  static void check(dnnl_status_t st);
  dnnl::primitive prim_;
  dnnl::memory scratch_;
  size_t scratch_offset_ = 0;
  std::vector<Arg> args_;
  std::unordered_map<int, dnnl::memory> exec_;
  std::unordered_map<int, Tensor> packed_;  // add_const_arg's reordered copies (tracked allocations)
  std::vector<dnnl_exec_arg_t> c_args_;
  size_t ws_bytes_ = 0;
  bool single_threaded_ = false;
};

}  // namespace onnxtrain::kernels::cpu::dnnl_util

// oneDNN's blocked activation layout nChw16c as onnxtrain tensors (src/runtime/conv_fusion.h's
// block_conv_layouts): plain [N, C, H, W] is stored as [N, ceil(C/16), H, W, 16], element
// (n, c, h, w) at [n, c / 16, h, w, c % 16]; the padded channels c >= C hold zeros.
namespace onnxtrain::kernels::cpu::nchwc {

inline constexpr int64_t kBlock = 16;
inline int64_t blocks(int64_t channels) { return (channels + kBlock - 1) / kBlock; }
/// The blocked tensor's shape of plain [N, C, H, W].
inline Shape blocked_shape(const Shape& plain) { return {plain[0], blocks(plain[1]), plain[2], plain[3], kBlock}; }
/// x[N, C, HW] -> y[N, blocks(C), HW, 16], padded channels zeroed.
void to_blocked(const float* x, float* y, int64_t N, int64_t C, int64_t HW);
/// x[N, blocks(C), HW, 16] -> y[N, C, HW].
void from_blocked(const float* x, float* y, int64_t N, int64_t C, int64_t HW);

}  // namespace onnxtrain::kernels::cpu::nchwc
