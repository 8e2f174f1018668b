// Loss builder (onnxcustom's add_loss_output): appends a loss to a model.
//
//   squared_error | l2      (S - y)^2                                  reduction: sum (onnxcustom)
//   absolute_error | l1     |S - y|                                    sum
//   elastic                 l1_weight |S - y| + l2_weight (S - y)^2    sum
//   huber                   0.5 d^2 if |d| <= delta else delta (|d| - delta/2)   mean (torch HuberLoss)
//   log                     binary log loss: S = probabilities [N, 2] or [N] / [N, 1] of class 1
//                           (from_logits=1: S is a raw score)          mean
//   cross_entropy           softmax cross-entropy from logits [N, C, ...] (class weights,
//                           ignore_index, label_smoothing)             mean (torch CrossEntropyLoss)
//   nll                     negative log-likelihood of log-probabilities        mean
//   bce_with_logits         torch BCEWithLogitsLoss (pos_weight)       mean
// kwargs: reduction (mean|sum), l1_weight, l2_weight, delta, eps, from_logits, ignore_index,
// label_smoothing, class_weights (comma-separated), pos_weight.
// A per-sample weight input (weight_name, shape [N]) multiplies each sample's loss; with mean
// reduction the sum is divided by the sum of the weights. Penalties add l1 sum|w| + l2 sum(w^2).
#include "train/loss_builder.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "ir/emitter.h"
#include "ir/infer.h"

namespace onnxtrain::train {

namespace {

using E = ir::Emitter;

double kwarg_number(const std::map<std::string, std::string>& kw, const std::string& k, double dflt);
int64_t kwarg_integer(const std::map<std::string, std::string>& kw, const std::string& k, int64_t dflt);

struct Kwargs {
  std::map<std::string, std::string> kv;
  std::set<std::string> used;
  double num(const std::string& k, double dflt) {
    if (kv.count(k)) used.insert(k);
    return kwarg_number(kv, k, dflt);
  }
  std::string str(const std::string& k, const std::string& dflt) {
    auto it = kv.find(k);
    if (it == kv.end()) return dflt;
    used.insert(k);
    return it->second;
  }
  void check_all_used(const std::string& loss) {
    for (const auto& [k, v] : kv)
      if (!used.count(k))
        throw_error<InvalidArgument>("add_loss_output: argument '", k, "' does not apply to loss '", loss, "'");
  }
};

std::vector<float> parse_floats(const std::string& s, const std::string& what) {
  std::vector<float> r;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (end == item.c_str()) throw_error<InvalidArgument>("add_loss_output: ", what, " must be numbers, got '", s, "'");
    r.push_back(float(v));
  }
  return r;
}

// Every loss name (aliases included): its family and its default reduction (onnxcustom's sums
// for the regression losses, PyTorch's means for the others).
enum class LossFamily { kRegression, kClassification, kBinary };
struct LossKind {
  std::string name;
  LossFamily family;
  std::string default_reduction;
};
const std::vector<LossKind>& loss_kinds() {
  static const std::vector<LossKind> kinds = {
      {"squared_error", LossFamily::kRegression, "sum"}, {"l2", LossFamily::kRegression, "sum"},
      {"absolute_error", LossFamily::kRegression, "sum"}, {"l1", LossFamily::kRegression, "sum"},
      {"elastic", LossFamily::kRegression, "sum"},       {"huber", LossFamily::kRegression, "mean"},
      {"log", LossFamily::kBinary, "mean"},              {"cross_entropy", LossFamily::kClassification, "mean"},
      {"nll", LossFamily::kClassification, "mean"},      {"bce_with_logits", LossFamily::kBinary, "mean"},
  };
  return kinds;
}

const LossKind& loss_kind(const std::string& name) {
  for (const auto& k : loss_kinds())
    if (k.name == name) return k;
  std::string all;
  for (const auto& k : loss_kinds()) all += (all.empty() ? "" : ", ") + k.name;
  throw_error<InvalidArgument>("add_loss_output: unknown loss '", name, "' (known: ", all, ")");
}

// A number given as a loss argument (kwargs hold text).
double kwarg_number(const std::map<std::string, std::string>& kw, const std::string& k, double dflt) {
  auto it = kw.find(k);
  if (it == kw.end()) return dflt;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0')
    throw_error<InvalidArgument>("add_loss_output: ", k, "=", it->second, " is not a number");
  return v;
}

// An integer argument, exactly (ignore_index=1.5, "3x" or 10^30 are errors, not 1, 3 or a crash).
int64_t kwarg_integer(const std::map<std::string, std::string>& kw, const std::string& k, int64_t dflt) {
  auto it = kw.find(k);
  if (it == kw.end()) return dflt;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (end == it->second.c_str() || *end != '\0' || errno == ERANGE)
    throw_error<InvalidArgument>("add_loss_output: ", k, "=", it->second, " is not an integer (int64)");
  return int64_t(v);
}

Tensor floats_tensor(DType dt, const std::vector<float>& v) {
  if (dt == DType::kFloat64) {
    std::vector<double> d(v.begin(), v.end());
    return Tensor::from_vector<double>({int64_t(v.size())}, d);
  }
  return Tensor::from_vector<float>({int64_t(v.size())}, v);
}

}  // namespace

