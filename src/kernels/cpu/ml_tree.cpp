// ai.onnx.ml tree ensembles (opsets 1, 3 and 5 of ai.onnx.ml), with onnxruntime's semantics:
//   TreeEnsembleRegressor(X) -> Y float [N, n_targets]            (opsets 1-4)
//   TreeEnsembleClassifier(X) -> (Y labels [N] int64 or string, Z scores float [N, classes])  (1-4)
//   TreeEnsemble(X) -> Y [N, n_targets] of X's type (float, double) (opset 5: compiled into the
//     regressor's form, plus BRANCH_MEMBER nodes)
// The attributes are validated and compiled once per kernel (kernels/shape/ml_tree.h: flat node
// arrays, each leaf's weights contiguous); per plan the nodes are laid out in the threshold type
// (double for double inputs, float otherwise, as onnxruntime compares). A run walks blocks of rows
// tree by tree (a tree stays in cache over the block), blocks in parallel; BRANCH_LEQ-only trees
// (scikit-learn's) 16 rows side by side in branchless steps.
//
// Scores: the leaves' weights aggregated per target (SUM, AVERAGE, MIN, MAX; classifiers SUM),
// then base_values, then post_transform (computed in float, as onnxruntime does: PROBIT with its
// erfinv approximation). onnxruntime's special cases are kept: a single target's score takes only
// PROBIT (other transforms leave it as it is); a two-class classifier whose weights name one class
// column (skl2onnx's binary models) writes [1 - p, p] (all weights positive: label = p > 0.5) or
// [-s, s] / [logistic(-s), logistic(s)] (label = s > 0). Where onnxruntime drops a base value of a
// target or class that no reached leaf weighted, the base value counts here.
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>

#include "kernels/cpu/common.h"
#include "kernels/cpu/ml_common.h"
#include "kernels/registry.h"
#include "kernels/shape/ml_tree.h"

namespace onnxtrain::kernels::cpu {

namespace {

using shape::TreeAggregate;
using shape::TreeEnsembleSpec;
using shape::TreeMode;
using shape::PostTransform;

/// A node in the threshold type TH. Branch: yes/no are node indices; leaf: the leaf's weights are
/// [yes, yes + no).
template <class TH>
struct FlatNode {
  TH value;
  int32_t feature;
  int32_t yes, no;
  TreeMode mode;
  uint8_t missing_true;
};

template <class TH>
struct FlatEnsemble {
  std::vector<FlatNode<TH>> nodes;
  std::vector<int32_t> target;
  std::vector<TH> weight;
  std::vector<TH> base;
  bool leq_only = true;  ///< every branch is BRANCH_LEQ without missing-value tracking
  /// BRANCH_LEQ-only ensembles: children by outcome, a leaf its own child (walks of a tree's depth
  /// end at the leaf), and each tree's depth (in the order of the roots).
  struct LeqNode {
    TH value;
    int32_t feature;
    int32_t child[2];  ///< [x <= value, otherwise]
  };
  std::vector<LeqNode> leq;
  std::vector<int32_t> depth;
  // BRANCH_MEMBER nodes (TreeEnsemble): node i's values are members[first[i], first[i] + count[i]).
  std::vector<int32_t> member_first, member_count;
  std::vector<TH> members;
  bool is_member(size_t i, TH v) const {
    const TH* m = members.data() + member_first[i];
    for (int32_t k = 0; k < member_count[i]; ++k)
      if (v == m[k]) return true;
    return false;
  }

  explicit FlatEnsemble(const TreeEnsembleSpec& s) : target(s.weight_target), base(s.base_values.begin(), s.base_values.end()) {
    nodes.resize(s.mode.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      const bool leaf = s.mode[i] == TreeMode::kLeaf;
      nodes[i] = FlatNode<TH>{TH(s.threshold[i]), s.feature[i], leaf ? s.leaf_first[i] : s.true_child[i],
                              leaf ? s.leaf_count[i] : s.false_child[i], s.mode[i], s.missing_true[i]};
      if (!leaf && (s.mode[i] != TreeMode::kLeq || s.missing_true[i])) leq_only = false;
    }
    weight.assign(s.weight_value.begin(), s.weight_value.end());
    member_first = s.member_first;
    member_count = s.member_count;
    members.assign(s.member_values.begin(), s.member_values.end());
    if (!leq_only) return;
    leq.resize(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      const bool leaf = s.mode[i] == TreeMode::kLeaf;
      const int32_t self = int32_t(i);
      leq[i] = LeqNode{leaf ? TH(0) : nodes[i].value, leaf ? 0 : nodes[i].feature,
                       {leaf ? self : s.true_child[i], leaf ? self : s.false_child[i]}};
    }
    // Longest path from each root (the trees have no cycle; shared subtrees are measured once).
    std::vector<int32_t> d(nodes.size(), -1), stack;
    for (int32_t root : s.roots) {
      stack.assign(1, root);
      while (!stack.empty()) {
        const size_t i = size_t(stack.back());
        if (d[i] >= 0) {
          stack.pop_back();
        } else if (s.mode[i] == TreeMode::kLeaf) {
          d[i] = 0;
        } else if (const int32_t a = s.true_child[i], b = s.false_child[i]; d[size_t(a)] < 0 || d[size_t(b)] < 0) {
          stack.push_back(d[size_t(a)] < 0 ? a : b);
        } else {
          d[i] = 1 + std::max(d[size_t(a)], d[size_t(b)]);
        }
      }
      depth.push_back(d[size_t(root)]);
    }
  }

