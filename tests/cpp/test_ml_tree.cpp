// ai.onnx.ml TreeEnsembleRegressor / TreeEnsembleClassifier against a reference evaluation written
// here in double (node lookups by (tree, node) id, recursion, the aggregates and post transforms
// spelled out): random ensembles over every node mode, NaN inputs with and without missing-value
// tracking, every aggregate and post transform, the classifier's binary cases, the opset-3 double
// attributes; and malformed models refused with errors naming the node and the attribute.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>

#include "ml_reference.h"
#include "test_util.h"

namespace ot_test {
std::string thrown_by(const std::function<void()>& f);  // test_reduce.cpp
}

using namespace ot_test;

namespace {

const char* kMl = "ai.onnx.ml";
const char* kModes[] = {"BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"};

std::vector<float> to_floats(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// An ensemble as its attributes.
struct Ensemble {
  std::vector<int64_t> tree, node, feature, yes, no, missing;
  std::vector<std::string> mode;
  std::vector<double> value;
  std::vector<int64_t> w_tree, w_node, w_id;
  std::vector<double> w_value;
  std::vector<double> base;

  size_t add_node(int64_t t, int64_t id, const std::string& m, int64_t f, double v, int64_t y, int64_t n,
                  int64_t miss = 0) {
    tree.push_back(t), node.push_back(id), mode.push_back(m), feature.push_back(f), value.push_back(v);
    yes.push_back(y), no.push_back(n), missing.push_back(miss);
    return tree.size() - 1;
  }
  void add_weight(int64_t t, int64_t id, int64_t target, double w) {
    w_tree.push_back(t), w_node.push_back(id), w_id.push_back(target), w_value.push_back(w);
  }

  /// The attributes; `as_tensor`: values, weights and base values as double tensors (opset 3).
  std::vector<ir::Attribute> attrs(bool classifier, bool as_tensor = false) const {
    const std::string w = classifier ? "class_" : "target_";
    std::vector<ir::Attribute> a = {attr_ints("nodes_treeids", tree),         attr_ints("nodes_nodeids", node),
                                    attr_ints("nodes_featureids", feature),   attr_strings("nodes_modes", mode),
                                    attr_ints("nodes_truenodeids", yes),      attr_ints("nodes_falsenodeids", no),
                                    attr_ints("nodes_missing_value_tracks_true", missing),
                                    attr_ints(w + "treeids", w_tree),         attr_ints(w + "nodeids", w_node),
                                    attr_ints(w + "ids", w_id)};
    auto values = [&](const std::string& name, const std::vector<double>& v) {
      if (as_tensor) a.push_back(attr_tensor(name + "_as_tensor", Tensor::from_vector<double>({int64_t(v.size())}, v)));
      else a.push_back(attr_floats(name, to_floats(v)));
    };
    values("nodes_values", value);
    values(w + "weights", w_value);
    if (!base.empty()) values("base_values", base);
    return a;
  }
};

// ---- the reference
struct Reference {
  const Ensemble& e;
  std::map<std::pair<int64_t, int64_t>, size_t> at;
  std::vector<size_t> roots;
  std::map<size_t, std::vector<size_t>> leaf_weights;

  explicit Reference(const Ensemble& en) : e(en) {
    std::map<int64_t, bool> seen;
    for (size_t i = 0; i < e.tree.size(); ++i) {
      at[{e.tree[i], e.node[i]}] = i;
      if (!seen[e.tree[i]]) seen[e.tree[i]] = true, roots.push_back(i);
    }
    for (size_t k = 0; k < e.w_tree.size(); ++k) leaf_weights[at.at({e.w_tree[k], e.w_node[k]})].push_back(k);
  }

  static bool test(const std::string& m, double x, double t) {
    if (m == "BRANCH_LEQ") return x <= t;
    if (m == "BRANCH_LT") return x < t;
    if (m == "BRANCH_GTE") return x >= t;
    if (m == "BRANCH_GT") return x > t;
    if (m == "BRANCH_EQ") return x == t;
    return x != t;
  }
  size_t leaf(size_t i, const double* x) const {
    if (e.mode[i] == "LEAF") return i;
    const double v = x[e.feature[i]];
    const bool go = test(e.mode[i], v, e.value[i]) || (e.missing[i] == 1 && std::isnan(v));
    return leaf(at.at({e.tree[i], go ? e.yes[i] : e.no[i]}), x);
  }
  /// Per target: the weights of the leaves x reaches.
  std::vector<std::vector<double>> reached(const double* x, int64_t targets) const {
    std::vector<std::vector<double>> r(static_cast<size_t>(targets));
    for (size_t root : roots) {
      auto it = leaf_weights.find(leaf(root, x));
      if (it == leaf_weights.end()) continue;
      for (size_t k : it->second) r[size_t(e.w_id[k])].push_back(e.w_value[k]);
    }
    return r;
  }
};

std::vector<double> ref_transform(const std::string& post, std::vector<double> s) {
  if (post == "LOGISTIC")
    for (double& v : s) v = ref_logistic(v);
  if (post == "PROBIT")
    for (double& v : s) v = ref_probit(v);
  if (post == "SOFTMAX" || post == "SOFTMAX_ZERO") {
    double m = -1e300, sum = 0;
    for (double v : s) m = std::max(m, v);
    for (double& v : s) {
      const bool zero = post == "SOFTMAX_ZERO" && std::abs(v) <= 1e-7;
      v = zero ? 0 : std::exp(v - m);
      sum += v;
    }
    for (double& v : s) v /= sum;
  }
  return s;
}

// ---- random ensembles
struct RandomEnsemble {
  std::mt19937 rng;
  explicit RandomEnsemble(unsigned seed) : rng(seed) {}
  int64_t pick(int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(rng); }
  // Thresholds and inputs on a grid of quarters (exact in float): ties at thresholds happen, so
  // LEQ/LT, GTE/GT and EQ/NEQ differ; integer inputs (`ints`) meet the integer thresholds.
  double grid(bool ints) { return ints ? double(pick(7) - 3) : double(pick(9) - 4) / 4; }

  // A tree of `depth` (some branches stop early), node ids spaced and listed in shuffled order
  // after the root; leaves weight `targets` columns (a random subset when `sparse`).
  void tree(Ensemble& e, int64_t t, int depth, int64_t features, int64_t targets, bool modes, bool ints,
            bool sparse, bool positive) {
    std::vector<size_t> entries;
    int64_t next = 0;
    std::function<int64_t(int)> build = [&](int d) -> int64_t {
      const int64_t id = 3 * next++ + 5;
      if (d == 0 || (d < depth && pick(4) == 0)) {
        entries.push_back(e.add_node(t, id, "LEAF", 0, 0, 0, 0));
        for (int64_t k = 0; k < targets; ++k)
          if (!sparse || pick(2) == 0) e.add_weight(t, id, k, positive ? double(pick(8) + 1) / 8 : double(pick(17) - 8) / 8);
        return id;
      }
      const size_t i = e.add_node(t, id, modes ? kModes[pick(6)] : "BRANCH_LEQ", pick(features), grid(ints), 0, 0,
                                  pick(2));
      entries.push_back(i);
      const int64_t y = build(d - 1), n = build(d - 1);
      e.yes[i] = y, e.no[i] = n;
      return id;
    };
    const size_t first = e.tree.size();
    build(depth);
    // Shuffle the entries after the root (the root stays first: it is the tree's first node).
    std::vector<size_t> order(e.tree.size() - first - 1);
    for (size_t k = 0; k < order.size(); ++k) order[k] = first + 1 + k;
    std::shuffle(order.begin(), order.end(), rng);
    Ensemble copy = e;
    for (size_t k = 0; k < order.size(); ++k) {
      const size_t to = first + 1 + k, from = order[k];
      e.tree[to] = copy.tree[from], e.node[to] = copy.node[from], e.feature[to] = copy.feature[from];
      e.yes[to] = copy.yes[from], e.no[to] = copy.no[from], e.missing[to] = copy.missing[from];
      e.mode[to] = copy.mode[from], e.value[to] = copy.value[from];
    }
  }

  Tensor input(DType dt, int64_t rows, int64_t features, bool nans, std::vector<double>* values) {
    const bool ints = dt == DType::kInt64 || dt == DType::kInt32;
    values->resize(size_t(rows * features));
    for (double& v : *values) v = nans && pick(6) == 0 ? std::nan("") : grid(ints);
    return from_double(dt, {rows, features}, *values);
  }
};

struct RegCase {
  DType dt = DType::kFloat32;
  int64_t trees = 5, features = 4, targets = 1, rows = 40;
  std::string aggregate = "SUM", post = "NONE";
  bool base = false, nans = true, sparse = false;
  bool leq_only = false;  ///< BRANCH_LEQ nodes without missing-value tracking (the kernel's fast walk)
  int threads = 1;
};

void check_regressor(const RegCase& c, unsigned seed) {
  RandomEnsemble g(seed);
  Ensemble e;
  const bool ints = c.dt == DType::kInt64 || c.dt == DType::kInt32;
  for (int64_t t = 0; t < c.trees; ++t) g.tree(e, t * 7 + 2, 3, c.features, c.targets, !c.leq_only, ints, c.sparse, c.post == "PROBIT");
  if (c.leq_only) std::fill(e.missing.begin(), e.missing.end(), 0);
  if (c.post == "PROBIT")  // scores in (0, 1): weights in (0, 0.5]
    for (double& w : e.w_value) w /= 2;
  if (c.base)
    for (int64_t k = 0; k < c.targets; ++k) e.base.push_back(double(k) - 0.75);
  std::vector<double> xs;
  const Tensor x = g.input(c.dt, c.rows, c.features, c.nans && !ints, &xs);
  auto attrs = e.attrs(false);
  attrs.push_back(attr_int("n_targets", c.targets));
  attrs.push_back(attr_string("aggregate_function", c.aggregate));
  attrs.push_back(attr_string("post_transform", c.post));
  RunOptions o;
  o.domain = kMl;
  o.threads = c.threads;
  const auto y = run_node("TreeEnsembleRegressor", {x}, attrs, o);

  Reference ref(e);
  std::vector<double> expect;
  for (int64_t r = 0; r < c.rows; ++r) {
    const auto reached = ref.reached(xs.data() + r * c.features, c.targets);
    std::vector<double> s(size_t(c.targets));
    for (int64_t k = 0; k < c.targets; ++k) {
      const auto& w = reached[size_t(k)];
      double v = 0;
      if (c.aggregate == "SUM" || c.aggregate == "AVERAGE") {
        for (double x1 : w) v += x1;
        if (c.aggregate == "AVERAGE") v /= double(c.trees);
      } else if (!w.empty()) {
        v = c.aggregate == "MIN" ? *std::min_element(w.begin(), w.end()) : *std::max_element(w.begin(), w.end());
      }
      s[size_t(k)] = v + (c.base ? e.base[size_t(k)] : 0);
    }
    // One target: only PROBIT applies (onnxruntime's rule).
    if (c.targets > 1 || c.post == "PROBIT") s = ref_transform(c.post, s);
    expect.insert(expect.end(), s.begin(), s.end());
  }
  EXPECT_TRUE(all_close(y[0], {c.rows, c.targets}, expect, 1e-5, 1e-5))
      << "seed " << seed << " " << onnxtrain::dtype_name(c.dt) << " " << c.aggregate << " " << c.post;
}

// ---- classifier reference: onnxruntime's rules, written out
struct ClsCase {
  int64_t classes = 3, trees = 4, features = 3, rows = 40;
  std::string post = "NONE";
  std::vector<double> base;
  bool strings = false;
  enum Weights { kAll, kSparse, kOneColumnPositive, kOneColumnMixed } weights = kAll;
};

// Returns the label index; z gets the scores.
int64_t ref_classify(const ClsCase& c, const std::vector<std::vector<double>>& reached, bool binary_case,
                     bool all_positive, std::vector<double>* z) {
  const size_t C = size_t(c.classes);
  std::vector<double> s(C, 0);
  std::vector<bool> has(C, false);
  for (size_t k = 0; k < C; ++k)
    for (double w : reached[k]) s[k] += w, has[k] = true;
  if (C > 2) {
    for (size_t k = 0; k < c.base.size(); ++k) s[k] += c.base[k], has[k] = true;
    int64_t best = 0;
    bool any = false;
    for (size_t k = 0; k < C; ++k)
      if (has[k] && (!any || s[k] > s[size_t(best)])) best = int64_t(k), any = true;
    *z = ref_transform(c.post, s);
    return best;
  }
  // Two classes.
  bool one = !has[1] && c.base.size() != 2;  // a single score column
  if (c.base.size() == 2 && has[1]) {
    s[1] = c.base[1] + s[0], s[0] = -s[1];
  } else if (c.base.size() == 2) {
    s[0] += c.base[0], s[1] += c.base[1];
  } else if (c.base.size() == 1) {
    s[0] += c.base[0];
  }
  const double pos = !one && has[1] ? s[1] : has[0] ? s[0] : 0;
  const bool positive = binary_case && all_positive ? pos > 0.5 : pos > 0;
  if (!one) *z = ref_transform(c.post, s);
  else if (binary_case && all_positive) *z = {1 - s[0], s[0]};
  else if (c.post == "LOGISTIC") *z = {ref_logistic(-s[0]), ref_logistic(s[0])};
  else if (binary_case || c.base.empty()) *z = {-s[0], s[0]};
  else *z = {s[0], 0};
  return positive ? 1 : 0;
}

void check_classifier(const ClsCase& c, unsigned seed) {
  RandomEnsemble g(seed);
  Ensemble e;
  const bool one_column = c.weights == ClsCase::kOneColumnPositive || c.weights == ClsCase::kOneColumnMixed;
  for (int64_t t = 0; t < c.trees; ++t)
    g.tree(e, t, 3, c.features, one_column ? 1 : c.classes, true, false, c.weights == ClsCase::kSparse,
           c.weights == ClsCase::kOneColumnPositive || c.post == "PROBIT");
  if (c.weights == ClsCase::kOneColumnPositive)  // probabilities: the trees' p sum to at most 1
    for (double& w : e.w_value) w /= double(c.trees);
  if (c.post == "PROBIT")  // scores in (0, 1)
    for (double& w : e.w_value) w /= 2 * double(c.trees);
  e.base = c.base;
  std::vector<double> xs;
  const Tensor x = g.input(DType::kFloat32, c.rows, c.features, true, &xs);
  std::vector<int64_t> labels;
  std::vector<std::string> names;
  for (int64_t k = 0; k < c.classes; ++k) labels.push_back(10 * k + 7), names.push_back("class_" + std::to_string(k));
  auto attrs = e.attrs(true);
  attrs.push_back(c.strings ? attr_strings("classlabels_strings", names) : attr_ints("classlabels_int64s", labels));
  attrs.push_back(attr_string("post_transform", c.post));
  RunOptions o;
  o.domain = kMl;
  o.num_outputs = 2;
  const auto y = run_node("TreeEnsembleClassifier", {x}, attrs, o);

  Reference ref(e);
  std::set<int64_t> used(e.w_id.begin(), e.w_id.end());
  const bool binary_case = c.classes == 2 && used.size() == 1;
  bool all_positive = true;
  for (double w : e.w_value) all_positive = all_positive && w >= 0;
  std::vector<double> expect;
  ASSERT_EQ(y[0].shape(), Shape({c.rows})) << "seed " << seed;
  for (int64_t r = 0; r < c.rows; ++r) {
    std::vector<double> z;
    const int64_t k = ref_classify(c, ref.reached(xs.data() + r * c.features, c.classes), binary_case, all_positive, &z);
    expect.insert(expect.end(), z.begin(), z.end());
    if (c.strings) EXPECT_EQ(y[0].data<std::string>()[r], names[size_t(k)]) << "row " << r << ", seed " << seed;
    else EXPECT_EQ(y[0].data<int64_t>()[r], labels[size_t(k)]) << "row " << r << ", seed " << seed;
  }
  EXPECT_TRUE(all_close(y[1], {c.rows, c.classes}, expect, 1e-5, 1e-5)) << "seed " << seed << " " << c.post;
}

}  // namespace

TEST(MlTree, RegressorModesAggregatesTransforms) {
  unsigned seed = 100;
  for (const char* agg : {"SUM", "AVERAGE", "MIN", "MAX"})
    for (int64_t targets : {1, 3})
      for (bool base : {false, true}) {
        RegCase c;
        c.aggregate = agg, c.targets = targets, c.base = base;
        check_regressor(c, seed++);
        c.sparse = true;  // targets no reached leaf weights: base value (or 0) only
        check_regressor(c, seed++);
      }
  for (const char* post : {"NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"})
    for (int64_t targets : {1, 3}) {
      RegCase c;
      c.post = post, c.targets = targets, c.base = true;
      if (std::string(post) == "PROBIT") c.aggregate = "AVERAGE", c.targets = 1, c.base = false;  // (0, 1)
      check_regressor(c, seed++);
    }
}

TEST(MlTree, RegressorInputTypesAndThreads) {
  unsigned seed = 200;
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32}) {
    RegCase c;
    c.dt = dt, c.targets = 2;
    check_regressor(c, seed++);
  }
  RegCase big;  // many rows over several threads (blocks of rows in parallel)
  big.rows = 3000, big.trees = 20, big.targets = 2, big.threads = 4;
  check_regressor(big, seed++);
  big.leq_only = true, big.rows = 1001;  // the side-by-side walk, partial blocks and lanes
  check_regressor(big, seed++);
  for (DType dt : {DType::kFloat64, DType::kInt32}) {
    RegCase leq;
    leq.dt = dt, leq.leq_only = true, leq.rows = 13;
    check_regressor(leq, seed++);
  }
}

