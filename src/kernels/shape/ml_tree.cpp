#include "kernels/shape/ml_tree.h"

#include <cmath>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

namespace onnxtrain::kernels::shape {

namespace {

// A float list attribute, or from ai.onnx.ml opset 3 its tensor form `<name>_as_tensor` (float or
// double), as doubles. Both forms at once are refused.
std::vector<double> read_values(const KernelInfo& info, const std::string& name) {
  const std::string tname = name + "_as_tensor";
  if (const Tensor* t = info.attr_tensor(tname)) {
    if (info.opset() < 3)
      info.fail("attribute ", tname, " exists from ai.onnx.ml opset 3 (the model imports opset ", info.opset(), ")");
    if (info.has_attr(name)) info.fail("attributes ", name, " and ", tname, " are both given (give one)");
    std::vector<double> v(size_t(t->numel()));
    if (t->dtype() == DType::kFloat64) {
      for (size_t i = 0; i < v.size(); ++i) v[i] = t->data<double>()[i];
    } else if (t->dtype() == DType::kFloat32) {
      for (size_t i = 0; i < v.size(); ++i) v[i] = t->data<float>()[i];
    } else {
      info.fail("attribute ", tname, " must be a float or double tensor, got ", dtype_name(t->dtype()));
    }
    return v;
  }
  const std::vector<float> f = info.attr_floats(name, {});
  return {f.begin(), f.end()};
}

TreeMode parse_mode(const std::string& s, bool* ok) {
  static const std::map<std::string, TreeMode> modes = {
      {"BRANCH_LEQ", TreeMode::kLeq}, {"BRANCH_LT", TreeMode::kLt},   {"BRANCH_GTE", TreeMode::kGte},
      {"BRANCH_GT", TreeMode::kGt},   {"BRANCH_EQ", TreeMode::kEq},   {"BRANCH_NEQ", TreeMode::kNeq},
      {"LEAF", TreeMode::kLeaf}};
  auto it = modes.find(s);
  *ok = it != modes.end();
  return *ok ? it->second : TreeMode::kLeaf;
}

// The enumerator string attribute `attr` (default `dflt`) names among `choices`; anything else fails
// listing them.
template <class E>
E parse_choice(const KernelInfo& info, const char* attr, const char* dflt,
               std::initializer_list<std::pair<const char*, E>> choices) {
  const std::string s = info.attr_string(attr, dflt);
  std::string names;
  for (const auto& [name, e] : choices) {
    if (s == name) return e;
    names += (names.empty() ? "" : ", ") + std::string(name);
  }
  info.fail("attribute ", attr, " '", s, "' is not one of ", names);
}

struct PairHash {
  size_t operator()(const std::pair<int64_t, int64_t>& p) const {
    return std::hash<int64_t>()(p.first) * 1000003u ^ std::hash<int64_t>()(p.second);
  }
};

}  // namespace

TreeEnsembleSpec::TreeEnsembleSpec(const KernelInfo& info, bool is_classifier) : classifier(is_classifier) {
  const std::vector<int64_t> tree_ids = info.attr_ints("nodes_treeids", {});
  const std::vector<int64_t> node_ids = info.attr_ints("nodes_nodeids", {});
  const std::vector<int64_t> features = info.attr_ints("nodes_featureids", {});
  const std::vector<std::string> modes = info.attr_strings("nodes_modes", {});
  const std::vector<int64_t> trues = info.attr_ints("nodes_truenodeids", {});
  const std::vector<int64_t> falses = info.attr_ints("nodes_falsenodeids", {});
  const std::vector<int64_t> missing = info.attr_ints("nodes_missing_value_tracks_true", {});
  const std::vector<double> values = read_values(info, "nodes_values");
  const std::vector<double> hitrates = read_values(info, "nodes_hitrates");  // not used to evaluate
  const size_t n = node_ids.size();
  if (n == 0) info.fail("attribute nodes_nodeids is empty: the ensemble has no tree");
  if (n > size_t(std::numeric_limits<int32_t>::max())) info.fail("too many tree nodes (", n, ")");
  auto same_length = [&](const char* name, size_t len, bool optional) {
    if (len != n && !(optional && len == 0))
      info.fail("attribute ", name, " has ", len, " entries, nodes_nodeids ", n, optional ? " (give one per node or none)" : "");
  };
  same_length("nodes_treeids", tree_ids.size(), false);
  same_length("nodes_featureids", features.size(), false);
  same_length("nodes_modes", modes.size(), false);
  same_length("nodes_truenodeids", trues.size(), false);
  same_length("nodes_falsenodeids", falses.size(), false);
  same_length("nodes_values", values.size(), false);
  same_length("nodes_missing_value_tracks_true", missing.size(), true);
  same_length("nodes_hitrates", hitrates.size(), true);

  auto where = [&](size_t i) {
    return "node " + std::to_string(node_ids[i]) + " of tree " + std::to_string(tree_ids[i]) + " (entry " +
           std::to_string(i) + ")";
  };
  std::unordered_map<std::pair<int64_t, int64_t>, int32_t, PairHash> index;
  index.reserve(n);
  std::unordered_map<int64_t, int32_t> first_of_tree;
  mode.resize(n);
  feature.assign(n, 0);
  threshold = values;
  missing_true.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    auto [it, added] = index.emplace(std::make_pair(tree_ids[i], node_ids[i]), int32_t(i));
    if (!added) info.fail("attribute nodes_nodeids: ", where(i), " repeats entry ", it->second);
    if (first_of_tree.emplace(tree_ids[i], int32_t(i)).second) roots.push_back(int32_t(i));
    bool ok;
    mode[i] = parse_mode(modes[i], &ok);
    if (!ok)
      info.fail("attribute nodes_modes: ", where(i), " has mode '", modes[i],
                "' (BRANCH_LEQ, BRANCH_LT, BRANCH_GTE, BRANCH_GT, BRANCH_EQ, BRANCH_NEQ or LEAF)");
    if (!missing.empty()) {
      if (missing[i] != 0 && missing[i] != 1)
        info.fail("attribute nodes_missing_value_tracks_true: ", where(i), " has ", missing[i], " (0 or 1)");
      missing_true[i] = uint8_t(missing[i]);
    }
    if (mode[i] == TreeMode::kLeaf) continue;
    if (features[i] < 0 || features[i] > std::numeric_limits<int32_t>::max())
      info.fail("attribute nodes_featureids: ", where(i), " reads feature ", features[i]);
    feature[i] = int32_t(features[i]);
    if (features[i] > max_feature) {
      max_feature = features[i];
      max_feature_node = int32_t(i);
    }
  }
  // Children: nodes of the same tree.
  true_child.assign(n, -1);
  false_child.assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (mode[i] == TreeMode::kLeaf) continue;
    for (int side = 0; side < 2; ++side) {
      const int64_t child = side == 0 ? trues[i] : falses[i];
      auto it = index.find({tree_ids[i], child});
      if (it == index.end())
        info.fail("attribute ", side == 0 ? "nodes_truenodeids" : "nodes_falsenodeids", ": ", where(i), " has ",
                  side == 0 ? "true" : "false", " child ", child, ", which tree ", tree_ids[i], " does not have");
      (side == 0 ? true_child : false_child)[i] = it->second;
    }
  }
  // No cycle (Kahn's order over the child edges must reach every node), so every walk ends at a leaf.
  {
    std::vector<int32_t> indegree(n, 0), ready;
    for (size_t i = 0; i < n; ++i)
      if (mode[i] != TreeMode::kLeaf) ++indegree[size_t(true_child[i])], ++indegree[size_t(false_child[i])];
    for (size_t i = 0; i < n; ++i)
      if (indegree[i] == 0) ready.push_back(int32_t(i));
    size_t done = 0;
    while (!ready.empty()) {
      const int32_t i = ready.back();
      ready.pop_back();
      ++done;
      if (mode[size_t(i)] == TreeMode::kLeaf) continue;
      for (int32_t c : {true_child[size_t(i)], false_child[size_t(i)]})
        if (--indegree[size_t(c)] == 0) ready.push_back(c);
    }
    if (done != n)
      for (size_t i = 0; i < n; ++i)
        if (indegree[i] > 0 && mode[i] != TreeMode::kLeaf)
          info.fail("attributes nodes_truenodeids/nodes_falsenodeids: the nodes of tree ", tree_ids[i],
                    " form a cycle (", where(i), " is on it or after it)");
  }

  // Leaf weights (target_* for a regressor, class_* for a classifier).
  const char* prefix = classifier ? "class_" : "target_";
  auto name = [&](const char* suffix) { return std::string(prefix) + suffix; };
  const std::vector<int64_t> w_ids = info.attr_ints(name("ids"), {});
  const std::vector<int64_t> w_nodes = info.attr_ints(name("nodeids"), {});
  const std::vector<int64_t> w_trees = info.attr_ints(name("treeids"), {});
  const std::vector<double> w_values = read_values(info, name("weights"));
  const size_t nw = w_ids.size();
  for (const auto& [len, what] : {std::pair<size_t, std::string>{w_nodes.size(), name("nodeids")},
                                  {w_trees.size(), name("treeids")}, {w_values.size(), name("weights")}})
    if (len != nw) info.fail("attribute ", what, " has ", len, " entries, ", name("ids"), " ", nw);

  if (classifier) {
    labels_int64 = info.attr_ints("classlabels_int64s", {});
    labels_string = info.attr_strings("classlabels_strings", {});
    if (!labels_int64.empty() && !labels_string.empty())
      info.fail("attributes classlabels_int64s and classlabels_strings are both given (give one)");
    n_targets = int64_t(labels_int64.empty() ? labels_string.size() : labels_int64.size());
    if (n_targets == 0) info.fail("no class labels: give classlabels_int64s or classlabels_strings");
    if (n_targets == 1)
      throw_error<NotImplemented>(info.node().describe(), ": a TreeEnsembleClassifier with a single class label");
  } else {
    n_targets = info.attr_int("n_targets", 0);
    if (n_targets < 1) info.fail("attribute n_targets is ", n_targets, " (it must be at least 1)");
    check_table_size(info, n_targets, 2 * sizeof(double), "n_targets");
    aggregate = parse_choice<TreeAggregate>(info, "aggregate_function", "SUM",
                                            {{"SUM", TreeAggregate::kSum},
                                             {"AVERAGE", TreeAggregate::kAverage},
                                             {"MIN", TreeAggregate::kMin},
                                             {"MAX", TreeAggregate::kMax}});
  }
  post = read_post_transform(info);
  if (classifier && n_targets == 2 && post == PostTransform::kProbit)
    throw_error<NotImplemented>(info.node().describe(), ": post_transform PROBIT of a two-class TreeEnsembleClassifier "
                                "(onnxruntime leaves the second score unwritten)");

  std::vector<int32_t> w_leaf(nw, -1);
  std::set<int64_t> classes_used;
  leaf_first.assign(n, 0);
  leaf_count.assign(n, 0);
  for (size_t k = 0; k < nw; ++k) {
    auto it = index.find({w_trees[k], w_nodes[k]});
    if (it == index.end())
      info.fail("attribute ", name("nodeids"), ": entry ", k, " names node ", w_nodes[k], " of tree ", w_trees[k],
                ", which does not exist");
    if (w_ids[k] < 0 || w_ids[k] >= n_targets)
      info.fail("attribute ", name("ids"), ": entry ", k, " (node ", w_nodes[k], " of tree ", w_trees[k], ") names ",
                classifier ? "class " : "target ", w_ids[k], ", out of range [0, ", n_targets, ")");
    classes_used.insert(w_ids[k]);
    if (w_values[k] < 0) weights_all_positive = false;
    if (mode[size_t(it->second)] == TreeMode::kLeaf) {  // a branch's weights are ignored (onnxruntime)
      w_leaf[k] = it->second;
      ++leaf_count[size_t(it->second)];
    }
  }
  binary_case = classifier && n_targets == 2 && classes_used.size() == 1;
  // Group the weights by leaf (in attribute order within a leaf).
  int32_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    leaf_first[i] = total;
    total += leaf_count[i];
  }
  weight_target.resize(size_t(total));
  weight_value.resize(size_t(total));
  std::vector<int32_t> fill(leaf_first);
  for (size_t k = 0; k < nw; ++k) {
    if (w_leaf[k] < 0) continue;
    const size_t at = size_t(fill[size_t(w_leaf[k])]++);
    weight_target[at] = int32_t(w_ids[k]);
    weight_value[at] = w_values[k];
  }

  base_values = read_values(info, "base_values");
  const size_t nb = base_values.size();
  if (nb != 0 && nb != size_t(n_targets) && !(classifier && n_targets == 2 && nb == 1))
    info.fail("attribute base_values has ", nb, " entries (give none or one per ", classifier ? "class" : "target",
              classifier && n_targets == 2 ? ", or one for a binary classifier)" : ")");
}

