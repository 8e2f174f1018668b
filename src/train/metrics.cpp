#include "train/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "onnxtrain/error.h"
#include "onnxtrain/io.h"

namespace onnxtrain::train {

double scalar_loss(const Tensor& t, const std::string& name) {
  if (t.numel() != 1) throw_error<InvalidArgument>("the loss output '", name, "' is ", t.describe(), ", not a scalar");
  return tensor_to_doubles(t)[0];
}

void ScoreAccumulator::add(const Tensor& score, const Tensor& label) {
  if (metric_ == Metric::kNone) return;
  const std::vector<double> s = tensor_to_doubles(score), y = tensor_to_doubles(label);
  const int64_t n = score.rank() ? score.dim(0) : 1;
  if (metric_ == Metric::kAccuracy) {
    // Scores [N, C, d1, ...], labels [N, d1, ...]: class = argmax over axis 1.
    const int64_t c = score.rank() >= 2 ? score.dim(1) : 1;
    const int64_t inner = n * c != 0 ? score.numel() / (n * c) : 0;
    if (int64_t(y.size()) != n * inner)
      throw_error<InvalidArgument>("labels ", label.describe(), " do not match the scores ", score.describe());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < inner; ++j) {
        const double yl = y[size_t(i * inner + j)];
        if (ignore_ && int64_t(yl) == *ignore_) continue;
        int64_t best = 0;
        for (int64_t k = 1; k < c; ++k)
          if (s[size_t((i * c + k) * inner + j)] > s[size_t((i * c + best) * inner + j)]) best = k;
        correct_ += double(best) == yl;
        ++total_;
      }
    return;
  }
  if (s.size() != y.size())
    throw_error<InvalidArgument>("labels ", label.describe(), " do not match the scores ", score.describe());
  if (metric_ == Metric::kBinaryAccuracy) {
    for (size_t i = 0; i < s.size(); ++i) {
      correct_ += (s[i] > threshold_) == (y[i] != 0);
      ++total_;
    }
    return;
  }
  const size_t k = n ? s.size() / size_t(n) : 0;  // outputs per sample
  if (sum_y_.empty()) sum_y_.assign(k, 0), sum_y2_.assign(k, 0), ss_res_.assign(k, 0);
  if (sum_y_.size() != k) throw_error<InvalidArgument>("scores change their number of outputs between batches");
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t j = i % k;
    sum_y_[j] += y[i];
    sum_y2_[j] += y[i] * y[i];
    ss_res_[j] += (y[i] - s[i]) * (y[i] - s[i]);
  }
  total_ += n;
}

double ScoreAccumulator::value() const {
  if (metric_ == Metric::kNone || total_ == 0) return NAN;
  if (metric_ != Metric::kR2) return double(correct_) / double(total_);
  // sklearn's r2_score: per output 1 - SS_res / SS_tot (1 when both are 0, 0 when only SS_tot is),
  // averaged over outputs.
  double r = 0;
  for (size_t j = 0; j < sum_y_.size(); ++j) {
    const double mean = sum_y_[j] / double(total_);
    const double ss_tot = std::max(0.0, sum_y2_[j] - double(total_) * mean * mean);
    r += ss_tot > 0 ? 1.0 - ss_res_[j] / ss_tot : ss_res_[j] == 0 ? 1.0 : 0.0;
  }
  return sum_y_.empty() ? NAN : r / double(sum_y_.size());
}

std::string ScoreAccumulator::to_text() const {
  std::string t = std::to_string(correct_) + " " + std::to_string(total_) + " " + std::to_string(sum_y_.size());
  char buf[40];
  for (const auto* v : {&sum_y_, &sum_y2_, &ss_res_})
    for (double x : *v) {
      std::snprintf(buf, sizeof buf, " %a", x);  // hexadecimal: exact
      t += buf;
    }
  return t;
}

void ScoreAccumulator::from_text(const std::string& t) {
  std::istringstream in(t);
  size_t k = 0;
  if (!(in >> correct_ >> total_ >> k) || k > (size_t(1) << 20))
    throw_error<InvalidArgument>("damaged score state in checkpoint metadata");
  for (auto* v : {&sum_y_, &sum_y2_, &ss_res_}) {
    v->assign(k, 0.0);
    for (auto& x : *v) {
      std::string w;
      if (!(in >> w)) throw_error<InvalidArgument>("damaged score state in checkpoint metadata");
      x = std::strtod(w.c_str(), nullptr);
    }
  }
}

}  // namespace onnxtrain::train