  /// The leaf (node index) row `x` reaches from `root` (validation guarantees every walk ends at a
  /// leaf).
  template <class X>
  int32_t leaf(int32_t root, const X* x) const {
    int32_t i = root;
    for (const FlatNode<TH>* n = &nodes[size_t(i)]; n->mode != TreeMode::kLeaf; n = &nodes[size_t(i)]) {
      const TH v = TH(x[n->feature]);
      bool go;
      switch (n->mode) {
        case TreeMode::kLeq: go = v <= n->value; break;
        case TreeMode::kLt: go = v < n->value; break;
        case TreeMode::kGte: go = v >= n->value; break;
        case TreeMode::kGt: go = v > n->value; break;
        case TreeMode::kEq: go = v == n->value; break;
        case TreeMode::kMember: go = is_member(size_t(i), v); break;
        default: go = v != n->value; break;
      }
      if (!go && n->missing_true && std::isnan(v)) go = true;
      i = go ? n->yes : n->no;
    }
    return i;
  }

  /// The leaves (node indices) that rows x[0..n) (row stride `cols`) reach from the root of tree
  /// `t` in a BRANCH_LEQ-only ensemble: 16 rows side by side, each for the tree's depth in steps
  /// without a branch (a leaf steps to itself), so that their loads and compares overlap.
  template <class X>
  void leaves_leq(int32_t root, size_t t, const X* x, int64_t cols, int64_t n, int32_t* out) const {
    constexpr int64_t kLanes = 16;
    const int32_t steps = depth[t];
    const LeqNode* nd = leq.data();
    for (int64_t r0 = 0; r0 < n; r0 += kLanes) {
      const int64_t lanes = std::min(kLanes, n - r0);
      const X* xr = x + r0 * cols;
      int32_t* cur = out + r0;
      for (int64_t l = 0; l < lanes; ++l) cur[l] = root;
      for (int32_t step = 0; step < steps; ++step)
        for (int64_t l = 0; l < lanes; ++l) {
          const LeqNode& c = nd[cur[l]];
          cur[l] = c.child[!(TH(xr[l * cols + c.feature]) <= c.value)];
        }
    }
  }
};

// Writes post(s[0..n)) to z (n >= 2).
template <class TH>
void write_transformed(const TH* s, int64_t n, PostTransform post, float* z) {
  for (int64_t k = 0; k < n; ++k) z[k] = float(s[k]);
  ml_transform_row(z, n, post);
}

class TreeEnsembleKernel : public Kernel {
 public:
  TreeEnsembleKernel(const KernelInfo& info, bool classifier) : spec_(info, classifier) {}
  /// TreeEnsemble (ai.onnx.ml opset 5).
  TreeEnsembleKernel(const KernelInfo& info, TreeEnsembleSpec::V5 v5) : spec_(info, v5) {}

  void prepare(PrepareContext& ctx) override {
    rows_ = spec_.prepare(ctx);
    if (ctx.input_dtype(0) == DType::kFloat64) {
      if (!flat_d_) flat_d_ = std::make_unique<FlatEnsemble<double>>(spec_);
    } else if (!flat_f_) {
      flat_f_ = std::make_unique<FlatEnsemble<float>>(spec_);
    }
  }

  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    dispatch<TypeList<float, double, int64_t, int32_t>>(x.dtype(), ctx.node(), [&]<class X>() {
      if constexpr (std::is_same_v<X, double>) evaluate<double>(ctx, *flat_d_, x.data<X>());
      else evaluate<float>(ctx, *flat_f_, x.data<X>());
    });
  }

 private:
  static constexpr int64_t kBlock = 64;  // rows walked together, tree by tree
  // Deeper trees are walked row by row (a walk of the whole depth would waste most of its steps).
  static constexpr int32_t kMaxStepDepth = 24;

