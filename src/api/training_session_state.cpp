// TrainingSession's state (include/onnxtrain/training.h): copies of the weights and of the
// optimizer state, and the exact checkpoints (weights, optimizer state, accumulators in progress,
// counters, the loss scaler), sharded over the ranks of a data-parallel job where their states
// differ (train/sharded_checkpoint.h).
#include "onnxtrain/training.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <set>

#include "api/training_session_impl.h"
#include "distributed/comm.h"
#include "train/sharded_checkpoint.h"

namespace onnxtrain {

std::vector<std::pair<std::string, Tensor>> TrainingSession::get_state() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->state_to_host();
  std::vector<std::pair<std::string, Tensor>> r;
  for (const auto& [n, t] : impl_->model.graph->initializers) r.emplace_back(n, t.clone());
  return r;
}

std::vector<std::pair<std::string, Tensor>> TrainingSession::get_model_state() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->state_to_host();
  std::vector<std::pair<std::string, Tensor>> r;
  for (size_t i = 0; i < impl_->trained.size(); ++i) r.emplace_back(impl_->trained[i], impl_->weights[i]->clone());
  return r;
}

std::vector<std::pair<std::string, Tensor>> TrainingSession::get_optimizer_state() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->state_to_host();
  std::vector<std::pair<std::string, Tensor>> r;
  for (const auto& u : impl_->optimizer_states()) r.emplace_back(u->key, impl_->state(u->state)->clone());
  r.emplace_back("step", Tensor::scalar<int64_t>(impl_->driver.step));
  return r;
}

std::vector<std::string> TrainingSession::optimizer_state_names() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::string> r;
  for (const auto& u : impl_->optimizer_states()) r.push_back(u->key);
  r.emplace_back("step");
  return r;
}

void TrainingSession::load_state(const std::vector<std::pair<std::string, Tensor>>& state, bool strict) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl::HostStateWrite write(*impl_);
  std::set<std::string> given;
  for (const auto& [n, t] : state) {
    Tensor* w = impl_->initializer(n);
    if (!w) throw_error<InvalidArgument>("load_state: '", n, "' is not an initializer of the model");
    if (impl_->params.immutable_weights.count(n))
      throw_error<InvalidArgument>("load_state: '", n, "' is an immutable weight");
    if (w->dtype() != t.dtype() || w->shape() != t.shape())
      throw_error<InvalidArgument>("load_state: '", n, "' is ", t.describe(), ", the model's is ", w->describe());
    given.insert(n);
  }
  if (strict)
    for (const auto& n : impl_->trained)
      if (!given.count(n)) throw_error<InvalidArgument>("load_state(strict=True): weight '", n, "' is missing");
  for (const auto& [n, t] : state) impl_->initializer(n)->copy_from(t);
}

void TrainingSession::load_optimizer_state(const std::vector<std::pair<std::string, Tensor>>& state, bool strict) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl::HostStateWrite write(*impl_);
  std::map<std::string, Tensor*> known;
  std::map<std::string, std::string> state_of;
  for (const auto* u : impl_->optimizer_states()) known[u->key] = impl_->state(u->state), state_of[u->key] = u->state;
  std::set<std::string> given;
  std::map<std::string, Tensor> relaid;  // whole tensors re-laid out (ZeRO parts, merged parts)
  const Tensor* step = nullptr;
  for (const auto& [n, t] : state) {
    if (n == "step") {
      if (t.dtype() != DType::kInt64 || t.numel() != 1 || t.data<int64_t>()[0] < 0)
        throw_error<InvalidArgument>("load_optimizer_state: 'step' must be one non-negative int64, got ", t.describe());
      step = &t;
    } else {
      auto it = known.find(n);
      if (it == known.end()) throw_error<InvalidArgument>("load_optimizer_state: '", n, "' is not optimizer state of this session");
      if (it->second->dtype() != t.dtype() || it->second->shape() != t.shape()) {
        std::optional<Tensor> r = impl_->relayout_state(state_of.at(n), t);
        if (!r)
          throw_error<InvalidArgument>("load_optimizer_state: '", n, "' is ", t.describe(), ", the session's is ",
                                       it->second->describe());
        relaid[n] = std::move(*r);
      }
    }
    given.insert(n);
  }
  if (strict) {
    for (const auto& [n, t] : known)
      if (!given.count(n)) throw_error<InvalidArgument>("load_optimizer_state(strict=True): '", n, "' is missing");
    if (!step) throw_error<InvalidArgument>("load_optimizer_state(strict=True): 'step' is missing");
  }
  for (const auto& [n, t] : state)
    if (n != "step") known.at(n)->copy_from(relaid.count(n) ? relaid.at(n) : t);
  if (step) impl_->driver.step = step->data<int64_t>()[0];
}

