#include "kernels/kernel.h"

#include <map>
#include <mutex>

#include <onnx/defs/schema.h>

#include "ir/opset_lower.h"
#include "kernels/registry.h"
#include "ops/onnxtrain_ops.h"
#ifdef ONNXTRAIN_WITH_CUDA
#include "kernels/cuda/cuda_provider.h"
#endif

namespace onnxtrain {

const ir::Attribute* KernelInfo::typed(const std::string& name, ir::AttrType t) const {
  const ir::Attribute* a = node_.attr(name);
  if (!a) return nullptr;
  if (a->type != t)
    fail("attribute '", name, "' has type ", ir::attr_type_name(a->type), ", expected ", ir::attr_type_name(t));
  return a;
}

int64_t KernelInfo::attr_int(const std::string& name, int64_t dflt) const {
  const auto* a = typed(name, ir::AttrType::kInt);
  return a ? a->i : dflt;
}
int64_t KernelInfo::attr_int(const std::string& name) const {
  const auto* a = typed(name, ir::AttrType::kInt);
  if (!a) fail("required attribute '", name, "' is missing");
  return a->i;
}
float KernelInfo::attr_float(const std::string& name, float dflt) const {
  const auto* a = typed(name, ir::AttrType::kFloat);
  return a ? a->f : dflt;
}
float KernelInfo::attr_float(const std::string& name) const {
  const auto* a = typed(name, ir::AttrType::kFloat);
  if (!a) fail("required attribute '", name, "' is missing");
  return a->f;
}
std::string KernelInfo::attr_string(const std::string& name, const std::string& dflt) const {
  const auto* a = typed(name, ir::AttrType::kString);
  return a ? a->s : dflt;
}
std::string KernelInfo::attr_string(const std::string& name) const {
  const auto* a = typed(name, ir::AttrType::kString);
  if (!a) fail("required attribute '", name, "' is missing");
  return a->s;
}
std::vector<int64_t> KernelInfo::attr_ints(const std::string& name, const std::vector<int64_t>& dflt) const {
  const ir::Attribute* a = node_.attr(name);
  if (!a) return dflt;
  if (a->type == ir::AttrType::kInts) return a->ints;
  fail("attribute '", name, "' has type ", ir::attr_type_name(a->type), ", expected ints");
}
std::vector<int64_t> KernelInfo::attr_ints(const std::string& name) const {
  const auto* a = typed(name, ir::AttrType::kInts);
  if (!a) fail("required attribute '", name, "' is missing");
  return a->ints;
}
std::vector<float> KernelInfo::attr_floats(const std::string& name, const std::vector<float>& dflt) const {
  const auto* a = typed(name, ir::AttrType::kFloats);
  return a ? a->floats : dflt;
}
std::vector<std::string> KernelInfo::attr_strings(const std::string& name,
                                                  const std::vector<std::string>& dflt) const {
  const auto* a = typed(name, ir::AttrType::kStrings);
  return a ? a->strings : dflt;
}
const Tensor* KernelInfo::attr_tensor(const std::string& name) const {
  const auto* a = typed(name, ir::AttrType::kTensor);
  return a ? &a->t : nullptr;
}
std::shared_ptr<const ir::Graph> KernelInfo::attr_graph(const std::string& name) const {
  const auto* a = typed(name, ir::AttrType::kGraph);
  return a ? a->g : nullptr;
}

PrepareContext::PrepareContext(const ir::Node& node, int64_t opset, const ExecOptions& options,
                               std::vector<In> inputs, size_t num_outputs, std::vector<In> implicit)
    : node_(node), opset_(opset), options_(options), inputs_(std::move(inputs)), implicit_(std::move(implicit)) {
  outputs_.resize(num_outputs);
  for (size_t i = 0; i < num_outputs; ++i) outputs_[i].requested = i < node.outputs.size() && !node.outputs[i].empty();
}

DType PrepareContext::input_dtype(size_t i) const {
  if (!has_input(i)) fail("input ", i, " is missing");
  return inputs_[i].dtype;
}

namespace {

// A sequence has neither a shape nor a tensor value: a kernel that read one as a tensor found no
// data at run time, or waited for its value (null: "not known yet") forever. Kernels that take
// sequences (Identity, control flow) look at input_kind first.
void require_tensor(const PrepareContext& ctx, size_t i) {
  if (ctx.input_kind(i) != Value::Kind::kTensor) ctx.fail("input ", i, " is a sequence, expected a tensor");
}

}  // namespace

const Shape& PrepareContext::input_shape(size_t i) const {
  if (!has_input(i)) fail("input ", i, " is missing");
  require_tensor(*this, i);
  return inputs_[i].shape;
}

const Tensor* PrepareContext::input_value(size_t i) const {
  if (!has_input(i)) return nullptr;
  require_tensor(*this, i);
  return inputs_[i].value ? &inputs_[i].value->tensor : nullptr;
}

void PrepareContext::set_output(size_t i, DType dtype, Shape shape) {
  if (i >= outputs_.size()) fail("internal: output index ", i, " out of range");
  int64_t n;
  if (!checked_numel(shape, &n))
    fail("output ", i, " would have invalid shape ", shape_to_string(shape));
  auto& o = outputs_[i];
  o.kind = Value::Kind::kTensor;
  o.dtype = dtype;
  o.shape = std::move(shape);
  o.set = true;
  o.dynamic = false;
  o.alias_of = -1;
  o.inplace_of = -1;
}

void PrepareContext::set_output_dynamic(size_t i, DType dtype) {
  if (i >= outputs_.size()) fail("internal: output index ", i, " out of range");
  auto& o = outputs_[i];
  o.kind = Value::Kind::kTensor;
  o.dtype = dtype;
  o.shape.clear();
  o.set = true;
  o.dynamic = true;
  o.alias_of = -1;
  o.inplace_of = -1;
}

void PrepareContext::set_output_alias(size_t i, size_t input, Shape shape) {
  set_output(i, input_dtype(input), std::move(shape));
  if (shape_numel(outputs_[i].shape) == shape_numel(input_shape(input)) &&
      inputs_[input].kind == Value::Kind::kTensor)
    outputs_[i].alias_of = int(input);
}

void PrepareContext::set_output_inplace(size_t i, size_t input) {
  if (!has_input(input) || inputs_[input].kind != Value::Kind::kTensor)
    fail("internal: output ", i, " overwrites input ", input, ", which is not a tensor");
  set_output(i, input_dtype(input), input_shape(input));
  outputs_[i].inplace_of = int(input);
}

void PrepareContext::set_output_maps(size_t i, DType key, DType value, bool sequence) {
  set_output_sequence(i, value);
  outputs_[i].kind = sequence ? Value::Kind::kMapSequence : Value::Kind::kMap;
  outputs_[i].key = key;
}

void PrepareContext::set_output_sequence(size_t i, DType elem) {
  if (i >= outputs_.size()) fail("internal: output index ", i, " out of range");
  auto& o = outputs_[i];
  o.kind = Value::Kind::kSequence;
  o.dtype = elem;
  o.shape.clear();
  o.set = true;
  o.dynamic = true;
  o.alias_of = -1;
  o.inplace_of = -1;
}

Tensor& RunContext::allocate_output(size_t i, DType dtype, Shape shape) {
  Value& v = *out_[i];
  v.kind = Value::Kind::kTensor;
  try {
    v.tensor = Tensor::empty(dtype, std::move(shape));
  } catch (const Error& e) {
    fail("output ", i, ": ", e.what());
  }
  return v.tensor;
}

void KernelRegistry::add(const std::string& domain, const std::string& op, int64_t since, int64_t until,
                         KernelFactory f, std::vector<size_t> host_inputs) {
  add(Entry{domain, op, since, until, std::move(f), std::move(host_inputs)});
}

void KernelRegistry::alias(const std::string& domain, const std::string& from_domain, const std::string& op) {
  auto it = entries_.find({from_domain, op});
  if (it == entries_.end())
    throw_error<InvalidArgument>("internal: no kernel ", op, " of domain ", from_domain, " to register under ", domain);
  const std::vector<Entry> from = it->second;  // add() may grow the map
  for (Entry e : from) {
    e.domain = domain;
    add(std::move(e));
  }
}

void KernelRegistry::add(Entry e) {
  // A com.onnxtrain kernel implements a row of the operator table (a com.microsoft one, a row of
  // its second table), which says which inputs it reads in host memory.
  if (e.domain == ops::kDomain || e.domain == ops::kMicrosoftDomain) {
    const ops::OpDef* d = ops::find_op(e.domain, e.op);
    if (!d)
      throw_error<InvalidArgument>("internal: kernel ", e.op, " of domain ", e.domain,
                                   " has no row in the operator table (src/ops/onnxtrain_ops.cpp)");
    if (!e.host_inputs.empty() && e.host_inputs != d->host_inputs)
      throw_error<InvalidArgument>("internal: kernel ", e.op, " registers host inputs other than its table row's");
    e.host_inputs = d->host_inputs;
  }
  auto key = std::make_pair(e.domain, e.op);
  entries_[key].push_back(std::move(e));
}

const KernelRegistry::Entry* KernelRegistry::find(const std::string& domain, const std::string& op,
                                                  int64_t opset) const {
  auto it = entries_.find({domain, op});
  if (it == entries_.end()) return nullptr;
  for (const auto& e : it->second)
    if (opset >= e.since && opset <= e.until) return &e;
  return nullptr;
}

bool KernelRegistry::knows(const std::string& domain, const std::string& op) const {
  return entries_.count({domain, op}) > 0;
}

std::vector<std::pair<std::string, std::string>> KernelRegistry::ops() const {
  std::vector<std::pair<std::string, std::string>> r;
  for (const auto& [k, v] : entries_) r.push_back(k);
  return r;
}

const KernelRegistry& KernelRegistry::global() { return cpu_provider().registry(); }

namespace {

// A standard operator's input and output counts against its ONNX schema, so that kernels may index
// the inputs the schema requires and write the outputs it requires: a malformed node is an error
// naming it, never a crash.
void check_arity(const ir::Node& node, int64_t opset) {
  const int nin = int(node.inputs.size()), nout = int(node.outputs.size());
  if (node.domain == ops::kDomain || node.domain == ops::kMicrosoftDomain) {  // counts from the operator tables
    const ops::OpDef* d = ops::find_op(node.domain, node.op_type);
    if (!d) return;
    auto within = [](int n, int lo, int hi) { return n >= lo && (hi < 0 || n <= hi); };  // hi -1: any number
    if (!within(nin, d->min_inputs, d->max_inputs))
      throw_error<InvalidGraph>(node.describe(), ": ", nin, " inputs, ", node.op_type, " takes ",
                                ops::count_range(d->min_inputs, d->max_inputs));
    if (!within(nout, d->min_outputs, d->max_outputs))
      throw_error<InvalidGraph>(node.describe(), ": ", nout, " outputs, ", node.op_type, " has ",
                                ops::count_range(d->min_outputs, d->max_outputs));
    return;
  }
  if (!node.domain.empty() && node.domain != "ai.onnx.preview.training" && node.domain != "ai.onnx.ml") return;
  // ai.onnx 18's forms kept in a graph lowered to 17 (ReduceMax with its axes input, ...): the
  // opset-17 schema is not theirs; the lowering checked their arity (ir/opset_lower.h).
  if (node.domain.empty() && !ir::opset18_form(node).empty()) return;
  // Opsets newer than the ONNX library's own (onnxtrain's kernels may know them) are not checked:
  // the library would answer with an older schema.
  const auto& ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  const auto range = ranges.find(node.domain);
  if (range == ranges.end() || opset > range->second.second) return;
  const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(node.op_type, int(opset), node.domain);
  if (!schema) return;
  if (nin < schema->min_input() || nin > schema->max_input())
    throw_error<InvalidGraph>(node.describe(), ": ", nin, " inputs, the ", node.op_type, " schema allows ",
                              schema->min_input(), " to ", schema->max_input());
  if (nout < schema->min_output() || nout > schema->max_output())
    throw_error<InvalidGraph>(node.describe(), ": ", nout, " outputs, the ", node.op_type, " schema allows ",
                              schema->min_output(), " to ", schema->max_output());
  const auto& formal = schema->inputs();
  for (size_t i = 0; i < formal.size() && i < node.inputs.size(); ++i)
    if (formal[i].GetOption() == onnx::OpSchema::Single && node.inputs[i].empty())
      throw_error<InvalidGraph>(node.describe(), ": required input ", i, " ('", formal[i].GetName(), "') is missing");
  const auto& formal_out = schema->outputs();
  for (size_t i = 0; i < formal_out.size() && i < node.outputs.size(); ++i)
    if (formal_out[i].GetOption() == onnx::OpSchema::Single && node.outputs[i].empty())
      throw_error<InvalidGraph>(node.describe(), ": required output ", i, " ('", formal_out[i].GetName(), "') is unnamed");
}

}  // namespace

std::unique_ptr<Kernel> create_kernel(const ir::Node& node, const OpsetMap& opsets, const ExecOptions& options,
                                      const KernelRegistry& reg) {
  auto it = opsets.find(node.domain);
  const int64_t opset = it == opsets.end() ? 0 : it->second;
  const auto* e = reg.find(node.domain, node.op_type, opset);
  if (!e) {
    const std::string dom = node.domain.empty() ? "ai.onnx" : node.domain;
    if (dom == "com.microsoft" && node.op_type == "YieldOp")
      throw_error<InvalidArgument>(node.describe(), ": YieldOp marks the cut between the forward and the backward "
                                   "part of a training graph (OrtModuleGraphBuilder): run it through TrainingAgent "
                                   "(run_forward, then run_backward), or ask only for values of the forward part");
    if (reg.knows(node.domain, node.op_type))
      throw_error<NotImplemented>(node.describe(), ": operator ", node.op_type, " at opset ", opset, " of domain '",
                                  dom, "' is not supported (other opset versions are)");
    throw_error<NotImplemented>(node.describe(), ": operator ", node.op_type, " (domain '", dom, "', opset ", opset,
                                ") is not supported by onnxtrain");
  }
  check_arity(node, opset);
  KernelInfo info(node, opset, opsets, options);
  return e->make(info);
}

ExecutionProvider* find_execution_provider(const std::string& name, std::string* why) {
  if (name == "CPUExecutionProvider") return &cpu_provider();
  if (name == "CUDAExecutionProvider") {
#ifdef ONNXTRAIN_WITH_CUDA
    std::string reason;
    if (kernels::cuda::device_available(&reason)) return &kernels::cuda::provider();
    if (why) *why = "CUDAExecutionProvider is not available: " + reason;
#else
    if (why) *why = "CUDAExecutionProvider is not available: this build of onnxtrain has no CUDA provider (configure with -DONNXTRAIN_CUDA=ON)";
#endif
    return nullptr;
  }
  if (why) *why = "unknown execution provider '" + name + "' (known: CUDAExecutionProvider, CPUExecutionProvider)";
  return nullptr;
}

namespace {
std::mutex& registered_mu() {
  static std::mutex mu;
  return mu;
}
std::map<Device, ExecutionProvider*>& registered_providers() {
  static std::map<Device, ExecutionProvider*> m;
  return m;
}
}  // namespace

void register_device_provider(ExecutionProvider& p) {
  std::lock_guard<std::mutex> lock(registered_mu());
  registered_providers()[p.device()] = &p;
}

ExecutionProvider* provider_of_device(const Device& device, std::string* why) {
  if (device.is_host()) return &cpu_provider();
  {
    std::lock_guard<std::mutex> lock(registered_mu());
    auto it = registered_providers().find(device);
    if (it != registered_providers().end()) return it->second;
  }
  if (device.type == Device::Type::kCUDA) {
    if (device.index != 0) {
      if (why) *why = "device '" + device.name() + "' is not available: the CUDA provider serves cuda:0 only";
      return nullptr;
    }
    std::string reason;
    ExecutionProvider* p = find_execution_provider("CUDAExecutionProvider", &reason);
    if (!p && why) *why = "device '" + device.name() + "' is not available (" + reason + ")";
    return p;
  }
  if (why) *why = "device '" + device.name() + "' is not served by any execution provider of this build";
  return nullptr;
}

std::vector<std::string> available_execution_providers() {
  std::vector<std::string> r;
#ifdef ONNXTRAIN_WITH_CUDA
  if (kernels::cuda::device_available()) r.push_back("CUDAExecutionProvider");
#endif
  r.push_back("CPUExecutionProvider");
  return r;
}

}  // namespace onnxtrain
