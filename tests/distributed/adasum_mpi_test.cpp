// Adasum over MPI against a naive double-precision reference (the binary tree of pairwise adasum
// on whole vectors, per tensor), float32 and float64; every rank also checks that all ranks end
// with the same bytes. Every rank generates every rank's inputs from a fixed seed.
//
// Build and run (from the repository root; any -np: other than a power of two, 1 included, it checks
// that Adasum refuses the world size):
//   mpicxx -std=c++20 -O2 -DONNXTRAIN_WITH_MPI -Iinclude -Isrc tests/distributed/adasum_mpi_test.cpp
//     src/distributed/adasum.cpp src/distributed/comm.cpp src/core/dtype.cpp -o build-adasum/adasum_mpi_test
//   mpirun --allow-run-as-root --oversubscribe -np 4 build-adasum/adasum_mpi_test [seed]
// Prints one summary line on rank 0; exits non-zero on any failure.
#define OMPI_SKIP_MPICXX 1  // the C API only
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "distributed/adasum.h"
#include "onnxtrain/error.h"

using onnxtrain::DType;
using onnxtrain::distributed::adasum_allreduce;

namespace {

int g_rank = 0, g_size = 1, g_failures = 0, g_checks = 0;
uint64_t g_seed = 20240611;

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// Uniform in [-1, 1), reproducible on every rank.
double uniform(uint64_t& s) { return double(splitmix(s) >> 11) * 0x1.0p-52 - 1.0; }

void fail(const std::string& msg) {
  ++g_failures;
  std::fprintf(stderr, "adasum_mpi_test: rank %d of %d (seed %llu): FAIL %s\n", g_rank, g_size,
               (unsigned long long)g_seed, msg.c_str());
}

/// Input of `rank` for tensor `t` of a case: fills `v` (already sized).
using Gen = std::function<void(int rank, size_t t, std::vector<double>& v)>;

/// adasum(a, b) in double, rounded to T, into a.
template <class T>
void pair_adasum(std::vector<double>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) ab += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
  const double ca = aa > 0 ? 1 - ab / (2 * aa) : 1, cb = bb > 0 ? 1 - ab / (2 * bb) : 1;
  for (size_t i = 0; i < a.size(); ++i) a[i] = double(T(ca * a[i] + cb * b[i]));
}

uint64_t fnv1a(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}

