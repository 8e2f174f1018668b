#include "kernels/shape/matmul.h"

#include "kernels/shape/common.h"

namespace onnxtrain::kernels::shape {

namespace {

// Fills batch and output from the operands' batch dims and M, K, N.
void broadcast_batch(const PrepareContext& ctx, const Shape& a, const Shape& b, MatMulGeom* g) {
  if (!broadcast_shapes({g->a_batch, g->b_batch}, &g->batch))
    ctx.fail("batch dimensions of ", shape_to_string(a), " and ", shape_to_string(b), " cannot be broadcast");
  g->output = g->batch;
}

}  // namespace

MatMulGeom matmul_geometry(const PrepareContext& ctx, const Shape& a0, const Shape& b0) {
  if (a0.empty() || b0.empty())
    ctx.fail("MatMul operands must have rank >= 1, got ", shape_to_string(a0), " and ", shape_to_string(b0));
  Shape a = a0, b = b0;
  const bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  MatMulGeom g;
  g.M = a[a.size() - 2], g.K = a.back(), g.N = b.back();
  if (b[b.size() - 2] != g.K) ctx.fail("inner dimensions differ: ", shape_to_string(a0), " @ ", shape_to_string(b0));
  g.a_batch.assign(a.begin(), a.end() - 2);
  g.b_batch.assign(b.begin(), b.end() - 2);
  broadcast_batch(ctx, a0, b0, &g);
  if (!a1) g.output.push_back(g.M);
  if (!b1) g.output.push_back(g.N);
  return g;
}

MatMulGeom fused_matmul_geometry(const PrepareContext& ctx, const Shape& a, const Shape& b, bool ta, bool tb) {
  if (a.size() < 2 || b.size() < 2)
    ctx.fail("operands must have rank >= 2, got ", shape_to_string(a), " and ", shape_to_string(b));
  MatMulGeom g;
  g.M = ta ? a.back() : a[a.size() - 2], g.K = ta ? a[a.size() - 2] : a.back();
  const int64_t kb = tb ? b.back() : b[b.size() - 2];
  g.N = tb ? b[b.size() - 2] : b.back();
  if (g.K != kb)
    ctx.fail("inner dimensions differ: ", shape_to_string(a), (ta ? "^T" : ""), " @ ", shape_to_string(b), (tb ? "^T" : ""));
  g.a_batch.assign(a.begin(), a.end() - 2);
  g.b_batch.assign(b.begin(), b.end() - 2);
  broadcast_batch(ctx, a, b, &g);
  g.output.push_back(g.M), g.output.push_back(g.N);
  return g;
}

MatMulGeom gemm_geometry(const PrepareContext& ctx, const Shape& a, const Shape& b, const Shape* c, bool ta, bool tb,
                         bool c_exact) {
  if (a.size() != 2 || b.size() != 2) ctx.fail("A and B must be 2-D, got ", shape_to_string(a), " and ", shape_to_string(b));
  MatMulGeom g;
  g.M = ta ? a[1] : a[0];
  g.K = ta ? a[0] : a[1];
  g.N = tb ? b[0] : b[1];
  const int64_t kb = tb ? b[1] : b[0];
  if (kb != g.K) ctx.fail("inner dimensions differ: op(A) is [", g.M, ", ", g.K, "], op(B) is [", kb, ", ", g.N, "]");
  if (c) {
    bool ok = c->size() <= 2 && (!c_exact || c->size() == 2);
    for (size_t i = 0; ok && i < c->size(); ++i) {
      const int64_t want = (c->size() == 2 && i == 0) ? g.M : g.N;
      ok = (*c)[i] == want || ((*c)[i] == 1 && !c_exact);
    }
    if (!ok) ctx.fail("C of shape ", shape_to_string(*c), " does not broadcast to [", g.M, ", ", g.N, "]");
  }
  g.output = {g.M, g.N};
  return g;
}

}  // namespace onnxtrain::kernels::shape