void TrainingSession::save_checkpoint(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->state_to_host();
  const Impl& s = *impl_;
  auto state = [&] { return s.checkpoint(metadata); };
  if (s.world == 1) {
    train::write_checkpoint(path, state());
    return;
  }
  // Identical states (stage 0, no accumulation in progress that only this rank holds): one
  // checkpoint, which resumes on any number of ranks. Otherwise a shard per rank and a manifest.
  const bool sharded = s.params.deepspeed_zero_stage == 1 ||
                       (s.params.allreduce_post_accumulation && s.params.gradient_accumulation_steps > 1 && s.driver.micro > 0);
  train::Checkpoint manifest;
  if (sharded) {
    manifest.fingerprint = train::model_fingerprint(s.model, s.trained);
    manifest.counters["zero_stage"] = s.params.deepspeed_zero_stage;
    manifest.counters["optimizer_step"] = s.driver.step;
    manifest.counters["micro_step"] = s.driver.micro;
    for (const auto& [k, v] : metadata) manifest.text["user/" + k] = v;
    manifest.text["optimizer"] = s.optimizer_name;
  }
  train::write_job_checkpoint(distributed::Comm::world(), path, state, sharded ? &manifest : nullptr);
}

train::Checkpoint TrainingSession::Impl::checkpoint(const std::map<std::string, std::string>& metadata) const {
  train::Checkpoint c;
  for (const auto& [k, v] : metadata) c.text["user/" + k] = v;
  c.fingerprint = train::model_fingerprint(model, trained);
  for (const auto& [n, t] : model.graph->initializers)
    if (dtype_is_float(t.dtype())) c.tensors.emplace_back("model/" + n, t);
  for (const auto* u : optimizer_states())
    c.tensors.emplace_back("optimizer/" + u->key, *tg.model.graph->initializer(u->state));
  for (const auto& u : tg.updates)
    if (u.kind == train::StateUpdate::Kind::kAccumulator)
      c.tensors.emplace_back("accumulator/" + u.weight, *tg.model.graph->initializer(u.state));
  c.counters["optimizer_step"] = driver.step;
  c.counters["micro_step"] = driver.micro;
  c.counters["train_runs"] = int64_t(train_exec->run_counter());
  c.text["optimizer"] = optimizer_name;
  if (fp16) {  // the dynamic loss scaler: a resumed run scales as the uninterrupted one
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", scaler.scale);
    c.text["amp/loss_scale"] = buf;
    c.counters["amp/stable_steps"] = scaler.stable_steps;
    c.counters["amp/skipped_updates"] = scaler.skipped;
  }
  return c;
}

std::optional<Tensor> TrainingSession::Impl::relayout_state(const std::string& state_name, const Tensor& src) const {
  const train::StateUpdate* u = nullptr;
  for (const auto& x : tg.updates)
    if (x.state == state_name && x.kind == train::StateUpdate::Kind::kOptimizerState) u = &x;
  const Tensor* dst = tg.model.graph->initializer(state_name);
  const Tensor* weight = u ? model.graph->initializer(u->weight) : nullptr;
  if (!weight || !dst) return std::nullopt;
  std::pair<int64_t, int64_t> part(0, weight->numel());
  if (world > 1 && params.deepspeed_zero_stage == 1) {
    std::vector<int64_t> numels;
    for (const Tensor* w : weights) numels.push_back(w->numel());
    const size_t i = size_t(std::find(trained.begin(), trained.end(), u->weight) - trained.begin());
    if (i == trained.size()) return std::nullopt;
    part = train::zero_part(numels, i, rank, world);
  }
  return train::relayout_state(src, *dst, weight->numel(), part);
}

namespace {

// A checkpoint tensor to restore: still in the file (a single checkpoint, read straight into the
// session's storage when the load commits) or in memory (a partitioned checkpoint's merged shards,
// or optimizer state re-laid out for another partition).
struct StoredTensor {
  const train::CheckpointEntry* entry = nullptr;
  const Tensor* memory = nullptr;
  DType dtype() const { return memory ? memory->dtype() : entry->dtype; }
  const Shape& shape() const { return memory ? memory->shape() : entry->shape; }
};

}  // namespace

