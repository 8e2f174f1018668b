// TrainingParameters (include/onnxtrain/training.h): validation field by field and as a whole,
// the schedule they give, the fields the ranks of a job compare, and the catalogues of the values
// they accept (optimizers and their hyper-parameters, schedules).
#include "api/training_parameters.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <utility>

#include "ops/optimizers.h"
#include "onnxtrain/error.h"
#include "train/attach_optimizer.h"

namespace onnxtrain {

namespace api {

std::string effective_precision(const TrainingParameters& p) {
  if (p.mixed_precision == "fp32") return "";
  if (p.mixed_precision.empty() && p.use_mixed_precision) return "fp16";
  return p.mixed_precision;
}

train::LrSchedule lr_schedule_of(const TrainingParameters& p) {
  train::LrSchedule s;
  s.kind = p.lr_schedule;
  for (const auto& [k, v] : p.lr_schedule_params) {
    if (k == "eta0") s.eta0 = v;
    else if (k == "power_t") s.power_t = v;
    else if (k == "alpha") s.alpha = v;
    else if (k == "warmup") s.warmup = int64_t(v);
    else if (k == "total") s.total = int64_t(v);
    else if (k == "end_lr") s.end_lr = v;
    else if (k == "power") s.power = v;
    else throw_error<InvalidArgument>("TrainingParameters.lr_schedule_params: unknown key '", k, "'");
  }
  return s;
}

std::vector<distributed::RankFact> parameter_facts(const TrainingParameters& p) {
  std::vector<distributed::RankFact> d;
  auto opt = [&](const std::string& field, const std::string& v) { d.push_back({"TrainingParameters." + field, v}); };
  auto set_text = [](const std::set<std::string>& s) {
    std::string r;
    for (const auto& x : s) r += x + ";";
    return r;
  };
  opt("loss_output_name", p.loss_output_name);
  opt("weights_to_train", set_text(p.weights_to_train));
  opt("weights_not_to_train", set_text(p.weights_not_to_train));
  opt("immutable_weights", set_text(p.immutable_weights));
  opt("training_optimizer_name", p.training_optimizer_name);
  opt("lr_params_feed_name", p.lr_params_feed_name);
  {
    std::ostringstream o;
    o.precision(17);
    for (const auto& [k, v] : p.optimizer_attributes) o << k << '=' << v << ';';
    for (const auto& [k, v] : p.optimizer_int_attributes) o << k << '=' << v << ';';
    for (const auto& [w, m] : p.optimizer_attributes_map)
      for (const auto& [k, v] : m) o << w << '.' << k << '=' << v << ';';
    for (const auto& [w, m] : p.optimizer_int_attributes_map)
      for (const auto& [k, v] : m) o << w << '.' << k << '=' << v << ';';
    opt("optimizer_attributes", o.str());
    std::ostringstream l;
    l.precision(17);
    for (const auto& [k, v] : p.lr_schedule_params) l << k << '=' << v << ';';
    opt("lr_schedule_params", l.str());
  }
  opt("gradient_accumulation_steps", std::to_string(p.gradient_accumulation_steps));
  opt("enable_grad_norm_clip", std::to_string(p.enable_grad_norm_clip));
  opt("max_grad_norm", std::to_string(p.max_grad_norm));
  opt("mixed_precision", effective_precision(p));
  opt("loss_scale", std::to_string(p.loss_scale));
  opt("lr_schedule", p.lr_schedule);
  opt("allreduce_post_accumulation", std::to_string(p.allreduce_post_accumulation));
  opt("deepspeed_zero_stage", std::to_string(p.deepspeed_zero_stage));
  opt("enable_adasum", std::to_string(p.enable_adasum));
  opt("portable_training_graph", std::to_string(p.portable_training_graph));
  {
    std::string r = std::to_string(p.attn_dropout_recompute) + std::to_string(p.gelu_recompute) +
                    std::to_string(p.transformer_layer_recompute) + ":" + std::to_string(p.number_recompute_layers) + ":";
    for (const auto& v : p.recompute_values) r += v + ";";
    r += ":" + std::to_string(p.recompute_budget_bytes) + ":" + std::to_string(p.use_memory_efficient_gradient);
    opt("recompute", r);
  }
  return d;
}

}  // namespace api

using api::effective_precision;
using api::lr_schedule_of;

namespace {

// The fields with a constraint of their own, each with its check (the message names the field).
using FieldCheck = void (*)(const TrainingParameters&, const std::string& field);
const std::vector<std::pair<std::string, FieldCheck>>& field_checks() {
  static const std::vector<std::pair<std::string, FieldCheck>> checks = {
      {"training_optimizer_name", [](const TrainingParameters& p, const std::string&) {
         train::optimizer_spec(p.training_optimizer_name);  // names the known optimizers
       }},
      {"lr_params_feed_name", [](const TrainingParameters& p, const std::string& f) {
         if (p.lr_params_feed_name.empty()) throw_error<InvalidArgument>("TrainingParameters.", f, " is empty");
       }},
      {"gradient_accumulation_steps", [](const TrainingParameters& p, const std::string& f) {
         if (p.gradient_accumulation_steps < 1)
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be an integer >= 1, got ",
                                        p.gradient_accumulation_steps);
       }},
      {"max_grad_norm", [](const TrainingParameters& p, const std::string& f) {
         if (!(p.max_grad_norm > 0) || !std::isfinite(p.max_grad_norm))
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be > 0, got ", p.max_grad_norm);
       }},
      {"lr_schedule", [](const TrainingParameters& p, const std::string& f) {
         if (p.lr_schedule.empty()) return;
         try {
           train::check_lr_schedule_kind(p.lr_schedule);
         } catch (const InvalidArgument& e) {
           throw_error<InvalidArgument>("TrainingParameters.", f, ": ", e.what());
         }
       }},
      {"mixed_precision", [](const TrainingParameters& p, const std::string& f) {
         if (!p.mixed_precision.empty() && p.mixed_precision != "fp32" && p.mixed_precision != "bf16" &&
             p.mixed_precision != "fp16")
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be '', 'fp32', 'bf16' or 'fp16', got '",
                                        p.mixed_precision, "'");
       }},
      {"loss_scale", [](const TrainingParameters& p, const std::string& f) {
         if (!(p.loss_scale >= 0) || !std::isfinite(p.loss_scale))
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be finite and >= 0 (0: dynamic), got ",
                                        p.loss_scale);
       }},
      {"lr_schedule_params", [](const TrainingParameters& p, const std::string&) {
         lr_schedule_of(p);  // names an unknown key
       }},
      {"number_recompute_layers", [](const TrainingParameters& p, const std::string& f) {
         if (p.number_recompute_layers < 0)
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be >= 0, got ", p.number_recompute_layers);
       }},
      {"recompute_budget_bytes", [](const TrainingParameters& p, const std::string& f) {
         if (p.recompute_budget_bytes < 0)
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be >= 0 (0: no budget), got ",
                                        p.recompute_budget_bytes);
       }},
      {"world_size", [](const TrainingParameters& p, const std::string& f) {
         if (p.world_size < 1) throw_error<InvalidArgument>("TrainingParameters.", f, " must be >= 1, got ", p.world_size);
       }},
      {"world_rank", [](const TrainingParameters& p, const std::string& f) {
         if (p.world_rank < 0) throw_error<InvalidArgument>("TrainingParameters.", f, " must be >= 0, got ", p.world_rank);
       }},
      {"local_rank", [](const TrainingParameters& p, const std::string& f) {
         if (p.local_rank < 0) throw_error<InvalidArgument>("TrainingParameters.", f, " must be >= 0, got ", p.local_rank);
       }},
      {"data_parallel_size", [](const TrainingParameters& p, const std::string& f) {
         if (p.data_parallel_size < 1)
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be >= 1, got ", p.data_parallel_size);
       }},
      {"horizontal_parallel_size", [](const TrainingParameters& p, const std::string& f) {
         if (p.horizontal_parallel_size < 1)
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be >= 1, got ", p.horizontal_parallel_size);
       }},
      {"pipeline_parallel_size", [](const TrainingParameters& p, const std::string& f) {
         if (p.pipeline_parallel_size < 1)
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be >= 1, got ", p.pipeline_parallel_size);
       }},
      {"deepspeed_zero_stage", [](const TrainingParameters& p, const std::string& f) {
         if (p.deepspeed_zero_stage < 0 || p.deepspeed_zero_stage > 1)
           throw_error<InvalidArgument>("TrainingParameters.", f, " must be 0 or 1, got ", p.deepspeed_zero_stage);
       }},
  };
  return checks;
}

}  // namespace

