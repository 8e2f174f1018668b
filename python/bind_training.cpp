// Training classes of onnxtrain._C: TrainingParameters (bound field by field, every assignment
// converted with a ValueError naming the field and checked by TrainingParameters::validate_field),
// TrainingSession, the loss builder, the Trainer with its options, callbacks and results.
#include <charconv>
#include <optional>

#include "convert.h"
#include "onnxtrain/distributed.h"
#include "onnxtrain/error.h"
#include "onnxtrain/inspect.h"
#include "onnxtrain/trainer.h"
#include "onnxtrain/training.h"

namespace onnxtrain::python {

namespace {

// ------------------------------------------------------------------------------------------------
// TrainingParameters fields: Python value -> C++ (InvalidArgument naming the field), and back.
// Containers come back read-only (frozenset, mappingproxy): assign a new value to change them.

[[noreturn]] void bad_field(const char* field, const std::string& what) {
  throw_error<InvalidArgument>("TrainingParameters.", field, " ", what);
}

std::string show(py::handle v) { return py::repr(v).cast<std::string>(); }

bool is_bool(py::handle v) {
  static py::object np_bool = py::module_::import("numpy").attr("bool_");
  return py::isinstance<py::bool_>(v) || py::isinstance(v, np_bool);
}

bool is_integer(py::handle v) {
  static py::object np_integer = py::module_::import("numpy").attr("integer");
  return !is_bool(v) && (py::isinstance<py::int_>(v) || py::isinstance(v, np_integer));
}

bool is_number(py::handle v) {
  static py::object np_floating = py::module_::import("numpy").attr("floating");
  return is_integer(v) || py::isinstance<py::float_>(v) || py::isinstance(v, np_floating);
}

// A float32 value as the double its shortest decimal form denotes (0.9f reads back as 0.9).
double shortest(float v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

template <class T>
struct Field;

template <>
struct Field<std::string> {
  static std::string from(const char* f, py::handle v) {
    if (!py::isinstance<py::str>(v)) bad_field(f, "must be a string, got " + std::string(py::str(v.get_type().attr("__name__"))));
    return v.cast<std::string>();
  }
  static py::object to(const std::string& v) { return py::str(v); }
};

template <>
struct Field<bool> {
  static bool from(const char* f, py::handle v) {
    if (!is_bool(v)) bad_field(f, "must be a bool, got " + show(v));
    return py::bool_(py::reinterpret_borrow<py::object>(v));
  }
  static py::object to(bool v) { return py::bool_(v); }
};

template <>
struct Field<int64_t> {
  static int64_t from(const char* f, py::handle v) {
    if (!is_integer(v)) bad_field(f, "must be an integer, got " + show(v));
    return py::int_(py::reinterpret_borrow<py::object>(v)).cast<int64_t>();
  }
  static py::object to(int64_t v) { return py::int_(v); }
};

template <>
struct Field<float> {
  static float from(const char* f, py::handle v) {
    if (!is_number(v)) bad_field(f, "must be a number, got " + show(v));
    return float(py::float_(py::reinterpret_borrow<py::object>(v)).cast<double>());
  }
  static py::object to(float v) { return py::float_(shortest(v)); }
};

// A collection of names (std::set or std::vector) from any iterable of strings but a string;
// anything else is refused with `what` ("must be a set of initializer names").
template <class Names>
Names names_from(const char* f, py::handle v, const char* what) {
  if (py::isinstance<py::str>(v) || py::isinstance<py::bytes>(v) || !py::isinstance<py::iterable>(v)) bad_field(f, what);
  Names r;
  for (auto item : v) {
    if (!py::isinstance<py::str>(item)) bad_field(f, what);
    r.insert(r.end(), item.cast<std::string>());
  }
  return r;
}

template <>
struct Field<std::set<std::string>> {
  static std::set<std::string> from(const char* f, py::handle v) {
    return names_from<std::set<std::string>>(f, v, "must be a set of initializer names");
  }
  static py::object to(const std::set<std::string>& v) {
    py::list l;
    for (const auto& s : v) l.append(s);
    return py::module_::import("builtins").attr("frozenset")(l);
  }
};

// A list of value names (read back as a tuple: assign a new list to change it).
template <>
struct Field<std::vector<std::string>> {
  static std::vector<std::string> from(const char* f, py::handle v) {
    return names_from<std::vector<std::string>>(f, v, "must be a list of value names");
  }
  static py::object to(const std::vector<std::string>& v) { return py::tuple(py::cast(v)); }
};

py::object read_only(py::dict d) { return py::module_::import("types").attr("MappingProxyType")(d); }

// {name: number}; N is float, double or int64_t.
template <class N>
struct Field<std::map<std::string, N>> {
  static N number(const char* f, py::handle x) {
    if (std::is_integral_v<N> ? !is_integer(x) : !is_number(x))
      bad_field(f, std::string("must map names to ") + (std::is_integral_v<N> ? "integers" : "numbers") + ", got " + show(x));
    if constexpr (std::is_integral_v<N>) return py::int_(py::reinterpret_borrow<py::object>(x)).cast<N>();
    else return N(py::float_(py::reinterpret_borrow<py::object>(x)).cast<double>());
  }
  static std::map<std::string, N> from(const char* f, py::handle v) {
    if (!py::isinstance<py::dict>(v) && !py::hasattr(v, "items")) bad_field(f, "must be a dict");
    std::map<std::string, N> r;
    for (auto kv : v.attr("items")()) {
      auto t = kv.cast<py::tuple>();
      if (!py::isinstance<py::str>(t[0])) bad_field(f, "must map names (strings) to numbers, got key " + show(t[0]));
      r[t[0].cast<std::string>()] = number(f, t[1]);
    }
    return r;
  }
  static py::object to(const std::map<std::string, N>& v) {
    py::dict d;
    for (const auto& [k, x] : v) {
      if constexpr (std::is_integral_v<N>) d[py::str(k)] = py::int_(x);
      else if constexpr (std::is_same_v<N, float>) d[py::str(k)] = py::float_(shortest(x));
      else d[py::str(k)] = py::float_(double(x));
    }
    return read_only(d);
  }
};

// {weight: {attribute: number}}
template <class N>
struct Field<std::map<std::string, std::map<std::string, N>>> {
  static std::map<std::string, std::map<std::string, N>> from(const char* f, py::handle v) {
    if (!py::isinstance<py::dict>(v) && !py::hasattr(v, "items")) bad_field(f, "must map weight names to dicts of attributes");
    std::map<std::string, std::map<std::string, N>> r;
    for (auto kv : v.attr("items")()) {
      auto t = kv.cast<py::tuple>();
      if (!py::isinstance<py::str>(t[0]) || !py::hasattr(t[1], "items"))
        bad_field(f, "must map weight names to dicts of attributes");
      r[t[0].cast<std::string>()] = Field<std::map<std::string, N>>::from(f, t[1]);
    }
    return r;
  }
  static py::object to(const std::map<std::string, std::map<std::string, N>>& v) {
    py::dict d;
    for (const auto& [w, m] : v) d[py::str(w)] = Field<std::map<std::string, N>>::to(m);
    return read_only(d);
  }
};

// One field as a property: assignment converts, then TrainingParameters::validate_field checks
// (the previous value stays when either fails).
template <class T>
void field(py::class_<TrainingParameters>& c, const char* name, T TrainingParameters::*member, const char* doc) {
  c.def_property(
      name, [member](const TrainingParameters& p) { return Field<T>::to(p.*member); },
      [name, member](TrainingParameters& p, py::handle v) {
        T value = Field<T>::from(name, v);
        std::swap(p.*member, value);
        try {
          p.validate_field(name);
        } catch (...) {
          std::swap(p.*member, value);
          throw;
        }
      },
      doc);
}

void bind_parameters(py::module_& m) {
  using P = TrainingParameters;
  py::class_<P> c(m, "TrainingParameters",
                  "Configuration of a TrainingSession (onnxruntime's TrainingParameters), defined in C++. Each "
                  "assignment is checked: a wrong type or value raises ValueError naming the field.");
  c.def(py::init<>());
  c.def(py::init<const P&>(), py::arg("other"), "A copy of `other`.");
  field(c, "loss_output_name", &P::loss_output_name, "Scalar loss output of the model (required).");
  field(c, "weights_to_train", &P::weights_to_train, "Initializers to train; empty: every float initializer.");
  field(c, "weights_not_to_train", &P::weights_not_to_train, "Frozen initializers: never updated.");
  field(c, "immutable_weights", &P::immutable_weights, "Constants: never updated, never overwritten by load_state.");
  field(c, "training_optimizer_name", &P::training_optimizer_name, "One of onnxtrain.optimizer_names().");
  field(c, "lr_params_feed_name", &P::lr_params_feed_name, "Feed name of the learning rate (float32 [1]).");
  field(c, "optimizer_attributes", &P::optimizer_attributes, "Float hyper-parameters of the optimizer (alpha, beta, ...).");
  field(c, "optimizer_int_attributes", &P::optimizer_int_attributes, "Integer hyper-parameters (nesterov, ...).");
  field(c, "optimizer_attributes_map", &P::optimizer_attributes_map, "Float hyper-parameters per weight.");
  field(c, "optimizer_int_attributes_map", &P::optimizer_int_attributes_map, "Integer hyper-parameters per weight.");
  field(c, "gradient_accumulation_steps", &P::gradient_accumulation_steps, "run() calls summed per optimizer update.");
  field(c, "enable_grad_norm_clip", &P::enable_grad_norm_clip, "Clip the global gradient norm to max_grad_norm.");
  field(c, "max_grad_norm", &P::max_grad_norm, "Global gradient norm limit (> 0).");
  field(c, "set_gradients_as_graph_outputs", &P::set_gradients_as_graph_outputs, "Let run() return '<w>_grad' outputs.");
  field(c, "model_with_gradient_graph_path", &P::model_with_gradient_graph_path, "Save the gradient model there.");
  field(c, "model_with_training_graph_path", &P::model_with_training_graph_path, "Save the training model there.");
  field(c, "deterministic_compute", &P::deterministic_compute, "Reproducible kernels.");
  field(c, "portable_training_graph", &P::portable_training_graph,
        "Standard ONNX training graph (plus preview-training ops) instead of com.onnxtrain's fused operators.");
  field(c, "mixed_precision", &P::mixed_precision,
        "'' or 'fp32'; 'bf16': MatMul/Gemm/Conv and their gradients in bfloat16 (fp32 accumulation, fp32 master "
        "weights, normalizations, softmax, losses and optimizer); 'fp16': the same in float16 with loss scaling "
        "(an update whose gradients hold inf/NaN is skipped).");
  field(c, "use_mixed_precision", &P::use_mixed_precision,
        "onnxruntime's switch: True with mixed_precision '' trains in 'fp16' (loss scaling).");
  field(c, "loss_scale", &P::loss_scale,
        "fp16: 0 (dynamic: the fed loss scale, else the session's DynamicLossScaler), or a fixed loss scale > 0.");
  field(c, "lr_schedule", &P::lr_schedule, "Schedule used when the feed omits the learning rate; one of "
        "onnxtrain.lr_schedule_names() or ''.");
  field(c, "lr_schedule_params", &P::lr_schedule_params, "eta0, power_t, alpha, warmup, total, end_lr, power.");
  field(c, "world_rank", &P::world_rank, "Rank in the MPI job (0 under mpirun: the launcher's rank).");
  field(c, "world_size", &P::world_size, "Ranks of the MPI job (1 under mpirun: the launcher's size).");
  field(c, "local_rank", &P::local_rank, "Rank on this machine.");
  field(c, "data_parallel_size", &P::data_parallel_size, "1 or world_size.");
  field(c, "horizontal_parallel_size", &P::horizontal_parallel_size, "> 1 raises NotImplementedError.");
  field(c, "pipeline_parallel_size", &P::pipeline_parallel_size, "> 1 raises NotImplementedError.");
  field(c, "allreduce_post_accumulation", &P::allreduce_post_accumulation,
        "Reduce accumulated gradients once per update instead of every run's.");
  field(c, "deepspeed_zero_stage", &P::deepspeed_zero_stage, "0, or 1 (optimizer state partitioned across ranks).");
  field(c, "enable_adasum", &P::enable_adasum, "Combine the ranks' gradients with Adasum (power-of-two world sizes).");
  field(c, "attn_dropout_recompute", &P::attn_dropout_recompute,
        "Recompute attention Dropout outputs (after a Softmax) in the backward pass, from the saved mask.");
  field(c, "gelu_recompute", &P::gelu_recompute, "Recompute Gelu outputs in the backward pass.");
  field(c, "transformer_layer_recompute", &P::transformer_layer_recompute,
        "Recompute whole transformer layers in the backward pass: only each layer's input is kept.");
  field(c, "number_recompute_layers", &P::number_recompute_layers,
        "Layers recomputed with transformer_layer_recompute, from the first; 0: every layer but the last.");
  field(c, "recompute_values", &P::recompute_values,
        "Forward values recomputed in the backward pass, from the values not listed (onnxtrain extension).");
  field(c, "recompute_budget_bytes", &P::recompute_budget_bytes,
        "> 0: bytes of forward activations the backward pass may hold; the fewest graph segments that fit are "
        "recomputed (onnxtrain extension; needs static input shapes).");
  field(c, "use_memory_efficient_gradient", &P::use_memory_efficient_gradient,
        "One update per weight as soon as its gradient is complete: each gradient freed at once (not with "
        "accumulation, clipping, fp16 loss scaling or data parallelism).");
  c.def("validate", &P::validate, "Raises ValueError naming the first invalid field (the fields together).");
}

// ------------------------------------------------------------------------------------------------
// Trainer

// A dict of numpy arrays as a Dataset of views (kept alive by `hold`).
Dataset dataset_from(py::handle d, const char* what, std::vector<py::object>& hold) {
  if (!py::isinstance<py::dict>(d)) throw py::type_error(std::string(what) + " must be a dict of numpy arrays");
  std::vector<std::pair<std::string, Tensor>> arrays;
  for (auto [k, v] : py::reinterpret_borrow<py::dict>(d)) {
    const std::string name = py::str(k);
    arrays.emplace_back(name, tensor_from_array(name, v, hold));
  }
  return Dataset(std::move(arrays));
}

TrainingSession& session_of(py::handle s) {
  py::object o = py::reinterpret_borrow<py::object>(s);
  if (py::hasattr(o, "_sess")) o = o.attr("_sess");  // onnxtrain.TrainingSession
  if (!py::isinstance<TrainingSession>(o)) throw py::type_error("session must be an onnxtrain.TrainingSession");
  return o.cast<TrainingSession&>();
}

std::string fmt(double v) {
  return std::isnan(v) ? "nan" : py::repr(py::float_(v)).cast<std::string>();
}

// A Ctrl-C during fit: Python raises KeyboardInterrupt in the next callback (or in the signal
// check between batches); the trainer then stops after the batch, writes its checkpoint, and fit
// raises it.
struct Interrupt {
  std::optional<py::error_already_set> error;
};

// std::function around a Python callable: called with the GIL.
template <class Arg>
std::function<void(const Arg&)> with_gil(py::object fn, Interrupt& interrupt) {
  if (fn.is_none()) return {};
  return [fn, &interrupt](const Arg& a) {
    py::gil_scoped_acquire gil;
    try {
      fn(a);
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_KeyboardInterrupt)) throw;
      interrupt.error = std::move(e);
    }
  };
}

void bind_trainer(py::module_& m) {
  py::class_<Objective>(m, "Objective", "Which outputs hold the loss and the scores, and how they are reported.")
      .def(py::init<>())
      .def_readwrite("loss_output", &Objective::loss_output, "Loss output ('': the session's loss_output_name).")
      .def_readwrite("loss_summed", &Objective::loss_summed, "The batch loss sums over samples (else a mean).")
      .def_readwrite("loss_weighted", &Objective::loss_weighted,
                     "The batch loss is a weighted mean: evaluation runs the dataset as one batch.")
      .def_readwrite("score_output", &Objective::score_output, "Output scored against the labels.")
      .def_readwrite("label_name", &Objective::label_name, "Dataset array holding the labels.")
      .def_property(
          "metric", [](const Objective& o) { return std::string(metric_name(o.metric)); },
          [](Objective& o, const std::string& v) { o.metric = parse_metric(v); },
          "'none', 'accuracy', 'binary_accuracy' or 'r2'.")
      .def_readwrite("threshold", &Objective::threshold, "binary_accuracy: a score above it predicts 1.")
      .def_readwrite("ignore_index", &Objective::ignore_index, "accuracy: labels equal to it are not counted.");

  py::class_<TrainerOptions>(m, "TrainerOptions", "How a Trainer runs (see include/onnxtrain/trainer.h).")
      .def(py::init<>())
      .def_readwrite("batch_size", &TrainerOptions::batch_size)
      .def_readwrite("epochs", &TrainerOptions::epochs, "Passes over the data (0: 1 unless steps is set).")
      .def_readwrite("steps", &TrainerOptions::steps, "Optimizer steps of the run instead of epochs.")
      .def_readwrite("shuffle", &TrainerOptions::shuffle, "Reshuffle every epoch from seed.")
      .def_readwrite("drop_last", &TrainerOptions::drop_last, "Skip an epoch's last, smaller batch.")
      .def_readwrite("seed", &TrainerOptions::seed, "Data order and validation split.")
      .def_readwrite("validation_split", &TrainerOptions::validation_split, "Fraction held out when fit gets no validation data.")
      .def_readwrite("eval_batch_size", &TrainerOptions::eval_batch_size)
      .def_readwrite("learning_rate", &TrainerOptions::learning_rate,
                     "Fed to every step; required unless the session has an lr_schedule.")
      .def_readwrite("objective", &TrainerOptions::objective)
      .def_readwrite("log_every", &TrainerOptions::log_every, "Optimizer steps between history records (0: ~100 a run).")
      .def_readwrite("checkpoint_path", &TrainerOptions::checkpoint_path,
                     "Written every checkpoint_every steps and when a stop (Ctrl-C) ends fit.")
      .def_readwrite("checkpoint_every", &TrainerOptions::checkpoint_every)
      .def_property(
          "checkpoint_metadata",
          [](const TrainerOptions& o) {
            py::dict d;
            for (const auto& [k, v] : o.checkpoint_metadata) d[py::str(k)] = v;
            return read_only(d);
          },
          [](TrainerOptions& o, std::map<std::string, std::string> v) { o.checkpoint_metadata = std::move(v); },
          "Strings stored with every checkpoint (read-only view: assign a new dict).")
      .def("validate", &TrainerOptions::validate);

  py::class_<EvalResult>(m, "EvalResult", "Loss and metric over a dataset.")
      .def_readonly("samples", &EvalResult::samples)
      .def_readonly("loss", &EvalResult::loss)
      .def_readonly("metric", &EvalResult::metric)
      .def_readonly("correct", &EvalResult::correct)
      .def_readonly("counted", &EvalResult::counted)
      .def("__repr__", [](const EvalResult& r) {
        return "EvalResult(samples=" + std::to_string(r.samples) + ", loss=" + fmt(r.loss) + ", metric=" + fmt(r.metric) + ")";
      });
  py::class_<TrainRecord>(m, "TrainRecord", "One history record; NaN where a value does not apply.")
      .def_readonly("step", &TrainRecord::step)
      .def_readonly("epoch", &TrainRecord::epoch)
      .def_readonly("loss", &TrainRecord::loss)
      .def_readonly("metric", &TrainRecord::metric)
      .def_readonly("lr", &TrainRecord::lr)
      .def_readonly("val_loss", &TrainRecord::val_loss)
      .def_readonly("val_metric", &TrainRecord::val_metric)
      .def_readonly("samples_per_s", &TrainRecord::samples_per_s)
      .def("__repr__", [](const TrainRecord& r) {
        return "TrainRecord(step=" + std::to_string(r.step) + ", epoch=" + fmt(r.epoch) + ", loss=" + fmt(r.loss) +
               ", metric=" + fmt(r.metric) + ", val_loss=" + fmt(r.val_loss) + ", val_metric=" + fmt(r.val_metric) + ")";
      });
  py::class_<StepInfo>(m, "StepInfo", "Passed to on_step after every batch.")
      .def_readonly("step", &StepInfo::step)
      .def_readonly("total_steps", &StepInfo::total_steps)
      .def_readonly("epoch", &StepInfo::epoch)
      .def_readonly("epochs", &StepInfo::epochs)
      .def_readonly("batch", &StepInfo::batch)
      .def_readonly("batches_per_epoch", &StepInfo::batches_per_epoch)
      .def_readonly("updated", &StepInfo::updated)
      .def_readonly("loss", &StepInfo::loss)
      .def_readonly("lr", &StepInfo::lr)
      .def_readonly("epoch_loss", &StepInfo::epoch_loss)
      .def_readonly("epoch_metric", &StepInfo::epoch_metric)
      .def_readonly("samples", &StepInfo::samples)
      .def_readonly("samples_per_s", &StepInfo::samples_per_s)
      .def_readonly("eta_s", &StepInfo::eta_s);
  py::class_<EpochInfo>(m, "EpochInfo", "Passed to on_epoch_end.")
      .def_readonly("epoch", &EpochInfo::epoch)
      .def_readonly("epochs", &EpochInfo::epochs)
      .def_readonly("step", &EpochInfo::step)
      .def_readonly("loss", &EpochInfo::loss)
      .def_readonly("metric", &EpochInfo::metric)
      .def_readonly("val_loss", &EpochInfo::val_loss)
      .def_readonly("val_metric", &EpochInfo::val_metric);
  py::class_<ValidationInfo>(m, "ValidationInfo", "Passed to on_validation.")
      .def_readonly("step", &ValidationInfo::step)
      .def_readonly("epoch", &ValidationInfo::epoch)
      .def_readonly("result", &ValidationInfo::result);
  py::class_<TrainingPlan>(m, "TrainingPlan", "Sizes of a run.")
      .def_readonly("train_samples", &TrainingPlan::train_samples)
      .def_readonly("validation_samples", &TrainingPlan::validation_samples)
      .def_readonly("batches_per_epoch", &TrainingPlan::batches_per_epoch)
      .def_readonly("total_steps", &TrainingPlan::total_steps)
      .def_readonly("epochs", &TrainingPlan::epochs);
  py::class_<FitResult>(m, "FitResult", "How fit ended.")
      .def_readonly("stopped", &FitResult::stopped)
      .def_readonly("checkpoint", &FitResult::checkpoint)
      .def_readonly("steps", &FitResult::steps)
      .def_readonly("epoch", &FitResult::epoch)
      .def_readonly("batch", &FitResult::batch)
      .def_readonly("samples", &FitResult::samples)
      .def_readonly("seconds", &FitResult::seconds)
      .def("__repr__", [](const FitResult& r) {
        return "FitResult(stopped=" + std::string(r.stopped ? "True" : "False") + ", steps=" + std::to_string(r.steps) +
               ", samples=" + std::to_string(r.samples) + ")";
      });

  py::class_<Trainer>(m, "Trainer",
                      "The training loop over a TrainingSession: epochs or steps, shuffled batches, validation, "
                      "history, exact checkpoints, stop requests, callbacks.")
      .def(py::init([](py::object session, py::object options, py::kwargs kwargs) {
             // Options: a TrainerOptions (copied), then keyword fields of TrainerOptions or of its objective.
             py::object o = py::cast(options.is_none() ? TrainerOptions{} : options.cast<TrainerOptions>());
             py::object objective = o.attr("objective");
             for (auto [k, v] : kwargs) {
               const std::string key = py::str(k);
               if (py::hasattr(o, k) && key != "objective" && key.rfind("_", 0) != 0) py::setattr(o, k, v);
               else if (py::hasattr(objective, k) && key.rfind("_", 0) != 0) py::setattr(objective, k, v);
               else if (key == "objective") py::setattr(o, k, v);
               else throw py::attribute_error("Trainer: unknown option '" + key + "' (fields of TrainerOptions and Objective)");
             }
             return new Trainer(session_of(session), o.cast<TrainerOptions>());
           }),
           py::arg("session"), py::arg("options") = py::none(), py::keep_alive<1, 2>(),
           "Trainer(session, options=None, **fields): fields of TrainerOptions or of its objective "
           "(score_output, metric, label_name, ...) as keywords.")
      .def_static("plan", &Trainer::plan, py::arg("options"), py::arg("samples"), py::arg("validation_data") = false,
                  py::arg("accumulation_steps") = 1, "Sizes of the run `options` describe for `samples` samples.")
      .def(
          "fit",
          [](Trainer& t, py::object train, py::object validation, py::object on_step, py::object on_epoch_end,
             py::object on_validation, py::object on_record, py::object should_stop) {
            std::vector<py::object> hold;
            const Dataset tr = dataset_from(train, "train", hold);
            const Dataset va = validation.is_none() ? Dataset() : dataset_from(validation, "validation", hold);
            Interrupt interrupt;
            TrainerCallbacks cb;
            cb.on_step = with_gil<StepInfo>(on_step, interrupt);
            cb.on_epoch_end = with_gil<EpochInfo>(on_epoch_end, interrupt);
            cb.on_validation = with_gil<ValidationInfo>(on_validation, interrupt);
            cb.on_record = with_gil<TrainRecord>(on_record, interrupt);
            cb.should_stop = [&] {
              py::gil_scoped_acquire gil;
              if (!interrupt.error && PyErr_CheckSignals() != 0) interrupt.error.emplace();
              return interrupt.error || (!should_stop.is_none() && py::bool_(should_stop()));
            };
            FitResult r;
            {
              py::gil_scoped_release nogil;
              r = t.fit(tr, va, cb);
            }
            if (interrupt.error) throw *interrupt.error;
            return r;
          },
          py::arg("train"), py::arg("validation") = py::none(), py::kw_only(), py::arg("on_step") = py::none(),
          py::arg("on_epoch_end") = py::none(), py::arg("on_validation") = py::none(), py::arg("on_record") = py::none(),
          py::arg("should_stop") = py::none(),
          "Trains on a dict of numpy arrays (first axis: samples) until the run's steps are done or a stop "
          "request (request_stop, should_stop() returning True, Ctrl-C) ends it; returns a FitResult.")
      .def("request_stop", &Trainer::request_stop, "Stop a running fit after its current batch.")
      .def(
          "evaluate",
          [](Trainer& t, py::object data) {
            std::vector<py::object> hold;
            const Dataset d = dataset_from(data, "data", hold);
            py::gil_scoped_release nogil;
            return t.evaluate(d);
          },
          py::arg("data"), "Loss and metric of a dict of numpy arrays (forward passes only).")
      .def("save_checkpoint", &Trainer::save_checkpoint, py::arg("path"), py::call_guard<py::gil_scoped_release>(),
           "Session state plus the run's state (exact resume).")
      .def("load_checkpoint", &Trainer::load_checkpoint, py::arg("path"), py::call_guard<py::gil_scoped_release>(),
           "Restores a Trainer checkpoint; the next fit continues that run. Returns its checkpoint_metadata.")
      .def_property_readonly("history", &Trainer::history, "The run's TrainRecords.")
      .def_property_readonly("step", &Trainer::step, "Optimizer steps of the run done.")
      .def_property_readonly("epoch", &Trainer::epoch, "0-based epoch in progress.")
      .def_property_readonly("batch", &Trainer::batch, "Batches of it done.")
      .def_property_readonly("options", [](const Trainer& t) { return t.options(); }, "A copy of the options.");
}

}  // namespace

