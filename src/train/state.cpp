// CheckpointState (include/onnxtrain/state.h) in onnxruntime's checkpoint format (src/train/odtc.fbs):
// a FlatBuffer "ODTC", version 2. Reading verifies the buffer (flatbuffers::Verifier: every offset
// and vector inside it) before touching a field, then every tensor: a supported element type,
// dims that give a size within the allocation limit, bytes that match it, names unique, optimizer
// states of their parameter's shape. Tensors are written sorted by name; momentums keep their
// names ("momentum0", ...). With external data every non-string tensor's bytes go to
// "<checkpoint>.data", each at an offset aligned to 4 bytes (8 for 8-byte elements).
#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <vector>

#include "core/atomic_file.h"
#include "odtc_generated.h"
#include "onnxtrain/error.h"
#include "onnxtrain/state.h"

namespace onnxtrain {

namespace {

namespace fb = onnxtrain::odtc;

constexpr int32_t kOdtcVersion = 2;
// Version 1 (onnxruntime 1.16) has the same tables without the nominal and external-data flags
// (fields FlatBuffers appends; absent, they read false): it loads as version 2 does.
constexpr int32_t kOdtcOldestVersion = 1;
// A FlatBuffer addresses at most 2 GiB - 1.
constexpr uint64_t kMaxFlatBuffer = (uint64_t(1) << 31) - 1;

std::string sidecar_of(const std::string& path) { return path + ".data"; }

size_t external_alignment(DType dt) { return dtype_size(dt) == 8 ? 8 : 4; }

// ---------------------------------------------------------------- reading
struct Reader {
  std::string where;         // "checkpoint '<path>'"
  std::string sidecar;       // "" without external data
  std::ifstream data;        // the sidecar, opened on first use
  uint64_t data_size = 0;
  // The file's bytes when they are ours (loaded from a path): tensors inside the FlatBuffer are
  // then views of them (no second copy of the state); null for a caller's buffer (copied).
  std::shared_ptr<std::string> file;

  template <class... A>
  [[noreturn]] void fail(const A&... a) const {
    throw_error<InvalidArgument>(where, ": ", a...);
  }

  void read_external(const std::string& name, int64_t offset, Tensor& t) {
    if (sidecar.empty()) fail("tensor '", name, "' has external data, but the checkpoint was given as bytes");
    if (!data.is_open()) {
      data.open(sidecar, std::ios::binary);
      if (!data) throw_error<IOError>("cannot open the external data of ", where, ": '", sidecar, "'");
      data.seekg(0, std::ios::end);
      data_size = uint64_t(data.tellg());
    }
    const uint64_t n = t.nbytes();
    if (offset < 0 || uint64_t(offset) > data_size || n > data_size - uint64_t(offset))
      fail("tensor '", name, "' lies at bytes [", offset, ", ", offset + int64_t(n), ") of '", sidecar, "', which has ",
           data_size);
    data.seekg(std::streamoff(offset));
    data.read(static_cast<char*>(t.raw_data()), std::streamsize(n));
    if (!data) throw_error<IOError>("cannot read the external data of ", where, " ('", sidecar, "')");
  }

  // A tensor's name, element type and value (no value in a nominal state).
  std::pair<std::string, Parameter> tensor(const fb::Tensor* ft, bool nominal, bool external) {
    if (!ft || !ft->name() || ft->name()->size() == 0) fail("a tensor has no name");
    std::string name = ft->name()->str();
    const DType dt = static_cast<DType>(ft->data_type());
    if (ft->data_type() <= 0 || !dtype_supported(dt))
      fail("tensor '", name, "' has element type ", ft->data_type(), ", which onnxtrain does not support");
    Parameter p;
    p.dtype = dt;
    Shape shape;
    if (ft->dims()) shape.assign(ft->dims()->begin(), ft->dims()->end());
    int64_t numel;
    if (!checked_numel(shape, &numel)) fail("tensor '", name, "' has invalid dims ", shape_to_string(shape));
    if (nominal) {
      p.nominal_shape = std::move(shape);
      return {std::move(name), std::move(p)};
    }
    if (dt == DType::kString) {
      const auto* sd = ft->string_data();
      if (int64_t(sd ? sd->size() : 0) != numel)
        fail("tensor '", name, "' has ", sd ? sd->size() : 0, " strings for shape ", shape_to_string(shape));
      p.data = Tensor::empty(dt, shape);
      auto* out = p.data.data<std::string>();
      for (int64_t i = 0; i < numel; ++i) out[i] = sd->Get(flatbuffers::uoffset_t(i))->str();
      return {std::move(name), std::move(p)};
    }
    const uint64_t nbytes = uint64_t(numel) * dtype_size(dt);
    if (external && ft->external_data_offset() >= 0) {
      p.data = Tensor::empty(dt, shape);
      read_external(name, ft->external_data_offset(), p.data);
      return {std::move(name), std::move(p)};
    }
    const auto* raw = ft->raw_data();
    if ((raw ? raw->size() : 0) != nbytes)
      fail("tensor '", name, "' holds ", raw ? raw->size() : 0, " bytes, its shape ", shape_to_string(shape), " of ",
           dtype_name(dt), " needs ", nbytes);
    if (file && nbytes) {  // a view of the file's bytes when aligned for its element type
      char* view = file->data() + (raw->data() - reinterpret_cast<const uint8_t*>(file->data()));
      if (reinterpret_cast<uintptr_t>(view) % dtype_size(dt) == 0) {
        p.data = Tensor::wrap(dt, shape, view, file);
        return {std::move(name), std::move(p)};
      }
    }
    p.data = Tensor::empty(dt, shape);
    if (nbytes) std::memcpy(p.data.raw_data(), raw->data(), nbytes);
    return {std::move(name), std::move(p)};
  }