std::map<std::string, std::string> TrainingSession::load_checkpoint(const std::string& path) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl::HostStateWrite write(*impl_);
  Impl& s = *impl_;
  // A single checkpoint streams: its header is read and checked here, every tensor's checksum is
  // verified before anything changes, and each tensor is then read into its storage (no second copy
  // of the state). A partitioned one is merged in memory from its shards first.
  train::CheckpointReader reader(path);
  train::Checkpoint c = reader.meta();
  std::vector<std::pair<std::string, StoredTensor>> stored;
  const bool sharded = train::is_sharded_manifest(c);
  if (sharded) {
    c = train::read_sharded_checkpoint(path, c, s.rank, s.world, s.world > 1 && s.params.deepspeed_zero_stage == 1);
    for (const auto& [n, t] : c.tensors) stored.emplace_back(n, StoredTensor{nullptr, &t});
  } else {
    for (const auto& e : reader.entries()) stored.emplace_back(e.name, StoredTensor{&e, nullptr});
  }
  if (auto kind = c.text.find("kind"); kind != c.text.end())
    throw_error<InvalidArgument>("checkpoint '", path, "' was written by ", kind->second,
                                 ", not by a TrainingSession: load it with that trainer");
  const std::string fp = train::model_fingerprint(s.model, s.trained);
  if (c.fingerprint != fp)
    throw_error<InvalidArgument>("checkpoint '", path, "' was written for a different model or set of trained weights");
  auto opt = c.text.find("optimizer");
  if (opt == c.text.end() || opt->second != s.optimizer_name)
    throw_error<InvalidArgument>("checkpoint '", path, "' holds the state of optimizer '",
                                 opt == c.text.end() ? "?" : opt->second, "', this session uses '", s.optimizer_name,
                                 "'");
  const int64_t step = c.counters["optimizer_step"], micro = c.counters["micro_step"];
  // Everything is validated before anything is overwritten.
  std::vector<std::pair<Tensor*, StoredTensor>> copies;
  std::deque<Tensor> owned;  // re-laid-out optimizer state (stable addresses)
  std::map<std::string, StoredTensor> opt_state, accum;
  for (const auto& [n, t] : stored) {
    if (n.rfind("model/", 0) == 0) {
      const std::string w = n.substr(6);
      Tensor* dst = s.initializer(w);
      if (!dst || dst->shape() != t.shape() || dst->dtype() != t.dtype())
        throw_error<InvalidArgument>("checkpoint '", path, "': tensor '", w, "' does not match the model");
      copies.emplace_back(dst, t);
    } else if (n.rfind("optimizer/", 0) == 0) {
      opt_state[n.substr(10)] = t;
    } else if (n.rfind("accumulator/", 0) == 0) {
      accum[n.substr(12)] = t;
    }
  }
  auto restore = [&](const std::map<std::string, StoredTensor>& from, const std::string& key, const std::string& state,
                     const char* what) {
    auto it = from.find(key);
    Tensor* dst = s.state(state);
    if (it == from.end()) throw_error<InvalidArgument>(what, " '", key, "' is missing");
    const StoredTensor& src = it->second;
    if (src.shape() == dst->shape() && src.dtype() == dst->dtype()) {
      copies.emplace_back(dst, src);
      return;
    }
    // Another partition of the state (ZeRO-1 over another number of ranks): this one tensor is read
    // to be re-laid out.
    std::optional<Tensor> read;
    if (!src.memory) read = reader.read(*src.entry);
    if (std::optional<Tensor> t = s.relayout_state(state, src.memory ? *src.memory : *read)) {
      owned.push_back(std::move(*t));
      copies.emplace_back(dst, StoredTensor{nullptr, &owned.back()});
      return;
    }
    throw_error<InvalidArgument>(what, " '", key, "' is ", dtype_name(src.dtype()), shape_to_string(src.shape()),
                                 ", expected ", dst->describe());
  };
  // Format 1 kept optimizer state at zero before the first update (its optimizer applied Adagrad's
  // initial_accumulator_value then); the training graph's state starts from its initial value.
  if (c.version >= 2 || step > 0)
    for (const auto* u : s.optimizer_states()) restore(opt_state, u->key, u->state, "optimizer state");
  if (micro > 0)
    for (const auto& u : s.tg.updates)
      if (u.kind == train::StateUpdate::Kind::kAccumulator) restore(accum, u.weight, u.state, "accumulator");
  if (micro < 0 || micro >= s.params.gradient_accumulation_steps || step < 0)
    throw_error<InvalidArgument>("checkpoint '", path, "' holds step ", step, " and micro-step ", micro,
                                 ", impossible with gradient_accumulation_steps ", s.params.gradient_accumulation_steps);
  double scale = s.scaler.scale;
  if (s.fp16 && c.text.count("amp/loss_scale")) {
    char* end = nullptr;
    const std::string& v = c.text.at("amp/loss_scale");
    scale = std::strtod(v.c_str(), &end);
    if (v.empty() || *end || !(scale > 0) || !std::isfinite(scale) || c.counters["amp/stable_steps"] < 0)
      throw_error<InvalidArgument>("checkpoint '", path, "': damaged loss scaler state (loss scale '", v, "')");
  }
  if (!sharded) reader.verify_all();
  for (auto& [dst, src] : copies) {
    if (src.memory) {
      dst->copy_from(*src.memory);
      continue;
    }
    // Verified above: a mismatch now means the file changed while it was being loaded.
    try {
      reader.read_into(*src.entry, dst->raw_data());
    } catch (const InvalidArgument& e) {
      throw_error<InvalidArgument>(e.what(), " while it was being loaded (the file changed after its checksums were "
                                   "verified); the session's state is now partly overwritten");
    }
  }
  s.driver.step = step;
  s.driver.micro = micro;
  if (s.fp16 && c.text.count("amp/loss_scale")) {
    s.scaler.scale = scale;
    s.scaler.stable_steps = c.counters["amp/stable_steps"];
    s.scaler.skipped = c.counters["amp/skipped_updates"];
  }
  s.train_exec->set_run_counter(uint64_t(c.counters["train_runs"]));
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : c.text)
    if (k.rfind("user/", 0) == 0) meta[k.substr(5)] = v;
  return meta;
}

}  // namespace onnxtrain