TEST(MlTree, RegressorOneRowInput) {  // X of shape [C]: one row, Y [1, n_targets]
  Ensemble e;
  e.add_node(0, 0, "BRANCH_LEQ", 1, 0.5, 1, 2);
  e.add_node(0, 1, "LEAF", 0, 0, 0, 0);
  e.add_node(0, 2, "LEAF", 0, 0, 0, 0);
  e.add_weight(0, 1, 0, 1.5);
  e.add_weight(0, 2, 0, -2.5);
  auto attrs = e.attrs(false);
  attrs.push_back(attr_int("n_targets", 1));
  RunOptions o;
  o.domain = kMl;
  EXPECT_TRUE(all_close(run_node("TreeEnsembleRegressor", {Tensor::from_vector<float>({2}, {9.f, 0.25f})}, attrs, o)[0],
                        {1, 1}, {1.5}));
  EXPECT_TRUE(all_close(run_node("TreeEnsembleRegressor", {Tensor::from_vector<float>({2}, {9.f, 0.75f})}, attrs, o)[0],
                        {1, 1}, {-2.5}));
}

// Chains (a leaf at every depth) of BRANCH_LEQ nodes: a shallow one takes the kernel's stepped walk
// (leaves step to themselves until the tree's depth), a deep one (past 24) the row-by-row walk.
TEST(MlTree, UnbalancedLeqChains) {
  for (int64_t depth : {10, 30}) {
    Ensemble e;
    for (int64_t i = 0; i < depth; ++i) {
      e.add_node(0, 2 * i, "BRANCH_LEQ", 1, double(i) + 0.5, 2 * i + 1, 2 * i + 2);
      e.add_node(0, 2 * i + 1, "LEAF", 0, 0, 0, 0);
      e.add_weight(0, 2 * i + 1, 0, double(i));
    }
    e.add_node(0, 2 * depth, "LEAF", 0, 0, 0, 0);
    e.add_weight(0, 2 * depth, 0, -1);
    std::vector<double> xs;
    for (int64_t r = 0; r < 70; ++r) xs.push_back(double(r % 7)), xs.push_back(double(r) / 2 - 1);
    auto attrs = e.attrs(false);
    attrs.push_back(attr_int("n_targets", 1));
    RunOptions o;
    o.domain = kMl;
    const auto y = run_node("TreeEnsembleRegressor", {from_double(DType::kFloat32, {70, 2}, xs)}, attrs, o);
    Reference ref(e);
    std::vector<double> expect;
    for (int64_t r = 0; r < 70; ++r) expect.push_back(ref.reached(xs.data() + 2 * r, 1)[0].at(0));
    EXPECT_TRUE(all_close(y[0], {70, 1}, expect)) << "depth " << depth;
  }
}