  CheckpointState read(const void* bytes, size_t size) {
    flatbuffers::Verifier v(static_cast<const uint8_t*>(bytes), size);
    if (size < 8 || !fb::CheckpointBufferHasIdentifier(bytes))
      fail("not an onnxruntime checkpoint (no \"ODTC\" identifier)");
    if (!fb::VerifyCheckpointBuffer(v)) fail("the checkpoint is corrupt (its FlatBuffer does not verify)");
    const fb::Checkpoint* c = fb::GetCheckpoint(bytes);
    if (c->version() < kOdtcOldestVersion || c->version() > kOdtcVersion)
      fail("checkpoint format version ", c->version(), " is not supported (onnxtrain reads versions ",
           kOdtcOldestVersion, " and ", kOdtcVersion, ", the formats of onnxruntime 1.16 to 1.19)");
    CheckpointState s;
    const fb::ModuleState* m = c->module_state();
    const bool external = m && m->has_external_data();
    if (m) {
      s.nominal = m->is_nominal_state();
      for (bool trainable : {true, false}) {
        const auto* list = trainable ? m->requires_grad_params() : m->frozen_params();
        if (!list) continue;
        for (const fb::Tensor* ft : *list) {
          auto [name, p] = tensor(ft, s.nominal, external);
          p.requires_grad = trainable;
          if (!s.parameters.emplace(name, std::move(p)).second) fail("parameter '", name, "' appears twice");
        }
      }
    }
    if (const auto* groups = c->optimizer_groups())
      for (const fb::OptimizerGroup* g : *groups) {
        if (!g || !g->group_name()) fail("an optimizer group has no name");
        const std::string gname = g->group_name()->str();
        if (s.optimizer_groups.count(gname)) fail("optimizer group '", gname, "' appears twice");
        OptimizerGroup& og = s.optimizer_groups[gname];
        og.step = g->step();
        og.initial_learning_rate = g->initial_learning_rate();
        if (og.step < 0) fail("optimizer group '", gname, "' has step ", og.step);
        if (!g->optimizer_states()) continue;
        for (const fb::ParameterOptimizerState* ps : *g->optimizer_states()) {
          if (!ps || !ps->param_name()) fail("an optimizer state of group '", gname, "' names no parameter");
          const std::string pname = ps->param_name()->str();
          auto it = s.parameters.find(pname);
          if (it == s.parameters.end())
            fail("optimizer group '", gname, "' holds states of '", pname, "', which is not a parameter");
          auto& states = og.states[pname];
          if (!ps->momentums()) continue;
          for (const fb::Tensor* ft : *ps->momentums()) {
            auto [sname, st] = tensor(ft, s.nominal, external);
            if (!s.nominal && (st.dtype != it->second.dtype || st.data.shape() != it->second.data.shape()))
              fail("optimizer state '", sname, "' of '", pname, "' is ", dtype_name(st.dtype),
                   shape_to_string(st.data.shape()), ", the parameter is ", dtype_name(it->second.dtype),
                   shape_to_string(it->second.data.shape()));
            if (!states.emplace(sname, std::move(st.data)).second)
              fail("optimizer state '", sname, "' of '", pname, "' appears twice");
          }
        }
      }
    if (const fb::PropertyBag* b = c->property_bag()) {
      auto add = [&](const flatbuffers::String* name, Property v) {
        if (!name) fail("a property has no name");
        if (!s.properties.emplace(name->str(), std::move(v)).second) fail("property '", name->str(), "' appears twice");
      };
      if (b->ints())
        for (const auto* p : *b->ints()) add(p ? p->name() : nullptr, p ? Property(p->value()) : Property());
      if (b->floats())
        for (const auto* p : *b->floats()) add(p ? p->name() : nullptr, p ? Property(p->value()) : Property());
      if (b->strings())
        for (const auto* p : *b->strings())
          add(p ? p->name() : nullptr, Property(p && p->value() ? p->value()->str() : std::string()));
    }
    return s;
  }
};

// ---------------------------------------------------------------- writing
// Builds the FlatBuffer; with `external`, tensor bytes are appended to `sidecar` instead.
class Writer {
 public:
  Writer(bool external, std::string* sidecar) : external_(external), sidecar_(sidecar) {}