void TrainingParameters::validate_field(const std::string& field) const {
  for (const auto& [name, check] : field_checks())
    if (name == field) check(*this, name);
}

void TrainingParameters::validate() const {
  if (loss_output_name.empty()) throw_error<InvalidArgument>("TrainingParameters.loss_output_name is empty");
  for (const auto& [name, check] : field_checks()) check(*this, name);
  if (horizontal_parallel_size > 1)
    throw_error<NotImplemented>("TrainingParameters.horizontal_parallel_size = ", horizontal_parallel_size,
                                ": horizontal (tensor) parallelism is not implemented; data parallelism is");
  if (pipeline_parallel_size > 1)
    throw_error<NotImplemented>("TrainingParameters.pipeline_parallel_size = ", pipeline_parallel_size,
                                ": pipeline parallelism is not implemented; data parallelism is");
  if (use_mixed_precision && mixed_precision == "fp32")
    throw_error<InvalidArgument>("TrainingParameters.use_mixed_precision is true but mixed_precision is 'fp32'");
  if (loss_scale > 0 && effective_precision(*this) != "fp16")
    throw_error<InvalidArgument>("TrainingParameters.loss_scale applies to float16 mixed precision (mixed_precision "
                                 "'fp16' or use_mixed_precision); this session trains in ",
                                 effective_precision(*this).empty() ? "fp32" : effective_precision(*this));
  if (world_rank >= world_size && world_size > 1)
    throw_error<InvalidArgument>("TrainingParameters.world_rank ", world_rank, " is not below world_size ", world_size);
  if (data_parallel_size > 1 && world_size > 1 && data_parallel_size != world_size)
    throw_error<InvalidArgument>("TrainingParameters.data_parallel_size ", data_parallel_size, " differs from world_size ",
                                 world_size, " (without horizontal or pipeline parallelism they are equal)");
  if (lr_schedule.empty() && !lr_schedule_params.empty())
    throw_error<InvalidArgument>("TrainingParameters.lr_schedule_params is set but lr_schedule is empty");
  for (const auto& w : weights_to_train)
    if (weights_not_to_train.count(w) || immutable_weights.count(w))
      throw_error<InvalidArgument>("TrainingParameters: '", w, "' is both in weights_to_train and ",
                                   weights_not_to_train.count(w) ? "weights_not_to_train" : "immutable_weights");
  if (!lr_schedule.empty()) {
    train::LrSchedule s = lr_schedule_of(*this);
    try {
      s.validate();
    } catch (const InvalidArgument& e) {
      throw_error<InvalidArgument>("TrainingParameters.lr_schedule: ", e.what());
    }
  }
}