// Missing values: a NaN goes to the true child only where nodes_missing_value_tracks_true is 1;
// elsewhere the comparison decides (false, but true for BRANCH_NEQ).
TEST(MlTree, MissingValues) {
  for (const char* mode : kModes)
    for (int64_t track : {0, 1}) {
      Ensemble e;
      e.add_node(0, 0, mode, 0, 1.0, 1, 2, track);
      e.add_node(0, 1, "LEAF", 0, 0, 0, 0);
      e.add_node(0, 2, "LEAF", 0, 0, 0, 0);
      e.add_weight(0, 1, 0, 10);
      e.add_weight(0, 2, 0, 20);
      auto attrs = e.attrs(false);
      attrs.push_back(attr_int("n_targets", 1));
      RunOptions o;
      o.domain = kMl;
      const auto y = run_node("TreeEnsembleRegressor", {Tensor::from_vector<float>({1, 1}, {NAN})}, attrs, o);
      const bool go = track == 1 || std::string(mode) == "BRANCH_NEQ";
      EXPECT_TRUE(all_close(y[0], {1, 1}, {go ? 10.0 : 20.0})) << mode << " track " << track;
    }
}

TEST(MlTree, ClassifierMulticlass) {
  unsigned seed = 300;
  for (const char* post : {"NONE", "SOFTMAX", "SOFTMAX_ZERO", "LOGISTIC", "PROBIT"})
    for (auto w : {ClsCase::kAll, ClsCase::kSparse}) {
      ClsCase c;
      c.post = post, c.weights = w;
      if (std::string(post) == "PROBIT") {  // scores in (0, 1)
        c.weights = ClsCase::kAll;
        c.trees = 1;
      }
      check_classifier(c, seed++);
      if (c.post == "PROBIT") continue;
      c.base = {0.25, -0.5, 1.0};
      check_classifier(c, seed++);
    }
  ClsCase strings;
  strings.strings = true, strings.post = "SOFTMAX", strings.classes = 4;
  check_classifier(strings, seed++);
}