  std::string build(const CheckpointState& s, bool include_optimizer_state) {
    std::vector<flatbuffers::Offset<fb::Tensor>> trainable, frozen;
    for (const auto& [name, p] : s.parameters) {
      if (!s.nominal && !p.data.defined())
        throw_error<InvalidArgument>("cannot save parameter '", name, "': it has no value (the state is not nominal)");
      (p.requires_grad ? trainable : frozen).push_back(tensor(name, p.dtype, p.data, p.shape(), s.nominal));
    }
    const auto t_off = b_.CreateVector(trainable);
    const auto f_off = b_.CreateVector(frozen);
    const auto module = fb::CreateModuleState(b_, t_off, f_off, s.nominal, external_);
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::OptimizerGroup>>> groups_off;
    if (include_optimizer_state) {
      std::vector<flatbuffers::Offset<fb::OptimizerGroup>> groups;
      for (const auto& [gname, g] : s.optimizer_groups) {
        std::vector<flatbuffers::Offset<fb::ParameterOptimizerState>> states;
        for (const auto& [pname, named] : g.states) {
          auto it = s.parameters.find(pname);
          if (it == s.parameters.end())
            throw_error<InvalidArgument>("cannot save optimizer group '", gname, "': '", pname, "' is not a parameter");
          std::vector<flatbuffers::Offset<fb::Tensor>> momentums;
          for (const auto& [sname, t] : named) {
            if (!s.nominal && (t.dtype() != it->second.dtype || t.shape() != it->second.data.shape()))
              throw_error<InvalidArgument>("cannot save optimizer state '", sname, "' of '", pname, "': it is ",
                                           t.describe(), ", the parameter ", it->second.data.describe());
            momentums.push_back(tensor(sname, it->second.dtype, t, it->second.shape(), s.nominal));
          }
          const auto pn = b_.CreateString(pname);
          const auto mv = b_.CreateVector(momentums);
          states.push_back(fb::CreateParameterOptimizerState(b_, pn, mv));
        }
        const auto gn = b_.CreateString(gname);
        const auto sv = b_.CreateVector(states);
        groups.push_back(fb::CreateOptimizerGroup(b_, gn, g.step, g.initial_learning_rate, sv));
      }
      groups_off = b_.CreateVector(groups);
    }
    std::vector<flatbuffers::Offset<fb::IntProperty>> ints;
    std::vector<flatbuffers::Offset<fb::FloatProperty>> floats;
    std::vector<flatbuffers::Offset<fb::StringProperty>> strings;
    for (const auto& [name, v] : s.properties) {
      const auto n = b_.CreateString(name);
      if (const auto* i = std::get_if<int64_t>(&v)) ints.push_back(fb::CreateIntProperty(b_, n, *i));
      else if (const auto* f = std::get_if<float>(&v)) floats.push_back(fb::CreateFloatProperty(b_, n, *f));
      else strings.push_back(fb::CreateStringProperty(b_, n, b_.CreateString(std::get<std::string>(v))));
    }
    const auto iv = b_.CreateVector(ints);
    const auto fv = b_.CreateVector(floats);
    const auto sv = b_.CreateVector(strings);
    const auto bag = fb::CreatePropertyBag(b_, iv, fv, sv);
    fb::FinishCheckpointBuffer(b_, fb::CreateCheckpoint(b_, kOdtcVersion, module, groups_off, bag));
    return std::string(reinterpret_cast<const char*>(b_.GetBufferPointer()), b_.GetSize());
  }