void bind_training(py::module_& m) {
  bind_parameters(m);
  // onnxtrain.distributed (python/onnxtrain/distributed.py wraps these).
  namespace dist = onnxtrain::distributed;
  m.def("_distributed_launch_info", [] {
    const dist::LaunchInfo li = dist::launch_info();
    py::dict d;
    d["rank"] = li.rank;
    d["size"] = li.size;
    d["local_rank"] = li.local_rank;
    d["local_size"] = li.local_size;
    d["launched"] = li.launched;
    return d;
  });
  m.def("_distributed_mpi_available", &dist::mpi_available);
  m.def("_distributed_world_rank", &dist::world_rank);
  m.def("_distributed_world_size", &dist::world_size);
  m.def("_distributed_barrier", &dist::barrier, py::call_guard<py::gil_scoped_release>());
  m.def("_distributed_comm_stats", [] {
    const dist::CommStats s = dist::comm_stats();
    py::dict d;
    d["collectives"] = s.collectives;
    d["bytes"] = s.bytes;
    d["comm_seconds"] = s.comm_seconds;
    d["wait_seconds"] = s.wait_seconds;
    return d;
  });
  m.def("_distributed_reset_comm_stats", &dist::reset_comm_stats);
  py::class_<LossScaleState>(m, "LossScaleState",
                             "onnxruntime's dynamic loss-scaling rule and its state (step_driver.h): the one "
                             "implementation behind the session's scaler and the Python trainers' loss scalers.")
      .def(py::init<>())
      .def_readwrite("scale", &LossScaleState::scale)
      .def_readwrite("initial_scale", &LossScaleState::initial_scale)
      .def_readwrite("up_scale_window", &LossScaleState::up_scale_window)
      .def_readwrite("min_scale", &LossScaleState::min_scale)
      .def_readwrite("max_scale", &LossScaleState::max_scale)
      .def_readwrite("dynamic", &LossScaleState::dynamic)
      .def_readwrite("stable_steps", &LossScaleState::stable_steps)
      .def_readwrite("skipped", &LossScaleState::skipped)
      .def("update", &LossScaleState::update, py::arg("all_finite"),
           "After an update step: halve on a non-finite gradient, double after up_scale_window finite ones.")
      .def("reset", &LossScaleState::reset, "Back to initial_scale, no stable steps counted.")
      .def("validate", &LossScaleState::validate, "Raises naming the first field out of range.");
  py::class_<TrainingSession>(m, "TrainingSession")
      .def(py::init([](py::object path_or_bytes, const TrainingParameters& p, const SessionOptions* opts,
                       const std::vector<std::string>& providers) {
             SessionOptions o = opts ? *opts : SessionOptions{};
             // The providers the Python layer kept (available ones, in preference order).
             o.providers.clear();
             for (const auto& name : providers)
               if (name != "CPUExecutionProvider") o.providers.push_back(name);
             if (!o.providers.empty()) o.providers.push_back("CPUExecutionProvider");
             if (py::isinstance<py::bytes>(path_or_bytes)) {
               std::string b = path_or_bytes.cast<std::string>();
               py::gil_scoped_release nogil;
               return new TrainingSession(b.data(), b.size(), p, o);
             }
             std::string path = py::str(path_or_bytes);
             py::gil_scoped_release nogil;
             return new TrainingSession(path, p, o);
           }),
           py::arg("path_or_bytes"), py::arg("parameters"), py::arg("sess_options") = nullptr,
           py::arg("providers") = std::vector<std::string>{})
      .def("run",
           [](TrainingSession& s, py::object output_names, py::dict feed) {
             return run_without_gil(output_names, feed, [&](const auto& n, const auto& f) { return s.run(n, f); });
           })
      .def("eval",
           [](TrainingSession& s, py::object output_names, py::dict feed) {
             return run_without_gil(output_names, feed, [&](const auto& n, const auto& f) { return s.eval(n, f); });
           })
      .def(
          "run_with_iobinding",
          [](TrainingSession& s, py::object binding, std::shared_ptr<RunOptions> ro) {
            run_training_iobinding(s, binding, ro.get());
          },
          py::arg("iobinding"), py::arg("run_options") = nullptr,
          "One training step with the inputs bound to a SessionIOBinding made for this session; the "
          "outputs go to the bound buffers or to new values (the binding's get_outputs).")
      .def("get_inputs", &TrainingSession::get_inputs)
      .def("get_outputs", &TrainingSession::get_outputs)
      .def("trained_weights", &TrainingSession::trained_weights)
      .def_property_readonly("loss_scale_input_name", &TrainingSession::loss_scale_input_name,
                             "fp16: name of the float32 [1] loss-scale input ('' otherwise).")
      .def_property_readonly("all_finite_output_name", &TrainingSession::all_finite_output_name,
                             "fp16: name of the bool [1] 'all gradients finite' output of update steps.")
      .def_property_readonly("loss_scale", &TrainingSession::loss_scale,
                             "fp16: the loss scale the session feeds when run() is given none (0 otherwise).")
      .def_property_readonly("skipped_updates", &TrainingSession::skipped_updates,
                             "fp16: updates skipped for a non-finite gradient.")
      .def_property_readonly("loss_scaler", &TrainingSession::loss_scaler, py::return_value_policy::reference_internal,
                             "fp16: the session's loss scaler itself (a LossScaleState shared, not copied).")
      .def("get_state", [](const TrainingSession& s) { return tensors_to_dict(s.get_state()); })
      .def("get_model_state", [](const TrainingSession& s) { return tensors_to_dict(s.get_model_state()); })
      .def("get_optimizer_state", [](const TrainingSession& s) { return tensors_to_dict(s.get_optimizer_state()); })
      .def("optimizer_state_names", &TrainingSession::optimizer_state_names,
           "get_optimizer_state()'s keys (state tensors, then 'step') without copying the state")
      .def("load_state", [](TrainingSession& s, py::dict d, bool strict) { s.load_state(dict_to_tensors(d), strict); },
           py::arg("state"), py::arg("strict") = false)
      .def("load_optimizer_state",
           [](TrainingSession& s, py::dict d, bool strict) { s.load_optimizer_state(dict_to_tensors(d), strict); },
           py::arg("state"), py::arg("strict") = false)
      .def("step", &TrainingSession::step)
      .def("run_count", &TrainingSession::run_count, "Training runs since the session started or was restored.")
      .def(
          "last_run_stats",
          [](const TrainingSession& s) {
            const RunStats r = s.last_run_stats();
            py::dict d;
            d["arena_bytes"] = r.arena_bytes;
            d["naive_bytes"] = r.naive_bytes;
            d["peak_live_bytes"] = r.peak_live_bytes;
            d["steps"] = r.steps;
            return d;
          },
          "Figures of the last training run's plan: arena_bytes (activations and temporaries of a step), peak_live_bytes, "
          "naive_bytes, steps.")
      .def_property_readonly("update_due", &TrainingSession::update_due,
                             "Whether the next run() completes an optimizer update.")
      .def("set_progress", &TrainingSession::set_progress, py::arg("runs"), py::arg("step"),
           "Sets run_count() and step() (a trainer's state dict); tensors and the accumulation position stay.")
      .def("set_local_batch_share", &TrainingSession::set_local_batch_share, py::arg("share"),
           "Data parallelism: this rank's rows over the global batch's (default 1 / world_size).")
      .def("world_rank", &TrainingSession::world_rank, "Rank of the session's data-parallel job (0 without one).")
      .def("world_size", &TrainingSession::world_size, "Ranks of the session's data-parallel job (1 without one).")
      .def("parameters", [](const TrainingSession& s) { return s.parameters(); }, "A copy of the session's parameters.")
      .def("export_model",
           [](const TrainingSession& s, std::vector<std::string> outputs) { return py::bytes(s.export_model(outputs)); },
           py::arg("outputs") = std::vector<std::string>{})
      .def("export_model_to", &TrainingSession::export_model_to, py::arg("path"),
           py::arg("outputs") = std::vector<std::string>{})
      .def("save_checkpoint", &TrainingSession::save_checkpoint, py::arg("path"),
           py::arg("metadata") = std::map<std::string, std::string>{}, py::call_guard<py::gil_scoped_release>())
      .def("load_checkpoint", &TrainingSession::load_checkpoint, py::call_guard<py::gil_scoped_release>())
      .def("start_profiling", &TrainingSession::start_profiling, py::arg("trace") = false,
           "Starts (or restarts) profiling; trace=False keeps only the per-node totals of profile_summary().")
      .def(
          "profile_summary",
          [](const TrainingSession& s) {
            py::list r;
            for (const auto& p : s.profile_summary()) {
              py::dict d;
              d["node"] = p.node;
              d["op_type"] = p.op_type;
              d["phase"] = p.phase;
              d["calls"] = p.calls;
              d["seconds"] = p.seconds;
              r.append(std::move(d));
            }
            return r;
          },
          "Per-node time since profiling started: dicts with node, op_type, phase (forward, backward, "
          "optimizer, eval), calls and seconds, in the order nodes first ran.")
      .def("end_profiling", &TrainingSession::end_profiling,
           "Stops profiling; writes the Chrome-trace JSON when tracing (SessionOptions.enable_profiling) and "
           "returns its name, else ''.")
      .def_static(
          "format_profile",
          [](py::list summary, int64_t steps, size_t top_nodes) {
            std::vector<NodeProfile> v;
            for (py::handle h : summary) {
              py::dict d = py::reinterpret_borrow<py::dict>(h);
              NodeProfile p;
              p.node = py::str(d["node"]);
              p.op_type = py::str(d["op_type"]);
              p.phase = py::str(d["phase"]);
              p.calls = d["calls"].cast<int64_t>();
              p.seconds = d["seconds"].cast<double>();
              v.push_back(std::move(p));
            }
            return format_profile(v, steps, top_nodes);
          },
          py::arg("summary"), py::arg("steps"), py::arg("top_nodes") = 12,
          "The text table of a profile_summary() over `steps` training runs (onnxtrain train --profile).");

  m.def("add_loss_output",
        [](py::bytes model, const std::string& score_name, const std::string& loss_name, const std::string& label_name,
           const std::string& weight_name, const std::map<std::string, std::map<std::string, float>>& penalty,
           const std::string& output, const std::map<std::string, std::string>& kwargs) {
          return py::bytes(add_loss_output(std::string(model), score_name, loss_name, label_name, weight_name, penalty,
                                           output, kwargs));
        });
  m.def("get_train_initializer", [](py::bytes model) { return get_train_initializer(std::string(model)); });
  m.def(
      "infer_model_types", [](py::bytes model) { return py::bytes(infer_model_types(std::string(model))); },
      py::arg("model"), "The model bytes with onnxtrain's inferred types and shapes in the graph's value_info.");
  m.def("optimizer_names", &optimizer_names, "Names TrainingParameters.training_optimizer_name accepts.");
  m.def("loss_names", &loss_names, "Loss names add_loss_output accepts (aliases included).");
  m.def("lr_schedule_names", &lr_schedule_names, "Names TrainingParameters.lr_schedule accepts (besides '').");
  m.def(
      "optimizer_hyperparameters",
      [](const std::string& name) {
        py::dict d;
        for (const auto& h : optimizer_hyperparameters(name))
          d[py::str(h.name)] = h.integer ? py::object(py::int_(int64_t(h.default_value))) : py::object(py::float_(h.default_value));
        return d;
      },
      py::arg("name"), "{hyper-parameter: default} of an optimizer (optimizer_attributes / optimizer_int_attributes keys).");
  bind_trainer(m);
}

}  // namespace onnxtrain::python