// skl2onnx's binary forms: one weight column (class id 0) for two labels.
TEST(MlTree, ClassifierBinaryCases) {
  unsigned seed = 400;
  ClsCase rf;  // random forest: probabilities of the positive class -> [1 - p, p], label p > 0.5
  rf.classes = 2, rf.weights = ClsCase::kOneColumnPositive;
  check_classifier(rf, seed++);
  rf.strings = true;
  check_classifier(rf, seed++);
  ClsCase gb;  // gradient boosting: a margin and LOGISTIC -> [s(-m), s(m)], label m > 0
  gb.classes = 2, gb.weights = ClsCase::kOneColumnMixed, gb.post = "LOGISTIC", gb.base = {0.3};
  check_classifier(gb, seed++);
  gb.post = "NONE";  // margins: [-m, m]
  check_classifier(gb, seed++);
  gb.base = {};
  check_classifier(gb, seed++);
  ClsCase two;  // both columns weighted: two scores as they are, label by the second score's sign
  two.classes = 2, two.weights = ClsCase::kAll;
  check_classifier(two, seed++);
  two.base = {0.5, 0.5};
  check_classifier(two, seed++);
  two.post = "SOFTMAX", two.base = {};
  check_classifier(two, seed++);
}

// Opset 3: thresholds, weights and base values in double for double inputs.
TEST(MlTree, DoubleAttributesAsTensors) {
  const double th = 0.1, eps = 1e-12;  // x = th + eps: above th in double, equal in float
  Ensemble e;
  e.add_node(0, 0, "BRANCH_LEQ", 0, th, 1, 2);
  e.add_node(0, 1, "LEAF", 0, 0, 0, 0);
  e.add_node(0, 2, "LEAF", 0, 0, 0, 0);
  e.add_weight(0, 1, 0, 1 + 1e-10);
  e.add_weight(0, 2, 0, 2 + 1e-10);
  e.base = {1e-9};
  auto attrs = e.attrs(false, true);
  attrs.push_back(attr_int("n_targets", 1));
  RunOptions o;
  o.domain = kMl;
  o.domain_opset = 3;
  const Tensor x = Tensor::from_vector<double>({2, 1}, {th + eps, th - eps});
  const auto y = run_node("TreeEnsembleRegressor", {x}, attrs, o);
  EXPECT_TRUE(all_close(y[0], {2, 1}, {2 + 1e-10 + 1e-9, 1 + 1e-10 + 1e-9}, 0, 1e-6));
  // Float inputs compare in float: th + eps rounds to th's float.
  const auto yf = run_node("TreeEnsembleRegressor", {Tensor::from_vector<float>({1, 1}, {float(th + eps)})}, attrs, o);
  EXPECT_TRUE(all_close(yf[0], {1, 1}, {1.0}));
  // The same attributes at opset 1 are refused, naming the attribute.
  o.domain_opset = 1;
  const std::string m = thrown_by([&] { run_node("TreeEnsembleRegressor", {x}, attrs, o); });
  EXPECT_NE(m.find("nodes_values_as_tensor exists from ai.onnx.ml opset 3"), std::string::npos) << m;
}

