// TrainingParameters as a TrainingSession reads them (internal): the precision it trains in, its
// learning-rate schedule, and the fields the ranks of a data-parallel job compare.
#pragma once

#include <string>
#include <vector>

#include "distributed/rank_agreement.h"
#include "onnxtrain/training.h"
#include "train/lr_schedule.h"

namespace onnxtrain::api {

/// The precision a session trains in: mixed_precision, or "fp16" for onnxruntime's
/// use_mixed_precision ("" = fp32).
std::string effective_precision(const TrainingParameters& p);

/// The schedule of lr_schedule and lr_schedule_params; InvalidArgument names an unknown parameter.
train::LrSchedule lr_schedule_of(const TrainingParameters& p);

/// The fields every rank of a job must share ("TrainingParameters.<field>" and its value).
std::vector<distributed::RankFact> parameter_facts(const TrainingParameters& p);

}  // namespace onnxtrain::api
