// Training steps of an exported model (inputs x: int64 ids [B, S], y: int64 labels [B, S]; output
// "loss") on the CUDA provider: bench/cuda_step.py runs it beside PyTorch eager on the same GPU.
//   bench_cuda_step MODEL.onnx BATCH SEQ VOCAB CLASSES STEPS [fp32|bf16 [X.bin Y.bin [PROFILE]]]
// X.bin / Y.bin: the batch as raw int64 (the reference's own, so that first losses agree; default:
// random ids). PROFILE: "profile" runs with the profiler (each node synchronized, so the times are
// each node's own) and prints the trace file's name in the JSON line.
// Prints one JSON line: median step milliseconds (after two warm-up steps), the first and last
// losses, and the provider allocator's peak reserved device bytes. Set ONNXTRAIN_CUDA_TF32=1 for
// TF32 products. Without -DONNXTRAIN_CUDA=ON it says so and exits 2.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "onnxtrain/session.h"
#include "onnxtrain/training.h"
#ifdef ONNXTRAIN_WITH_CUDA
#include "kernels/cuda/cuda_provider.h"
#endif

using namespace onnxtrain;

int main(int argc, char** argv) {
#ifndef ONNXTRAIN_WITH_CUDA
  std::fprintf(stderr, "bench_cuda_step: this build has no CUDA provider (configure with -DONNXTRAIN_CUDA=ON)\n");
  return 2;
#else
  if (argc < 7) {
    std::fprintf(stderr, "usage: bench_cuda_step MODEL BATCH SEQ VOCAB CLASSES STEPS [fp32|bf16]\n");
    return 2;
  }
  const std::string model = argv[1];
  const int64_t B = std::atoll(argv[2]), S = std::atoll(argv[3]), V = std::atoll(argv[4]), C = std::atoll(argv[5]);
  const int steps = std::atoi(argv[6]);
  const std::string precision = argc > 7 ? argv[7] : "fp32";
  const bool profile = argc > 10 && std::string(argv[10]) == "profile";
  try {
    TrainingParameters p;
    p.loss_output_name = "loss";
    p.training_optimizer_name = "AdamOptimizer";
    if (precision == "bf16") p.mixed_precision = "bf16";
    SessionOptions so;
    so.providers = {"CUDAExecutionProvider", "CPUExecutionProvider"};
    so.enable_profiling = profile;
    TrainingSession s(model, p, so);
    std::mt19937_64 rng(0);
    Tensor x = Tensor::empty(DType::kInt64, {B, S}), y = Tensor::empty(DType::kInt64, {B, S});
    for (int64_t i = 0; i < B * S; ++i) {
      x.data<int64_t>()[i] = int64_t(rng() % uint64_t(V));
      y.data<int64_t>()[i] = int64_t(rng() % uint64_t(C));
    }
    if (argc > 9) {  // the reference's batch
      for (auto [path, t] : {std::pair<const char*, Tensor*>{argv[8], &x}, {argv[9], &y}}) {
        std::ifstream f(path, std::ios::binary);
        if (!f.read(static_cast<char*>(t->raw_data()), std::streamsize(t->nbytes())))
          throw std::runtime_error(std::string("cannot read ") + std::to_string(t->nbytes()) + " bytes from " + path);
      }
    }
    const Value lr = Value::of(Tensor::from_vector<float>({1}, {1e-4f}));
    std::vector<double> ms, losses;
    for (int i = 0; i < steps + 2; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      auto out = s.run({"loss"}, {{"x", Value::of(x)}, {"y", Value::of(y)}, {"Learning_Rate", lr}});
      const auto t1 = std::chrono::steady_clock::now();  // the loss came back to the host: the step is done
      losses.push_back(double(out[0].tensor.data<float>()[0]));
      if (i >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    const std::string trace = profile ? s.end_profiling() : "";
    std::printf("{\"precision\": \"%s\", \"median_ms\": %.3f, \"first_loss\": %.6f, \"last_loss\": %.6f, "
                "\"peak_reserved_bytes\": %zu, \"trace\": \"%s\"}\n",
                precision.c_str(), ms.empty() ? 0.0 : ms[ms.size() / 2], losses.front(), losses.back(),
                kernels::cuda::allocator_peak_bytes(), trace.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_step: %s\n", e.what());
    return 1;
  }
#endif
}