 private:
  // A nominal state's tensors have dims (the value's shape, else `shape`: its parameter's) and
  // empty raw data, as onnxruntime writes them (it refuses a tensor without dims or raw data).
  flatbuffers::Offset<fb::Tensor> tensor(const std::string& name, DType dt, const Tensor& t, const Shape& shape,
                                         bool nominal) {
    const auto n = b_.CreateString(name);
    if (nominal) {
      const auto dims = b_.CreateVector(t.defined() ? t.shape() : shape);
      return fb::CreateTensor(b_, n, 0, dims, int32_t(dt), b_.CreateVector(std::vector<uint8_t>{}));
    }
    const auto dims = b_.CreateVector(t.shape());
    if (t.dtype() == DType::kString) {
      std::vector<flatbuffers::Offset<flatbuffers::String>> strs;
      const auto* p = t.data<std::string>();
      for (int64_t i = 0; i < t.numel(); ++i) strs.push_back(b_.CreateString(p[i]));
      return fb::CreateTensor(b_, n, 0, dims, int32_t(dt), 0, b_.CreateVector(strs));
    }
    if (external_) {
      const size_t a = external_alignment(t.dtype());
      sidecar_->resize((sidecar_->size() + a - 1) / a * a, '\0');
      const int64_t offset = int64_t(sidecar_->size());
      sidecar_->append(static_cast<const char*>(t.raw_data()), t.nbytes());
      return fb::CreateTensor(b_, n, 0, dims, int32_t(dt), 0, 0, offset);
    }
    const auto raw = b_.CreateVector(static_cast<const uint8_t*>(t.raw_data()), t.nbytes());
    return fb::CreateTensor(b_, n, 0, dims, int32_t(dt), raw);
  }

  bool external_;
  std::string* sidecar_;
  flatbuffers::FlatBufferBuilder b_{1 << 20};
};

uint64_t tensor_bytes(const CheckpointState& s, bool include_optimizer_state) {
  uint64_t n = 0;
  for (const auto& [name, p] : s.parameters) n += p.data.defined() ? p.data.nbytes() : 0;
  if (include_optimizer_state)
    for (const auto& [gname, g] : s.optimizer_groups)
      for (const auto& [pname, named] : g.states)
        for (const auto& [sname, t] : named) n += t.defined() ? t.nbytes() : 0;
  return n;
}

}  // namespace

CheckpointState CheckpointState::load(const std::string& path) {
  std::string bytes = core::read_regular_file(path, "checkpoint", [&](uint64_t size) {
    if (size > kMaxFlatBuffer)
      throw_error<InvalidArgument>("checkpoint '", path, "' is ", size, " bytes: an onnxruntime checkpoint is one "
                                   "FlatBuffer, under 2 GiB (larger states keep their tensors in '<path>.data')");
  });
  Reader r{"checkpoint '" + path + "'", sidecar_of(path), {}, 0, std::make_shared<std::string>(std::move(bytes))};
  return r.read(r.file->data(), r.file->size());
}

CheckpointState CheckpointState::load_from_buffer(const void* data, size_t size) {
  if (!data && size) throw_error<InvalidArgument>("checkpoint buffer is null");
  Reader r{"checkpoint buffer", "", {}, 0, nullptr};
  return r.read(data, size);
}

void CheckpointState::save(const std::string& path, const CheckpointSaveOptions& options) const {
  const bool external = !nominal && tensor_bytes(*this, options.include_optimizer_state) >= options.external_data_threshold;
  std::string sidecar;
  const std::string bytes = Writer(external, &sidecar).build(*this, options.include_optimizer_state);
  if (bytes.size() > kMaxFlatBuffer)
    throw_error<InvalidArgument>("cannot save checkpoint '", path, "': ", bytes.size(), " bytes do not fit a FlatBuffer");
  if (external) core::write_file_atomic(sidecar_of(path), sidecar, "checkpoint data");
  core::write_file_atomic(path, bytes, "checkpoint");
}

std::string CheckpointState::save_to_buffer(bool include_optimizer_state) const {
  if (tensor_bytes(*this, include_optimizer_state) >= kMaxFlatBuffer)
    throw_error<InvalidArgument>("the state's tensors do not fit one FlatBuffer: save it to a file (external data)");
  std::string unused;
  return Writer(false, &unused).build(*this, include_optimizer_state);
}

Parameter& CheckpointState::parameter(const std::string& name) {
  auto it = parameters.find(name);
  if (it == parameters.end()) throw_error<InvalidArgument>("the checkpoint state has no parameter '", name, "'");
  return it->second;
}

const Parameter& CheckpointState::parameter(const std::string& name) const {
  return const_cast<CheckpointState*>(this)->parameter(name);
}

}  // namespace onnxtrain