  template <class TH, class X>
  void evaluate(RunContext& ctx, const FlatEnsemble<TH>& fe, const X* x) {
    const int64_t T = spec_.n_targets, cols = ctx.input(0).shape().back();
    const int64_t trees = int64_t(spec_.roots.size());
    const bool double_out = !spec_.classifier && ctx.output(0).dtype() == DType::kFloat64;  // TreeEnsemble on doubles
    float* z = spec_.classifier ? (ctx.has_output(1) ? ctx.output(1).data<float>() : nullptr)
                                : (double_out ? nullptr : ctx.output(0).data<float>());
    double* zd = double_out ? ctx.output(0).data<double>() : nullptr;
    int64_t* label_i = spec_.classifier && spec_.labels_string.empty() ? ctx.output(0).data<int64_t>() : nullptr;
    std::string* label_s = spec_.classifier && !spec_.labels_string.empty() ? ctx.output(0).data<std::string>() : nullptr;
    const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, trees));
    parallel_for(rows_, grain, [&](int64_t r0, int64_t r1) {
      const int64_t cap = std::min(kBlock, r1 - r0);  // scratch of at most the chunk's rows
      std::vector<TH> score(size_t(cap * T));
      std::vector<uint8_t> has(size_t(cap * T));
      std::vector<float> zrow(static_cast<size_t>(T));
      for (int64_t b0 = r0; b0 < r1; b0 += kBlock) {
        const int64_t nb = std::min(kBlock, r1 - b0);
        std::fill(score.begin(), score.end(), TH(0));
        std::fill(has.begin(), has.end(), uint8_t(0));
        accumulate(fe, x, cols, b0, nb, score.data(), has.data());
        for (int64_t r = 0; r < nb; ++r) {
          TH* s = score.data() + r * T;
          uint8_t* h = has.data() + r * T;
          if (!spec_.classifier) {
            if (zd) finalize_regression(fe, s, h, zd + (b0 + r) * T, zrow.data());
            else finalize_regression(fe, s, h, z + (b0 + r) * T, zrow.data());
            continue;
          }
          const int64_t k = finalize_classification(fe, s, h, z ? z + (b0 + r) * T : zrow.data());
          if (label_i) label_i[b0 + r] = spec_.labels_int64[size_t(k)];
          else label_s[b0 + r] = spec_.labels_string[size_t(k)];
        }
      }
    });
  }

  // Adds every tree's leaf weights for rows [b0, b0 + nb) into score/has (row-major [nb, T]).
  template <class TH, class X>
  void accumulate(const FlatEnsemble<TH>& fe, const X* x, int64_t cols, int64_t b0, int64_t nb, TH* score,
                  uint8_t* has) const {
    const int64_t T = spec_.n_targets;
    const TreeAggregate agg = spec_.aggregate;
    int32_t leaves[kBlock];
    for (size_t t = 0; t < spec_.roots.size(); ++t) {
      const int32_t root = spec_.roots[t];
      if (fe.leq_only && fe.depth[t] <= kMaxStepDepth) {
        fe.leaves_leq(root, t, x + b0 * cols, cols, nb, leaves);
      } else {
        for (int64_t r = 0; r < nb; ++r) leaves[r] = fe.leaf(root, x + (b0 + r) * cols);
      }
      for (int64_t r = 0; r < nb; ++r) {
        const FlatNode<TH>& leaf = fe.nodes[size_t(leaves[r])];
        for (int32_t w = leaf.yes; w < leaf.yes + leaf.no; ++w) {
          const int64_t at = r * T + fe.target[size_t(w)];
          const TH v = fe.weight[size_t(w)];
          TH& s = score[at];
          if (agg == TreeAggregate::kMin) s = !has[at] || v < s ? v : s;
          else if (agg == TreeAggregate::kMax) s = !has[at] || v > s ? v : s;
          else s += v;
          has[at] = 1;
        }
      }
    }
  }

  // Aggregate, base values and post transform of one row's regression scores.
  // `y` float, or double (TreeEnsemble on doubles: the scores as they are, a post transform computed
  // in float as for float outputs); `tmp` float scratch of n_targets.
  template <class TH, class Y>
  void finalize_regression(const FlatEnsemble<TH>& fe, TH* s, const uint8_t* h, Y* y, float* tmp) const {
    const int64_t T = spec_.n_targets;
    const TH trees = TH(spec_.roots.size());
    const bool has_base = !fe.base.empty();
    for (int64_t k = 0; k < T; ++k) {
      const TH base = has_base ? fe.base[size_t(k)] : TH(0);
      switch (spec_.aggregate) {
        case TreeAggregate::kAverage: s[k] = s[k] / trees + base; break;
        case TreeAggregate::kSum: s[k] += base; break;
        default: s[k] = (h[k] ? s[k] : TH(0)) + base; break;
      }
    }
    if (std::is_same_v<Y, double> && (spec_.post == PostTransform::kNone || (T == 1 && spec_.post != PostTransform::kProbit))) {
      for (int64_t k = 0; k < T; ++k) y[k] = Y(s[k]);
      return;
    }
    if (T == 1) *tmp = spec_.post == PostTransform::kProbit ? ml_probit(float(s[0])) : float(s[0]);
    else write_transformed(s, T, spec_.post, tmp);
    for (int64_t k = 0; k < T; ++k) y[k] = Y(tmp[k]);
  }

  // Base values, post transform and label of one row's class scores (onnxruntime's rules, binary
  // cases included); returns the label's index.
  template <class TH>
  int64_t finalize_classification(const FlatEnsemble<TH>& fe, TH* s, uint8_t* h, float* z) const {
    const int64_t C = spec_.n_targets;
    const size_t nbase = fe.base.size();
    if (C > 2) {
      for (size_t k = 0; k < nbase; ++k) s[k] += fe.base[k], h[k] = 1;
      int64_t best = -1;
      for (int64_t k = 0; k < C; ++k)
        if (h[k] && (best < 0 || s[k] > s[best])) best = k;
      write_transformed(s, C, spec_.post, z);
      return best < 0 ? 0 : best;
    }
    int64_t n = 2;
    if (nbase == 2) {
      if (h[1]) {  // onnxruntime: base_values[0] is assumed equal to base_values[1] and unused
        s[1] = fe.base[1] + s[0];
        s[0] = -s[1];
      } else {
        s[0] += fe.base[0];
        s[1] += fe.base[1];
      }
    } else if (nbase == 1) {
      s[0] += fe.base[0];
      if (!h[1]) n = 1;
    } else if (!h[1]) {
      n = 1;
    }
    const TH pos = n == 2 && h[1] ? s[1] : (h[0] ? s[0] : TH(0));
    // How a single score becomes two: 0/1 probabilities of the positive class, 2/3 margins.
    int add = -1;
    bool positive;
    if (spec_.binary_case && spec_.weights_all_positive) {
      positive = pos > TH(0.5);
      add = positive ? 0 : 1;
    } else {
      positive = pos > TH(0);
      if (spec_.binary_case || nbase == 0) add = positive ? 2 : 3;
    }
    if (n == 2) {
      write_transformed(s, 2, spec_.post, z);
    } else if (add == 0 || add == 1) {
      z[0] = float(TH(1) - s[0]);
      z[1] = float(s[0]);
    } else if (add >= 2 && spec_.post == PostTransform::kLogistic) {
      z[0] = ml_logistic(float(-s[0]));
      z[1] = ml_logistic(float(s[0]));
    } else if (add >= 2) {
      z[0] = float(-s[0]);
      z[1] = float(s[0]);
    } else {  // onnxruntime leaves the second score unwritten
      z[0] = float(s[0]);
      z[1] = 0.f;
    }
    return positive ? 1 : 0;
  }

  TreeEnsembleSpec spec_;
  int64_t rows_ = 0;
  std::unique_ptr<FlatEnsemble<float>> flat_f_;
  std::unique_ptr<FlatEnsemble<double>> flat_d_;
};

}  // namespace

