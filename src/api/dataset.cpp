// The data and the objective of training (include/onnxtrain/trainer.h): datasets, the
// objective's metrics, and evaluation over batches.
#include "onnxtrain/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "onnxtrain/error.h"
#include "train/metrics.h"

namespace onnxtrain {

// ------------------------------------------------------------------------------------------------
// Dataset

Dataset::Dataset(std::vector<std::pair<std::string, Tensor>> arrays) : arrays_(std::move(arrays)) {
  for (size_t i = 0; i < arrays_.size(); ++i) {
    const auto& [name, t] = arrays_[i];
    if (!t.defined()) throw_error<InvalidArgument>("dataset array '", name, "' is undefined");
    if (t.rank() == 0) throw_error<InvalidArgument>("dataset array '", name, "' is a scalar; it needs a first axis of samples");
    for (size_t j = 0; j < i; ++j)
      if (arrays_[j].first == name) throw_error<InvalidArgument>("dataset holds array '", name, "' twice");
    if (i == 0) size_ = t.dim(0);
    else if (t.dim(0) != size_)
      throw_error<InvalidArgument>("dataset array '", name, "' has ", t.dim(0), " samples, array '", arrays_[0].first,
                                   "' has ", size_);
  }
}

const Tensor* Dataset::find(const std::string& name) const {
  for (const auto& [n, t] : arrays_)
    if (n == name) return &t;
  return nullptr;
}

const Tensor& Dataset::at(const std::string& name) const {
  if (const Tensor* t = find(name)) return *t;
  std::string names;
  for (const auto& [n, t] : arrays_) names += (names.empty() ? "" : ", ") + n;
  throw_error<InvalidArgument>("the data has no array '", name, "' (its arrays: ", names, ")");
}

namespace {

// Rows idx[begin, end) of `t`, copied.
Tensor take_rows(const Tensor& t, const std::vector<int64_t>& idx, size_t begin, size_t end) {
  Shape s = t.shape();
  s[0] = int64_t(end - begin);
  Tensor out = Tensor::empty(t.dtype(), s);
  const int64_t rows = t.dim(0);
  const size_t per = rows ? size_t(t.numel() / rows) : 0;  // elements per sample
  for (size_t i = begin; i < end; ++i)
    if (idx[i] < 0 || idx[i] >= rows)
      throw_error<InvalidArgument>("sample index ", idx[i], " is out of range [0, ", rows, ")");
  if (t.dtype() == DType::kString) {
    const std::string* src = t.data<std::string>();
    std::string* dst = out.data<std::string>();
    for (size_t i = begin; i < end; ++i)
      std::copy(src + size_t(idx[i]) * per, src + size_t(idx[i] + 1) * per, dst + (i - begin) * per);
    return out;
  }
  const size_t row = per * dtype_size(t.dtype());
  const auto* src = static_cast<const char*>(t.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (size_t i = begin; i < end; ++i) std::memcpy(dst + (i - begin) * row, src + size_t(idx[i]) * row, row);
  return out;
}

}  // namespace

Dataset Dataset::take(const std::vector<int64_t>& idx, size_t begin, size_t end) const {
  if (begin > end || end > idx.size())
    throw_error<InvalidArgument>("Dataset::take: range [", begin, ", ", end, ") of ", idx.size(), " indices");
  std::vector<std::pair<std::string, Tensor>> r;
  for (const auto& [n, t] : arrays_) r.emplace_back(n, take_rows(t, idx, begin, end));
  return Dataset(std::move(r));
}

Dataset Dataset::slice(int64_t begin, int64_t end) const {
  if (begin < 0 || begin > end || end > size_)
    throw_error<InvalidArgument>("Dataset::slice: [", begin, ", ", end, ") is not within the ", size_, " samples");
  std::vector<int64_t> idx(size_t(end - begin));
  std::iota(idx.begin(), idx.end(), begin);
  return take(idx, 0, idx.size());
}

// ------------------------------------------------------------------------------------------------
// Objective and evaluation

const char* metric_name(Metric m) {
  switch (m) {
    case Metric::kAccuracy: return "accuracy";
    case Metric::kBinaryAccuracy: return "binary_accuracy";
    case Metric::kR2: return "r2";
    default: return "none";
  }
}

Metric parse_metric(const std::string& name) {
  for (Metric m : {Metric::kNone, Metric::kAccuracy, Metric::kBinaryAccuracy, Metric::kR2})
    if (name == metric_name(m)) return m;
  throw_error<InvalidArgument>("unknown metric '", name, "' (known: none, accuracy, binary_accuracy, r2)");
}

void Objective::validate(const std::string& owner) const {
  if (loss_output.empty()) throw_error<InvalidArgument>(owner, ".loss_output is empty");
  if (metric != Metric::kNone && score_output.empty())
    throw_error<InvalidArgument>(owner, ".score_output is empty: metric '", metric_name(metric),
                                 "' needs the output it scores");
  if (metric == Metric::kNone && !score_output.empty())
    throw_error<InvalidArgument>(owner, ".score_output '", score_output, "' is set but ", owner, ".metric is none");
  if (metric != Metric::kNone && label_name.empty()) throw_error<InvalidArgument>(owner, ".label_name is empty");
  if (!std::isfinite(threshold)) throw_error<InvalidArgument>(owner, ".threshold must be finite, got ", threshold);
  if (ignore_index && metric != Metric::kAccuracy)
    throw_error<InvalidArgument>(owner, ".ignore_index goes with metric accuracy, not ", metric_name(metric));
}

EvalResult evaluate(const Dataset& data, const Objective& o, int64_t batch_size, const BatchRunner& run) {
  o.validate();
  if (batch_size < 1) throw_error<InvalidArgument>("evaluate: batch_size must be >= 1, got ", batch_size);
  if (data.size() < 1) throw_error<InvalidArgument>("evaluate: the data holds no samples");
  if (o.metric != Metric::kNone) data.at(o.label_name);  // names a missing label array up front
  std::vector<std::string> names{o.loss_output};
  if (o.metric != Metric::kNone) names.push_back(o.score_output);
  if (o.loss_weighted) batch_size = data.size();
  train::ScoreAccumulator acc(o);
  double total = 0;
  for (int64_t b = 0; b < data.size(); b += batch_size) {
    const int64_t e = std::min(data.size(), b + batch_size);
    const Dataset batch = data.slice(b, e);
    const std::vector<Tensor> out = run(batch.arrays(), names);
    if (out.size() != names.size())
      throw_error<RuntimeError>("evaluate: the batch runner returned ", out.size(), " outputs for ", names.size());
    const double l = train::scalar_loss(out[0], o.loss_output);
    total += o.loss_summed ? l : l * double(e - b);
    if (o.metric != Metric::kNone) acc.add(out[1], batch.at(o.label_name));
  }
  EvalResult r;
  r.samples = data.size();
  r.loss = o.loss_summed ? total : total / double(data.size());
  r.metric = acc.value();
  r.correct = acc.correct();
  r.counted = acc.total();
  return r;
}

EvalResult evaluate(InferenceSession& session, const Dataset& data, const Objective& objective, int64_t batch_size) {
  return evaluate(data, objective, batch_size,
                  [&](const std::vector<std::pair<std::string, Tensor>>& batch, const std::vector<std::string>& names) {
                    return session.run(names, batch);
                  });
}

}  // namespace onnxtrain