// ---- malformed models
namespace {

Ensemble small_tree() {
  Ensemble e;
  e.add_node(0, 0, "BRANCH_LEQ", 0, 0.5, 1, 2);
  e.add_node(0, 1, "BRANCH_GT", 1, 0.0, 3, 4);
  e.add_node(0, 2, "LEAF", 0, 0, 0, 0);
  e.add_node(0, 3, "LEAF", 0, 0, 0, 0);
  e.add_node(0, 4, "LEAF", 0, 0, 0, 0);
  for (int64_t id : {2, 3, 4}) e.add_weight(0, id, 0, double(id));
  return e;
}

void expect_refused(const std::vector<ir::Attribute>& attrs, const std::string& kind, const std::string& what,
                    bool classifier = false, const Tensor& x = Tensor::from_vector<float>({1, 2}, {0.f, 1.f})) {
  RunOptions o;
  o.domain = kMl;
  o.num_outputs = classifier ? 2 : 1;
  const std::string op = classifier ? "TreeEnsembleClassifier" : "TreeEnsembleRegressor";
  const std::string m = thrown_by([&] { run_node(op, {x}, attrs, o); });
  EXPECT_EQ(m.rfind(kind + ": ", 0), 0u) << "expected " << kind << ", got '" << m << "'";
  EXPECT_NE(m.find("node_" + op), std::string::npos) << m;
  EXPECT_NE(m.find(what), std::string::npos) << m;
}

std::vector<ir::Attribute> regressor_attrs(const Ensemble& e, int64_t targets = 1) {
  auto a = e.attrs(false);
  a.push_back(attr_int("n_targets", targets));
  return a;
}

}  // namespace