int64_t TreeEnsembleSpec::prepare(PrepareContext& ctx) const {
  // (input and output counts: the schema arity check before the kernel, kernels/kernel.cpp)
  const DType dt = ctx.input_dtype(0);
  if (v5 && dt != v5_type)
    ctx.fail("input X is ", dtype_name(dt), " but the tensor attributes (nodes_splits, leaf_weights) are ",
             dtype_name(v5_type), ": TreeEnsemble's X, Y and attributes share one type");
  if (dt != DType::kFloat32 && dt != DType::kFloat64 && dt != DType::kInt64 && dt != DType::kInt32)
    ctx.fail("input X must be float, double, int64 or int32, got ", dtype_name(dt));
  const Shape& s = ctx.input_shape(0);
  if (s.size() != 1 && s.size() != 2) ctx.fail("input X must be [N, C] or [C], got ", shape_to_string(s));
  const int64_t rows = s.size() == 2 ? s[0] : 1, cols = s.back();
  if (max_feature >= cols)
    ctx.fail("tree node at entry ", max_feature_node, " reads feature ", max_feature, " but X has ", cols,
             " features (", shape_to_string(s), ")");
  if (classifier) {
    const DType label = labels_string.empty() ? DType::kInt64 : DType::kString;
    ctx.set_output(0, label, {rows});
    check_output_size(ctx, {rows, n_targets}, DType::kFloat32);
    if (ctx.num_outputs() > 1) ctx.set_output(1, DType::kFloat32, {rows, n_targets});
  } else {
    const DType y = v5 ? dt : DType::kFloat32;
    check_output_size(ctx, {rows, n_targets}, y);
    ctx.set_output(0, y, {rows, n_targets});
  }
  return rows;
}