double scheduled_learning_rate(const TrainingParameters& params, int64_t step) {
  if (params.lr_schedule.empty())
    throw_error<InvalidArgument>("scheduled_learning_rate: TrainingParameters.lr_schedule is empty");
  params.validate();
  return lr_schedule_of(params).value(step);
}

std::vector<std::string> lr_schedule_names() { return train::lr_schedule_kinds(); }

std::vector<std::string> optimizer_names() {
  std::vector<std::string> r;
  for (const auto& s : ops::optimizer_specs()) r.push_back(s.name);
  return r;
}

std::vector<OptimizerHyperparameter> optimizer_hyperparameters(const std::string& name) {
  const ops::OptimizerSpec& s = train::optimizer_spec(name);
  std::vector<OptimizerHyperparameter> r;
  auto shortest = [](float v) {  // the double of the float's shortest decimal form: 0.9f gives 0.9
    char buf[32];
    auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
    *end = '\0';
    return std::strtod(buf, nullptr);
  };
  for (const auto* attrs : {&s.float_attrs, &s.state_init_attrs})
    for (const auto& a : *attrs) r.push_back({a.name, shortest(a.dflt), false});
  for (const auto& a : s.int_attrs) r.push_back({a.name, double(a.dflt), true});
  return r;
}

}  // namespace onnxtrain