TEST(MlTree, MalformedModelsAreRefused) {
  {  // the well-formed tree runs
    RunOptions o;
    o.domain = kMl;
    const auto y = run_node("TreeEnsembleRegressor", {Tensor::from_vector<float>({2, 2}, {0.f, 1.f, 0.f, -1.f})},
                            regressor_attrs(small_tree()), o);
    EXPECT_TRUE(all_close(y[0], {2, 1}, {3, 4}));
  }
  Ensemble e = small_tree();
  e.feature.pop_back();
  expect_refused(regressor_attrs(e), "InvalidModel", "attribute nodes_featureids has 4 entries, nodes_nodeids 5");
  e = small_tree();
  e.mode.pop_back();
  expect_refused(regressor_attrs(e), "InvalidModel", "nodes_modes has 4 entries");
  e = small_tree();
  e.value.push_back(1);
  expect_refused(regressor_attrs(e), "InvalidModel", "nodes_values has 6 entries");
  e = small_tree();
  e.w_id.pop_back();
  expect_refused(regressor_attrs(e), "InvalidModel", "attribute target_nodeids has 3 entries, target_ids 2");
  e = small_tree();
  e.no[1] = 9;  // dangling child
  expect_refused(regressor_attrs(e), "InvalidModel",
                 "nodes_falsenodeids: node 1 of tree 0 (entry 1) has false child 9, which tree 0 does not have");
  e = small_tree();
  e.yes[1] = 0;  // back to the root: a cycle
  expect_refused(regressor_attrs(e), "InvalidModel", "the nodes of tree 0 form a cycle");
  e = small_tree();
  e.yes[1] = 1;  // itself
  expect_refused(regressor_attrs(e), "InvalidModel", "form a cycle");
  e = small_tree();
  e.mode[1] = "BRANCH_LE";
  expect_refused(regressor_attrs(e), "InvalidModel", "nodes_modes: node 1 of tree 0 (entry 1) has mode 'BRANCH_LE'");
  e = small_tree();
  e.node[2] = 1;  // (tree 0, node 1) twice
  expect_refused(regressor_attrs(e), "InvalidModel", "nodes_nodeids: node 1 of tree 0 (entry 2) repeats entry 1");
  e = small_tree();
  e.feature[1] = -1;
  expect_refused(regressor_attrs(e), "InvalidModel", "nodes_featureids: node 1 of tree 0 (entry 1) reads feature -1");
  e = small_tree();
  e.missing[0] = 2;
  expect_refused(regressor_attrs(e), "InvalidModel", "nodes_missing_value_tracks_true: node 0 of tree 0 (entry 0) has 2");
  e = small_tree();
  e.w_node[0] = 7;
  expect_refused(regressor_attrs(e), "InvalidModel", "target_nodeids: entry 0 names node 7 of tree 0, which does not exist");
  e = small_tree();
  e.w_id[0] = 1;
  expect_refused(regressor_attrs(e), "InvalidModel", "target_ids: entry 0 (node 2 of tree 0) names target 1, out of range [0, 1)");
  expect_refused(regressor_attrs(small_tree(), 0), "InvalidModel", "attribute n_targets is 0");
  e = small_tree();
  e.base = {1, 2};
  expect_refused(regressor_attrs(e), "InvalidModel", "attribute base_values has 2 entries");
  auto a = regressor_attrs(small_tree());
  a.push_back(attr_string("aggregate_function", "MEDIAN"));
  expect_refused(a, "InvalidModel", "aggregate_function 'MEDIAN'");
  a = regressor_attrs(small_tree());
  a.push_back(attr_string("post_transform", "RELU"));
  expect_refused(a, "InvalidModel", "post_transform 'RELU'");
  expect_refused(regressor_attrs(Ensemble{}), "InvalidModel", "the ensemble has no tree");
  // Inputs: a feature past X's columns, a rank-3 X, a bool X.
  expect_refused(regressor_attrs(small_tree()), "InvalidArgument", "reads feature 1 but X has 1 features",
                 false, Tensor::from_vector<float>({2, 1}, {0.f, 1.f}));
  expect_refused(regressor_attrs(small_tree()), "InvalidArgument", "input X must be [N, C] or [C]", false,
                 Tensor::zeros(DType::kFloat32, {1, 1, 2}));
  expect_refused(regressor_attrs(small_tree()), "InvalidArgument", "input X must be float, double, int64 or int32", false,
                 Tensor::zeros(DType::kBool, {1, 2}));
  {  // inputs and outputs the schema does not have
    RunOptions o;
    o.domain = kMl;
    o.num_outputs = 2;
    const Tensor x = Tensor::from_vector<float>({1, 2}, {0.f, 1.f});
    std::string m = thrown_by([&] { run_node("TreeEnsembleRegressor", {x}, regressor_attrs(small_tree()), o); });
    EXPECT_NE(m.find("2 outputs, the TreeEnsembleRegressor schema allows 1 to 1"), std::string::npos) << m;
    o.num_outputs = 1;
    m = thrown_by([&] { run_node("TreeEnsembleRegressor", {x, x}, regressor_attrs(small_tree()), o); });
    EXPECT_NE(m.find("2 inputs, the TreeEnsembleRegressor schema allows 1 to 1"), std::string::npos) << m;
  }
  // Classifiers: labels of both kinds, none, a single one; class id out of range.
  auto c = small_tree().attrs(true);
  c.push_back(attr_ints("classlabels_int64s", {0, 1}));
  c.push_back(attr_strings("classlabels_strings", {"a", "b"}));
  expect_refused(c, "InvalidModel", "classlabels_int64s and classlabels_strings are both given", true);
  expect_refused(small_tree().attrs(true), "InvalidModel", "no class labels", true);
  c = small_tree().attrs(true);
  c.push_back(attr_ints("classlabels_int64s", {4}));
  expect_refused(c, "NotImplemented", "a TreeEnsembleClassifier with a single class label", true);
  e = small_tree();
  e.w_id[1] = 2;
  c = e.attrs(true);
  c.push_back(attr_ints("classlabels_int64s", {0, 1}));
  expect_refused(c, "InvalidModel", "class_ids: entry 1 (node 3 of tree 0) names class 2, out of range [0, 2)", true);
}

