// Training steps of an exported model (output "loss") on the CUDA provider: bench/cuda_step.py runs
// it beside PyTorch eager on the same GPU.
//   bench_cuda_step MODEL STEPS fp32|bf16 adam|momentum|sgd LR INPUT... [profile]
//   INPUT: NAME=DTYPE:D0,D1,...:FILE  (DTYPE float32 or int64; FILE the raw elements, the
//          reference's own batch, so that first losses agree)
// The optimizers as PyTorch's defaults: Adam (betas 0.9 / 0.999, eps 1e-8, bias-corrected), SGD with
// momentum 0.9, plain SGD. "profile" runs with the profiler (each node synchronized, so the times
// are each node's own) and prints the trace file's name in the JSON line.
// Prints one JSON line: median step milliseconds (after two warm-up steps), the first and last
// losses, the provider allocator's peak reserved device bytes, and the op types of the plan's
// steps that ran on the CPU (nodes the CUDA provider lacks or declined). Set ONNXTRAIN_CUDA_TF32=1
// for TF32 products and convolutions. Without -DONNXTRAIN_CUDA=ON it says so and exits 2.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
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
    std::fprintf(stderr, "usage: bench_cuda_step MODEL STEPS fp32|bf16 adam|momentum|sgd LR NAME=DTYPE:DIMS:FILE... [profile]\n");
    return 2;
  }
  const std::string model = argv[1], precision = argv[3], optimizer = argv[4];
  const int steps = std::atoi(argv[2]);
  const float learning_rate = std::strtof(argv[5], nullptr);
  int last = argc;
  const bool profile = std::string(argv[argc - 1]) == "profile";
  if (profile) --last;
  try {
    TrainingParameters p;
    p.loss_output_name = "loss";
    if (optimizer == "adam") {
      p.training_optimizer_name = "AdamOptimizer";
    } else if (optimizer == "momentum") {  // torch.optim.SGD(momentum=0.9)
      p.training_optimizer_name = "MomentumOptimizer";
      p.optimizer_attributes = {{"momentum", 0.9f}, {"lambda", 0.0f}};
      p.optimizer_int_attributes = {{"nesterov", 0}};
    } else if (optimizer == "sgd") {
      p.training_optimizer_name = "SGDOptimizer";
    } else {
      throw std::runtime_error("unknown optimizer '" + optimizer + "' (adam, momentum, sgd)");
    }
    if (precision == "bf16") p.mixed_precision = "bf16";
    else if (precision != "fp32") throw std::runtime_error("unknown precision '" + precision + "' (fp32, bf16)");
    SessionOptions so;
    so.providers = {"CUDAExecutionProvider", "CPUExecutionProvider"};
    so.enable_profiling = profile;
    TrainingSession s(model, p, so);
    std::vector<std::pair<std::string, Value>> feeds;
    for (int i = 6; i < last; ++i) {  // NAME=DTYPE:D0,D1,...:FILE
      const std::string arg = argv[i];
      const size_t eq = arg.find('='), c1 = arg.find(':', eq), c2 = arg.find(':', c1 + 1);
      if (eq == std::string::npos || c1 == std::string::npos || c2 == std::string::npos)
        throw std::runtime_error("input '" + arg + "' is not NAME=DTYPE:D0,D1,...:FILE");
      const std::string dt = arg.substr(eq + 1, c1 - eq - 1);
      if (dt != "float32" && dt != "int64") throw std::runtime_error("input '" + arg + "': DTYPE float32 or int64");
      Shape shape;
      for (size_t at = c1 + 1; at < c2;) {
        const size_t comma = std::min(arg.find(',', at), c2);
        shape.push_back(std::atoll(arg.substr(at, comma - at).c_str()));
        at = comma + 1;
      }
      Tensor t = Tensor::empty(dt == "int64" ? DType::kInt64 : DType::kFloat32, shape);
      const std::string path = arg.substr(c2 + 1);
      std::ifstream f(path, std::ios::binary);
      if (!f.read(static_cast<char*>(t.raw_data()), std::streamsize(t.nbytes())))
        throw std::runtime_error("cannot read " + std::to_string(t.nbytes()) + " bytes from " + path);
      feeds.emplace_back(arg.substr(0, eq), Value::of(t));
    }
    feeds.emplace_back("Learning_Rate", Value::of(Tensor::from_vector<float>({1}, {learning_rate})));
    std::vector<double> ms, losses;
    for (int i = 0; i < steps + 2; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      auto out = s.run({"loss"}, feeds);
      const auto t1 = std::chrono::steady_clock::now();  // the loss came back to the host: the step is done
      losses.push_back(double(out[0].tensor.data<float>()[0]));
      if (i >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    const std::string trace = profile ? s.end_profiling() : "";
    std::map<std::string, int> on_cpu;  // op types of the steps that ran on the CPU
    for (const AssignedNode& n : s.node_assignment())
      if (n.provider != "CUDAExecutionProvider") ++on_cpu[n.op_type.empty() ? n.name : n.op_type];
    std::string cpu_ops;
    for (const auto& [op, n] : on_cpu) cpu_ops += (cpu_ops.empty() ? "" : ", ") + ("\"" + op + "\": " + std::to_string(n));
    std::printf("{\"precision\": \"%s\", \"median_ms\": %.3f, \"first_loss\": %.6f, \"last_loss\": %.6f, "
                "\"peak_reserved_bytes\": %zu, \"trace\": \"%s\", \"on_cpu\": {%s}}\n",
                precision.c_str(), ms.empty() ? 0.0 : ms[ms.size() / 2], losses.front(), losses.back(),
                kernels::cuda::allocator_peak_bytes(), trace.c_str(), cpu_ops.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_step: %s\n", e.what());
    return 1;
  }
#endif
}