namespace {

// A float or double tensor attribute of TreeEnsemble as doubles (absent: empty); `type` is the
// type of the first one read, the others must share it.
std::vector<double> read_v5_tensor(const KernelInfo& info, const char* name, DType& type) {
  const Tensor* t = info.attr_tensor(name);
  if (!t) return {};
  if (t->dtype() != DType::kFloat32 && t->dtype() != DType::kFloat64)
    info.fail("attribute ", name, " must be a float or double tensor, got ", dtype_name(t->dtype()));
  if (type == DType::kUndefined) type = t->dtype();
  else if (t->dtype() != type)
    info.fail("attribute ", name, " is ", dtype_name(t->dtype()), " but nodes_splits is ", dtype_name(type),
              " (one type for all)");
  std::vector<double> v(size_t(t->numel()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = t->dtype() == DType::kFloat64 ? t->data<double>()[i] : double(t->data<float>()[i]);
  return v;
}

}  // namespace

TreeEnsembleSpec::TreeEnsembleSpec(const KernelInfo& info, V5) : classifier(false), v5(true) {
  const std::vector<int64_t> features = info.attr_ints("nodes_featureids", {});
  const std::vector<int64_t> trues = info.attr_ints("nodes_truenodeids", {});
  const std::vector<int64_t> falses = info.attr_ints("nodes_falsenodeids", {});
  const std::vector<int64_t> true_leaf = info.attr_ints("nodes_trueleafs", {});
  const std::vector<int64_t> false_leaf = info.attr_ints("nodes_falseleafs", {});
  const std::vector<int64_t> missing = info.attr_ints("nodes_missing_value_tracks_true", {});
  const std::vector<int64_t> tree_roots = info.attr_ints("tree_roots", {});
  const std::vector<int64_t> leaf_targets = info.attr_ints("leaf_targetids", {});
  const std::vector<double> splits = read_v5_tensor(info, "nodes_splits", v5_type);
  const std::vector<double> weights = read_v5_tensor(info, "leaf_weights", v5_type);
  const std::vector<double> members = read_v5_tensor(info, "membership_values", v5_type);
  DType hit_type = DType::kUndefined;
  const std::vector<double> hitrates = read_v5_tensor(info, "nodes_hitrates", hit_type);  // not used to evaluate
  const Tensor* modes_t = info.attr_tensor("nodes_modes");
  if (!modes_t) info.fail("attribute nodes_modes (a uint8 tensor) is missing");
  if (modes_t->dtype() != DType::kUInt8) info.fail("attribute nodes_modes must be a uint8 tensor, got ", dtype_name(modes_t->dtype()));
  const size_t n = features.size(), nl = leaf_targets.size();
  if (n == 0) info.fail("attribute nodes_featureids is empty: the ensemble has no node");
  if (n + nl > size_t(std::numeric_limits<int32_t>::max())) info.fail("too many tree nodes (", n + nl, ")");
  auto same_length = [&](const char* name, size_t len, bool optional) {
    if (len != n && !(optional && len == 0))
      info.fail("attribute ", name, " has ", len, " entries, nodes_featureids ", n, optional ? " (give one per node or none)" : "");
  };
  same_length("nodes_modes", size_t(modes_t->numel()), false);
  same_length("nodes_splits", splits.size(), false);
  same_length("nodes_truenodeids", trues.size(), false);
  same_length("nodes_falsenodeids", falses.size(), false);
  same_length("nodes_trueleafs", true_leaf.size(), false);
  same_length("nodes_falseleafs", false_leaf.size(), false);
  same_length("nodes_missing_value_tracks_true", missing.size(), true);
  same_length("nodes_hitrates", hitrates.size(), true);
  if (weights.size() != nl)
    info.fail("attribute leaf_weights has ", weights.size(), " entries, leaf_targetids ", nl);
  if (tree_roots.empty()) info.fail("attribute tree_roots is empty: the ensemble has no tree");
  n_targets = info.attr_int("n_targets", 0);
  if (n_targets < 1) info.fail("attribute n_targets is ", n_targets, " (it must be at least 1)");
  check_table_size(info, n_targets, 2 * sizeof(double), "n_targets");
  const int64_t agg = info.attr_int("aggregate_function", 1);
  if (agg < 0 || agg > 3) info.fail("attribute aggregate_function is ", agg, " (0 AVERAGE, 1 SUM, 2 MIN, 3 MAX)");
  aggregate = agg == 0 ? TreeAggregate::kAverage : agg == 1 ? TreeAggregate::kSum : agg == 2 ? TreeAggregate::kMin : TreeAggregate::kMax;
  const int64_t pt = info.attr_int("post_transform", 0);
  if (pt < 0 || pt > 4)
    info.fail("attribute post_transform is ", pt, " (0 NONE, 1 SOFTMAX, 2 LOGISTIC, 3 SOFTMAX_ZERO, 4 PROBIT)");
  post = pt == 0 ? PostTransform::kNone : pt == 1 ? PostTransform::kSoftmax : pt == 2 ? PostTransform::kLogistic
       : pt == 3 ? PostTransform::kSoftmaxZero : PostTransform::kProbit;

  // Nodes 0..n-1, then leaf j as node n + j.
  const size_t total = n + nl;
  mode.assign(total, TreeMode::kLeaf);
  feature.assign(total, 0);
  threshold.assign(total, 0.0);
  missing_true.assign(total, 0);
  true_child.assign(total, -1);
  false_child.assign(total, -1);
  member_first.assign(total, 0);
  member_count.assign(total, 0);
  leaf_first.assign(total, 0);
  leaf_count.assign(total, 0);
  static const TreeMode kModes[] = {TreeMode::kLeq, TreeMode::kLt, TreeMode::kGte, TreeMode::kGt,
                                    TreeMode::kEq,  TreeMode::kNeq, TreeMode::kMember};
  size_t next_member = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t m = modes_t->data<uint8_t>()[i];
    if (m > 6)
      info.fail("attribute nodes_modes: node ", i, " has mode ", int(m),
                " (0 BRANCH_LEQ, 1 BRANCH_LT, 2 BRANCH_GTE, 3 BRANCH_GT, 4 BRANCH_EQ, 5 BRANCH_NEQ, 6 BRANCH_MEMBER)");
    mode[i] = kModes[m];
    threshold[i] = splits[i];
    if (features[i] < 0 || features[i] > std::numeric_limits<int32_t>::max())
      info.fail("attribute nodes_featureids: node ", i, " reads feature ", features[i]);
    feature[i] = int32_t(features[i]);
    if (features[i] > max_feature) max_feature = features[i], max_feature_node = int32_t(i);
    if (!missing.empty()) {
      if (missing[i] != 0 && missing[i] != 1)
        info.fail("attribute nodes_missing_value_tracks_true: node ", i, " has ", missing[i], " (0 or 1)");
      missing_true[i] = uint8_t(missing[i]);
    }
    if (mode[i] == TreeMode::kMember) {  // its values: the next run of membership_values up to a NaN
      member_first[i] = int32_t(member_values.size());
      while (next_member < members.size() && !std::isnan(members[next_member])) member_values.push_back(members[next_member++]);
      ++next_member;
      member_count[i] = int32_t(member_values.size()) - member_first[i];
      if (member_count[i] == 0)
        info.fail("attribute membership_values: BRANCH_MEMBER node ", i, " has no values (membership_values holds one "
                  "NaN-terminated list per BRANCH_MEMBER node, in node order)");
    }
    for (int side = 0; side < 2; ++side) {
      const bool leaf = (side == 0 ? true_leaf : false_leaf)[i] != 0;
      const int64_t c = (side == 0 ? trues : falses)[i];
      const char* attr = side == 0 ? "nodes_truenodeids" : "nodes_falsenodeids";
      if ((side == 0 ? true_leaf : false_leaf)[i] > 1 || (side == 0 ? true_leaf : false_leaf)[i] < 0)
        info.fail("attribute ", side == 0 ? "nodes_trueleafs" : "nodes_falseleafs", ": node ", i, " has ",
                  (side == 0 ? true_leaf : false_leaf)[i], " (0 or 1)");
      if (c < 0 || size_t(c) >= (leaf ? nl : n))
        info.fail("attribute ", attr, ": node ", i, " has ", side == 0 ? "true" : "false", " child ", c, ", out of range [0, ",
                  leaf ? nl : n, ") of the ", leaf ? "leaves" : "nodes");
      (side == 0 ? true_child : false_child)[i] = int32_t(leaf ? n + size_t(c) : size_t(c));
    }
  }
  // Leaves: one weight each.
  weight_target.resize(nl);
  weight_value.resize(nl);
  for (size_t j = 0; j < nl; ++j) {
    if (leaf_targets[j] < 0 || leaf_targets[j] >= n_targets)
      info.fail("attribute leaf_targetids: leaf ", j, " names target ", leaf_targets[j], ", out of range [0, ", n_targets, ")");
    weight_target[j] = int32_t(leaf_targets[j]);
    weight_value[j] = weights[j];
    leaf_first[n + j] = int32_t(j);
    leaf_count[n + j] = 1;
  }
  // Roots: a node, or (onnxruntime's rule) the leaf of that index when the root's true and false
  // ids are equal.
  for (size_t t = 0; t < tree_roots.size(); ++t) {
    const int64_t r = tree_roots[t];
    if (r < 0 || size_t(r) >= n) info.fail("attribute tree_roots: tree ", t, " has root ", r, ", out of range [0, ", n, ")");
    if (trues[size_t(r)] == falses[size_t(r)]) {
      if (size_t(r) >= nl)
        info.fail("attribute tree_roots: tree ", t, " is a single leaf (its root's true and false ids are equal) but leaf ",
                  r, " does not exist");
      roots.push_back(int32_t(n + size_t(r)));
    } else {
      roots.push_back(int32_t(r));
    }
  }
  // No cycle among the nodes reachable from the roots (depth-first, colours), so every walk ends at a leaf.
  std::vector<uint8_t> colour(total, 0);  // 0 unseen, 1 on the path, 2 done
  std::vector<std::pair<int32_t, int>> stack;
  for (size_t t = 0; t < roots.size(); ++t) {
    if (colour[size_t(roots[t])]) continue;
    stack.assign(1, {roots[t], 0});
    colour[size_t(roots[t])] = 1;
    while (!stack.empty()) {
      auto& [i, side] = stack.back();
      if (mode[size_t(i)] == TreeMode::kLeaf || side == 2) {
        colour[size_t(i)] = 2;
        stack.pop_back();
        continue;
      }
      const int32_t c = side++ == 0 ? true_child[size_t(i)] : false_child[size_t(i)];
      if (colour[size_t(c)] == 1)
        info.fail("attributes nodes_truenodeids/nodes_falsenodeids: tree ", t, " has a cycle through node ", c);
      if (colour[size_t(c)] == 0) {
        colour[size_t(c)] = 1;
        stack.push_back({c, 0});
      }
    }
  }
}

}  // namespace onnxtrain::kernels::shape