// A forest of 100 depth-8 trees over 10,000 rows: the evaluation is compiled, so it takes
// milliseconds (the bound only catches a pathological slowdown: shared machines vary tenfold).
TEST(MlTree, ForestSpeed) {
  RandomEnsemble g(500);
  Ensemble e;
  for (int64_t t = 0; t < 100; ++t) g.tree(e, t, 8, 10, 1, false, false, false, false);
  std::fill(e.missing.begin(), e.missing.end(), 0);  // BRANCH_LEQ only: the side-by-side walk
  std::vector<double> xs;
  const Tensor x = g.input(DType::kFloat32, 10000, 10, false, &xs);
  auto attrs = e.attrs(false);
  attrs.push_back(attr_int("n_targets", 1));
  attrs.push_back(attr_string("aggregate_function", "AVERAGE"));
  RunOptions o;
  o.domain = kMl;
  o.threads = 2;
  const auto t0 = std::chrono::steady_clock::now();
  const auto y = run_node("TreeEnsembleRegressor", {x}, attrs, o);  // runs the node 4 times (providers, plans)
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("100 trees x 10000 rows: %.1f ms for 4 runs\n", ms);
  EXPECT_LT(ms, 10000.0);
  Reference ref(e);  // every 20th row
  for (int64_t r = 0; r < 10000; r += 20) {
    double s = 0;
    const auto reached = ref.reached(xs.data() + r * 10, 1);
    for (double w : reached[0]) s += w;
    EXPECT_NEAR(y[0].data<float>()[r], s / 100, 1e-5) << "row " << r;
  }
}