void register_ml_tree(KernelRegistry& r) {
  const std::string domain = "ai.onnx.ml";
  for (const std::string op : {"TreeEnsembleRegressor", "TreeEnsembleClassifier"}) {
    const bool classifier = op == "TreeEnsembleClassifier";
    auto make = [classifier](const KernelInfo& info) -> std::unique_ptr<Kernel> {
      return std::make_unique<TreeEnsembleKernel>(info, classifier);
    };
    // Opset 3 adds the *_as_tensor attributes (the kernel reads them by the node's opset); opset 5
    // deprecates both for TreeEnsemble (ONNX and onnxruntime refuse them there).
    r.add(domain, op, 1, 2, make);
    r.add(domain, op, 3, 4, make);
    r.add(domain, op, 5, kMaxOpsetAll, [op](const KernelInfo& info) -> std::unique_ptr<Kernel> {
      info.fail(op, " is deprecated from ai.onnx.ml opset 5 (onnxruntime refuses it there too): use TreeEnsemble, or "
                "import ai.onnx.ml opset 4 or lower");
    });
  }
  r.add(domain, "TreeEnsemble", 5, kMaxOpsetAll, [](const KernelInfo& info) -> std::unique_ptr<Kernel> {
    return std::make_unique<TreeEnsembleKernel>(info, TreeEnsembleSpec::V5{});
  });
}

}  // namespace onnxtrain::kernels::cpu
