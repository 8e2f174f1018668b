#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "onnxtrain/error.h"

namespace onnxtrain::train {

namespace {
const std::vector<std::string> kKinds = {"constant",   "invscaling", "optimal",        "linear",
                                         "cosine",     "polynomial", "constant_warmup"};
}  // namespace

void check_lr_schedule_kind(const std::string& kind) {
  if (std::find(kKinds.begin(), kKinds.end(), kind) != kKinds.end()) return;
  std::string all;
  for (const auto& k : kKinds) all += (all.empty() ? "" : ", ") + k;
  throw_error<InvalidArgument>("learning rate schedule: unknown kind '", kind, "' (known: ", all, ")");
}

void LrSchedule::validate() const {
  check_lr_schedule_kind(kind);
  if (!(eta0 >= 0) || !std::isfinite(eta0)) throw_error<InvalidArgument>("learning rate schedule: eta0 must be >= 0, got ", eta0);
  if (kind == "optimal" && !(alpha > 0)) throw_error<InvalidArgument>("learning rate schedule: alpha must be > 0, got ", alpha);
  if (warmup < 0) throw_error<InvalidArgument>("learning rate schedule: warmup must be >= 0, got ", warmup);
  const bool decays = kind == "linear" || kind == "cosine" || kind == "polynomial";
  if (decays && total <= warmup)
    throw_error<InvalidArgument>("learning rate schedule '", kind, "': total steps (", total,
                                 ") must exceed the warm-up steps (", warmup, ")");
  if (kind == "polynomial" && !(power > 0)) throw_error<InvalidArgument>("learning rate schedule: power must be > 0, got ", power);
}

double LrSchedule::value(int64_t t) const {
  t = std::max<int64_t>(t, 1);
  if (kind == "invscaling") return eta0 / std::pow(double(t), power_t);
  if (kind == "optimal") {
    // Bottou's heuristic: typical weight typw, initial rate eta0' = typw / max(1, dloss bound);
    // t0 = 1 / (eta0' alpha); scaled so that the first step uses eta0.
    const double typw = std::sqrt(1.0 / std::sqrt(alpha));
    const double init_eta = typw / std::max(1.0, (1.0 + typw) * 2.0);
    const double t0 = 1.0 / (init_eta * alpha);
    const double fact = eta0 / (1.0 / (alpha * t0));
    return fact / (alpha * (t0 + double(t - 1)));
  }
  if (warmup > 0 && t <= warmup) return eta0 * double(t) / double(warmup);
  if (kind == "constant" || kind == "constant_warmup") return eta0;
  const double progress = std::min(1.0, double(t - warmup) / double(total - warmup));
  if (kind == "linear") return end_lr + (eta0 - end_lr) * (1.0 - progress);
  if (kind == "cosine") return end_lr + (eta0 - end_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
  return end_lr + (eta0 - end_lr) * std::pow(1.0 - progress, power);  // polynomial
}

const std::vector<std::string>& lr_schedule_kinds() { return kKinds; }

}  // namespace onnxtrain::train