void add_loss(ir::Model& m, const std::string& kind, const std::string& loss_name, const std::string& label_name,
              const std::string& weight_name, const std::map<std::string, std::map<std::string, float>>& penalty,
              const std::string& output, const std::map<std::string, std::string>& kwargs_in) {
  ir::infer_types(m);
  ir::Graph& g = *m.graph;
  if (g.outputs.empty()) throw_error<InvalidArgument>("add_loss_output: the model has no output");
  // The scored output.
  size_t out_index = 0;
  if (output.empty()) {
    if (g.outputs.size() != 1)
      throw_error<InvalidArgument>("add_loss_output: the model has ", g.outputs.size(),
                                   " outputs; give output_index (an index or an output name)");
  } else if (std::all_of(output.begin(), output.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    out_index = size_t(std::stoul(output));
    if (out_index >= g.outputs.size())
      throw_error<InvalidArgument>("add_loss_output: output_index ", out_index, " out of range (", g.outputs.size(),
                                   " outputs)");
  } else {
    bool found = false;
    for (size_t i = 0; i < g.outputs.size(); ++i)
      if (g.outputs[i].name == output) {
        out_index = i;
        found = true;
      }
    if (!found) throw_error<InvalidArgument>("add_loss_output: '", output, "' is not an output of the model");
  }
  const ir::ValueInfo score = g.outputs[out_index];
  ir::TypeInfo st = score.type;
  for (const auto& v : g.value_info)
    if (v.name == score.name && !st.has_shape) st = v.type;
  const DType dt = st.elem == DType::kUndefined ? DType::kFloat32 : st.elem;
  if (!dtype_is_float(dt))
    throw_error<InvalidArgument>("add_loss_output: output '", score.name, "' has element type ", dtype_name(dt),
                                 "; a loss needs float scores");
  ir::Emitter w(m, g);
  w.set_node_prefix("loss_");
  w.set_origin("add_loss_output");
  for (const std::string& n : {loss_name, label_name})
    if (!w.reserve(n)) throw_error<InvalidArgument>("add_loss_output: the model already has a value named '", n, "'");
  if (!weight_name.empty() && !w.reserve(weight_name))
    throw_error<InvalidArgument>("add_loss_output: the model already has a value named '", weight_name, "'");
  Kwargs kw{kwargs_in, {}};
  const LossKind& lk = loss_kind(kind);
  const bool classif = lk.family == LossFamily::kClassification;
  const std::string reduction = kw.str("reduction", lk.default_reduction);
  if (reduction != "sum" && reduction != "mean")
    throw_error<InvalidArgument>("add_loss_output: reduction must be 'mean' or 'sum', got '", reduction, "'");

  // Label input.
  ir::ValueInfo label;
  label.name = label_name;
  label.type.kind = ir::TypeInfo::Kind::kTensor;
  if (classif) {
    label.type.elem = DType::kInt64;
    if (st.has_shape && st.dims.size() >= 2) {
      label.type.has_shape = true;
      label.type.dims = st.dims;
      label.type.dims.erase(label.type.dims.begin() + 1);
    }
  } else if (kind == "log") {
    label.type.elem = DType::kInt64;
    if (st.has_shape && !st.dims.empty()) {
      label.type.has_shape = true;
      label.type.dims = {st.dims[0]};
    }
  } else {
    label.type.elem = dt;
    label.type.has_shape = st.has_shape;
    label.type.dims = st.dims;
  }
  g.inputs.push_back(label);
  w.set_type(label_name, label.type);
  const std::string S = score.name, y = label_name;

  // Per-element (or per-sample) loss, before reduction.
  std::string per;                 // per-element loss
  bool reduced = false;            // the operator already reduced (SCE/NLL)
  std::string total;
  auto reduce = [&](const std::string& v) { return w.reduce_all(reduction == "sum" ? "ReduceSum" : "ReduceMean", v); };
  if (kind == "squared_error" || kind == "l2") {
    const std::string d = w.add("Sub", {S, y}, {}, "loss_diff");
    per = w.add("Mul", {d, d}, {}, "loss_sq");
  } else if (kind == "absolute_error" || kind == "l1") {
    per = w.add("Abs", {w.add("Sub", {S, y}, {}, "loss_diff")}, {}, "loss_abs");
  } else if (kind == "elastic") {
    const double a = kw.num("l1_weight", 0.5), b = kw.num("l2_weight", 0.5);
    const std::string d = w.add("Sub", {S, y}, {}, "loss_diff");
    per = w.add("Add", {w.add("Mul", {w.add("Abs", {d}), w.scalar(dt, a)}),
                        w.add("Mul", {w.add("Mul", {d, d}), w.scalar(dt, b)})}, {}, "loss_elastic");
  } else if (kind == "huber") {
    const double delta = kw.num("delta", 1.0);
    if (!(delta > 0)) throw_error<InvalidArgument>("add_loss_output: huber delta must be > 0");
    const std::string d = w.add("Abs", {w.add("Sub", {S, y})});
    const std::string quad = w.add("Mul", {w.add("Mul", {d, d}), w.scalar(dt, 0.5)});
    const std::string lin = w.add("Mul", {w.add("Sub", {d, w.scalar(dt, 0.5 * delta)}), w.scalar(dt, delta)});
    per = w.add("Where", {w.add("LessOrEqual", {d, w.scalar(dt, delta)}), quad, lin}, {}, "loss_huber");
  } else if (kind == "log") {
    const double eps = kw.num("eps", 1e-6);
    const bool logits = kw.num("from_logits", 0) != 0;
    const std::string yf = w.cast(y, dt);
    std::string p1, p0;
    if (st.has_shape && st.dims.size() == 2 && st.dims[1].fixed() && st.dims[1].value == 2 && !logits) {
      const std::string clipped = w.add("Clip", {S, w.scalar(dt, eps), w.scalar(dt, 1 - eps)});
      const std::string norm = w.add("Div", {clipped, w.reduce_sum(clipped, {1}, true)});
      const auto parts = w.split(norm, 1, {1, 1});
      p0 = w.add("Reshape", {parts[0], w.ints({-1})});
      p1 = w.add("Reshape", {parts[1], w.ints({-1})});
    } else {
      std::string s = w.add("Reshape", {S, w.ints({-1})});
      if (logits) s = w.add("Sigmoid", {s});
      p1 = w.add("Clip", {s, w.scalar(dt, eps), w.scalar(dt, 1 - eps)});
      p0 = w.add("Sub", {w.scalar(dt, 1.0), p1});
    }
    // -(y log p1 + (1 - y) log p0)
    const std::string ll = w.add("Add", {w.add("Mul", {yf, w.add("Log", {p1})}),
                                         w.add("Mul", {w.add("Sub", {w.scalar(dt, 1.0), yf}), w.add("Log", {p0})})});
    per = w.add("Neg", {ll}, {}, "loss_log");
  } else if (kind == "bce_with_logits") {
    // torch: (1 - y) s + (1 + (pw - 1) y) (log(1 + exp(-|s|)) + max(-s, 0))
    const double pw = kw.num("pos_weight", 1.0);
    const std::string zero = w.scalar(dt, 0.0);
    const std::string sp = w.add("Add", {w.add("Log", {w.add("Add", {w.scalar(dt, 1.0), w.add("Exp", {w.add("Neg", {w.add("Abs", {S})})})})}),
                                         w.add("Max", {w.add("Neg", {S}), zero})});
    const std::string lw = w.add("Add", {w.scalar(dt, 1.0), w.add("Mul", {w.scalar(dt, pw - 1.0), y})});
    per = w.add("Add", {w.add("Mul", {w.add("Sub", {w.scalar(dt, 1.0), y}), S}), w.add("Mul", {lw, sp})}, {}, "loss_bce");
  } else {  // cross_entropy, nll
    const double smoothing = kind == "cross_entropy" ? kw.num("label_smoothing", 0.0) : 0.0;
    const std::string ignore = kw.str("ignore_index", "");
    const std::string cw = kw.str("class_weights", "");
    if (smoothing < 0 || smoothing > 1) throw_error<InvalidArgument>("add_loss_output: label_smoothing must be in [0, 1]");
    if (!weight_name.empty())
      throw_error<NotImplemented>("add_loss_output: per-sample weights with '", kind,
                                  "' are not supported (use class_weights)");
    std::vector<std::string> ins{S, y};
    if (!cw.empty()) ins.push_back(w.constant(floats_tensor(dt, parse_floats(cw, "class_weights")), "class_weights"));
    std::vector<ir::Attribute> attrs{E::string_attr("reduction", reduction)};
    if (!ignore.empty()) attrs.push_back(E::int_attr("ignore_index", kwarg_integer(kw.kv, "ignore_index", 0)));
    if (smoothing > 0 && !cw.empty())
      throw_error<NotImplemented>("add_loss_output: label_smoothing together with class_weights is not supported");
    if (smoothing > 0 && !ignore.empty())
      throw_error<NotImplemented>("add_loss_output: label_smoothing together with ignore_index is not supported");
    total = w.add(kind == "nll" ? "NegativeLogLikelihoodLoss" : "SoftmaxCrossEntropyLoss", ins, attrs, "loss_ce");
    if (smoothing > 0) {
      // (1 - e) CE + e * mean over samples of (-mean over classes of log_softmax)
      const std::string logp = w.add("LogSoftmax", {S}, {E::int_attr("axis", 1)});
      const std::string uniform = w.add("Neg", {w.add("ReduceMean", {logp}, {E::ints_attr("axes", {1}), E::int_attr("keepdims", 0)})});
      const std::string smooth = reduce(uniform);
      total = w.add("Add", {w.add("Mul", {total, w.scalar(dt, 1.0 - smoothing)}), w.add("Mul", {smooth, w.scalar(dt, smoothing)})});
    }
    reduced = true;
  }
  if (!reduced) {
    if (!weight_name.empty()) {
      ir::ValueInfo wv;
      wv.name = weight_name;
      wv.type.kind = ir::TypeInfo::Kind::kTensor;
      wv.type.elem = dt;
      if (st.has_shape && !st.dims.empty()) {
        wv.type.has_shape = true;
        wv.type.dims = {st.dims[0]};
      }
      g.inputs.push_back(wv);
      w.set_type(weight_name, wv.type);
      // Per-sample loss: sum over every axis but the first, then weight.
      std::string sample = per;
      if (kind != "log" && st.has_shape && st.dims.size() > 1) {
        std::vector<int64_t> axes;
        for (size_t a = 1; a < st.dims.size(); ++a) axes.push_back(int64_t(a));
        sample = w.reduce_sum(per, axes, false);
      }
      const std::string weighted = w.add("Mul", {sample, weight_name});
      total = w.reduce_all("ReduceSum", weighted);
      if (reduction == "mean") total = w.add("Div", {total, w.reduce_all("ReduceSum", weight_name)});
    } else {
      total = reduce(per);
    }
  }
  for (const auto& [pname, coefs] : penalty) {
    const Tensor* t = g.initializer(pname);
    if (!t && !g.is_input(pname))
      throw_error<InvalidArgument>("add_loss_output: penalty on '", pname, "', which is neither an initializer nor an input");
    for (const auto& [k, v] : coefs)
      if (k != "l1" && k != "l2")
        throw_error<InvalidArgument>("add_loss_output: penalty on '", pname, "' has unknown key '", k, "' (use l1, l2)");
    const double l1 = coefs.count("l1") ? coefs.at("l1") : 0.0, l2 = coefs.count("l2") ? coefs.at("l2") : 0.0;
    if (l1 != 0) total = w.add("Add", {total, w.add("Mul", {w.reduce_all("ReduceSum", w.add("Abs", {pname})), w.scalar(dt, l1)})});
    if (l2 != 0) total = w.add("Add", {total, w.add("Mul", {w.reduce_all("ReduceSum", w.add("Mul", {pname, pname})), w.scalar(dt, l2)})});
  }
  kw.check_all_used(kind);
  ir::Node id;
  id.op_type = "Identity";
  id.name = w.fresh("loss_output");
  id.inputs = {total};
  id.outputs = {loss_name};
  w.append(std::move(id));
  ir::ValueInfo lv;
  lv.name = loss_name;
  lv.type = ir::TypeInfo::tensor(dt, {});
  std::vector<ir::ValueInfo> outs{lv};
  for (const auto& o : g.outputs) outs.push_back(o);
  g.outputs = outs;
  ir::validate_graph(g);
}

std::vector<std::string> loss_names() {
  std::vector<std::string> r;
  for (const auto& k : loss_kinds()) r.push_back(k.name);
  return r;
}

Objective loss_objective(const std::string& kind, const std::map<std::string, std::string>& kwargs,
                         const NodeArg& score, const std::string& loss_output, const std::string& label_name) {
  const LossKind& lk = loss_kind(kind);
  Objective o;
  o.loss_output = loss_output;
  o.label_name = label_name;
  o.score_output = score.name;
  auto red = kwargs.find("reduction");
  o.loss_summed = (red == kwargs.end() ? lk.default_reduction : red->second) == "sum";
  o.loss_weighted = kwargs.count("class_weights") || kwargs.count("ignore_index");
  switch (lk.family) {
    case LossFamily::kRegression: o.metric = Metric::kR2; break;
    case LossFamily::kClassification:
      o.metric = Metric::kAccuracy;
      if (kwargs.count("ignore_index")) o.ignore_index = kwarg_integer(kwargs, "ignore_index", 0);
      break;
    case LossFamily::kBinary: {
      // log: probabilities of two classes [N, 2] are scored by argmax, one column by a threshold.
      const bool logits = kind == "bce_with_logits" || kwarg_number(kwargs, "from_logits", 0) != 0;
      const bool two = score.has_shape && score.shape.size() == 2 && score.shape[1].value == 2;
      o.metric = kind == "log" && two && !logits ? Metric::kAccuracy : Metric::kBinaryAccuracy;
      o.threshold = logits ? 0.0 : 0.5;
      break;
    }
  }
  return o;
}

}  // namespace onnxtrain::train