/// Runs one case: adasum_allreduce on this rank's data, then checks it against the reference and
/// the other ranks' bytes. `exact`: the result must equal the reference bit for bit.
template <class T>
void run_case(const char* name, const std::vector<int64_t>& sizes, const Gen& gen, bool exact = false) {
  const DType dt = std::is_same_v<T, float> ? DType::kFloat32 : DType::kFloat64;
  const double rtol = std::is_same_v<T, float> ? 1e-6 : 1e-12;
  const std::string label = std::string(name) + (std::is_same_v<T, float> ? " float32" : " float64");
  // Inputs of every rank, rounded to T; this rank's data back to back.
  std::vector<std::vector<std::vector<double>>> in(size_t(g_size), std::vector<std::vector<double>>(sizes.size()));
  std::vector<T> data;
  for (int r = 0; r < g_size; ++r)
    for (size_t t = 0; t < sizes.size(); ++t) {
      auto& v = in[size_t(r)][t];
      v.assign(size_t(sizes[t]), 0.0);
      gen(r, t, v);
      for (double& x : v) {
        x = double(T(x));
        if (r == g_rank) data.push_back(T(x));
      }
    }
  ++g_checks;
  const bool pow2 = (g_size & (g_size - 1)) == 0;
  try {
    adasum_allreduce(data.data(), dt, sizes, g_rank, g_size, label.c_str());
    if (!pow2) fail(label + ": no error on " + std::to_string(g_size) + " ranks");
  } catch (const std::exception& e) {
    const std::string want = "power-of-two number of ranks, got " + std::to_string(g_size);
    if (!pow2 && std::string(e.what()).find(want) != std::string::npos) return;
    fail(label + ": threw " + e.what());
  }
  if (!pow2) return;
  size_t off = 0;
  for (size_t t = 0; t < sizes.size(); ++t) {
    std::vector<std::vector<double>> v(static_cast<size_t>(g_size));
    for (int r = 0; r < g_size; ++r) v[size_t(r)] = in[size_t(r)][t];
    for (int d = 1; d < g_size; d <<= 1)
      for (int k = 0; k < g_size; k += 2 * d) pair_adasum<T>(v[size_t(k)], v[size_t(k + d)]);
    const std::vector<double>& ref = v[0];
    double scale = 0;
    for (double x : ref) scale = std::max(scale, std::fabs(x));
    for (size_t i = 0; i < ref.size(); ++i) {
      const double got = double(data[off + i]), err = std::fabs(got - ref[i]);
      if (exact ? got != ref[i] : !(err <= rtol * (std::fabs(ref[i]) + scale))) {
        char buf[256];
        std::snprintf(buf, sizeof buf, "%s: tensor %zu element %zu: got %.17g, want %.17g", label.c_str(), t, i, got,
                      ref[i]);
        fail(buf);
        break;
      }
    }
    off += ref.size();
  }
  uint64_t h = fnv1a(data.data(), data.size() * sizeof(T));
  std::vector<uint64_t> all(static_cast<size_t>(g_size));
  MPI_Allgather(&h, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  for (int r = 0; r < g_size; ++r)
    if (all[size_t(r)] != h) {
      fail(label + ": result bytes differ from rank " + std::to_string(r) + "'s");
      break;
    }
}

/// Random values scaled per rank and tensor, from the seed.
Gen random_gen(uint64_t salt) {
  return [salt](int r, size_t t, std::vector<double>& v) {
    uint64_t s = g_seed ^ (salt * 0x100000001b3ull) ^ (uint64_t(r) << 32) ^ (uint64_t(t) << 48);
    const double scale = std::ldexp(1.0, (r + int(t)) % 3 - 1);
    for (double& x : v) x = scale * uniform(s);
  };
}

template <class T>
void run_all() {
  run_case<T>("mixed sizes", {1, 7, 100, 1000}, random_gen(1));
  run_case<T>("odd sizes", {3, 1, 1, 17, 255, 2, 129, 1, 64, 33}, random_gen(2));
  run_case<T>("total < ranks", {1, 2}, random_gen(3));
  run_case<T>("one element", {1}, random_gen(4));
  run_case<T>("empty tensors", {0, 1, 0, 5, 0}, random_gen(5));
  run_case<T>("no tensors", {}, random_gen(6));
  // Zeros: tensor 0 on rank 1, tensor 1 on ranks 0, 3, 6, tensor 2 everywhere.
  const Gen rnd = random_gen(7);
  run_case<T>("zeros", {5, 50, 3, 9}, [&](int r, size_t t, std::vector<double>& v) {
    rnd(r, t, v);
    if ((t == 0 && r == 1) || (t == 1 && r % 3 == 0) || t == 2) std::fill(v.begin(), v.end(), 0.0);
  });
  // Nearly parallel vectors of different lengths (coefficients far from 1), and opposite ones.
  const Gen base = random_gen(8), noise = random_gen(9);
  run_case<T>("nearly parallel", {40, 300}, [&](int r, size_t t, std::vector<double>& v) {
    std::vector<double> n(v.size());
    base(0, t, v);
    noise(r, t, n);
    const double k = (r % 2 ? -1.0 : 1.0) * (1.0 + r);
    for (size_t i = 0; i < v.size(); ++i) v[i] = k * v[i] + 0.01 * n[i];
  });
  // The same vectors on every rank: adasum(a, a) = a exactly at every level.
  const Gen same = random_gen(10);
  run_case<T>("identical", {1, 7, 100, 1000},
              [&](int, size_t t, std::vector<double>& v) { same(0, t, v); }, /*exact=*/true);
}

/// The reference on hand-computed pairs: orthogonal vectors add, parallel ones average, adasum(0, b) = b.
void check_reference() {
  const auto expect = [](std::vector<double> a, const std::vector<double>& b, const std::vector<double>& want) {
    ++g_checks;
    pair_adasum<double>(a, b);
    if (a != want) fail("reference adasum is wrong");
  };
  expect({1, 0}, {0, 3}, {1, 3});
  expect({2, 0}, {1, 0}, {1.5, 0});
  expect({0, 0}, {1, 2}, {1, 2});
  expect({3, 4}, {3, 4}, {3, 4});
}

/// Errors raised before any communication: a non-power-of-two world and an unsupported type.
void check_errors() {
  float x = 1;
  const auto expect = [](const std::function<void()>& f, const char* a, const char* b) {
    ++g_checks;
    try {
      f();
      fail(std::string("no error (expected '") + a + "')");
    } catch (const onnxtrain::NotImplemented& e) {
      const std::string m = e.what();
      if (m.find(a) == std::string::npos || m.find(b) == std::string::npos)
        fail("message '" + m + "' lacks '" + a + "' or '" + b + "'");
    }
  };
  expect([&] { adasum_allreduce(&x, DType::kFloat32, {1}, 0, 3, "bucket 7"); }, "bucket 7",
         "power-of-two number of ranks, got 3");
  expect([&] { adasum_allreduce(&x, DType::kInt32, {1}, 0, 2, "bucket 8"); }, "bucket 8", "int32");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (argc > 1) g_seed = std::strtoull(argv[1], nullptr, 10);
  check_reference();
  check_errors();
  run_all<float>();
  run_all<double>();
  int failures = 0;
  MPI_Allreduce(&g_failures, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0)
    std::printf("adasum_mpi_test: %d ranks, seed %llu, %d checks per rank: %s (%d failures)\n", g_size,
                (unsigned long long)g_seed, g_checks, failures ? "FAIL" : "PASS", failures);
  MPI_Finalize();
  return failures ? 1 : 0;
}
