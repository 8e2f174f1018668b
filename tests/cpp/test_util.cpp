#include "test_util.h"

#include <dirent.h>

#include "test_provider.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/parallel.h"
#include "ir/onnx_io.h"
#include "kernels/kernel.h"
#include "runtime/executor.h"

namespace ot_test {

std::set<std::string> list_dir(const std::string& dir) {
  std::set<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) names.insert(e->d_name);
    closedir(d);
  }
  return names;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_text(const std::string& path, const std::string& s) { std::ofstream(path, std::ios::binary) << s; }

using namespace onnxtrain;

ir::Attribute attr_int(const std::string& name, int64_t v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kInt;
  a.i = v;
  return a;
}
ir::Attribute attr_float(const std::string& name, float v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kFloat;
  a.f = v;
  return a;
}
ir::Attribute attr_string(const std::string& name, const std::string& v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kString;
  a.s = v;
  return a;
}
ir::Attribute attr_ints(const std::string& name, const std::vector<int64_t>& v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kInts;
  a.ints = v;
  return a;
}
ir::Attribute attr_floats(const std::string& name, const std::vector<float>& v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kFloats;
  a.floats = v;
  return a;
}
ir::Attribute attr_tensor(const std::string& name, const Tensor& v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kTensor;
  a.t = v;
  return a;
}
ir::Attribute attr_graph(const std::string& name, std::shared_ptr<ir::Graph> g) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kGraph;
  a.g = std::move(g);
  return a;
}

std::vector<Tensor> run_node(const std::string& op, const std::vector<Tensor>& inputs,
                             const std::vector<ir::Attribute>& attrs, const RunOptions& opts) {
  auto g = std::make_shared<ir::Graph>();
  g->name = "test_" + op;
  ir::Node n;
  n.op_type = op;
  n.domain = opts.domain;
  n.name = "node_" + op;
  n.attrs = attrs;
  std::vector<Value> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      n.inputs.push_back("");
      continue;
    }
    const std::string name = numbered("x", i);
    n.inputs.push_back(name);
    if (opts.inputs_as_constants) {
      g->initializers.emplace_back(name, inputs[i]);
    } else {
      g->inputs.push_back(ir::ValueInfo{name, ir::TypeInfo::tensor(inputs[i].dtype(), inputs[i].shape()), ""});
      feeds.push_back(Value::of(inputs[i]));
    }
  }
  for (size_t i = 0; i < opts.num_outputs; ++i) {
    const std::string name = numbered("y", i);
    n.outputs.push_back(name);
    g->outputs.push_back(ir::ValueInfo{name, {}, ""});
  }
  g->nodes.push_back(n);
  OpsetMap opsets{{"", opts.opset}};
  if (!opts.domain.empty()) opsets[opts.domain] = opts.domain_opset;
  ExecOptions eo;
  eo.num_threads = opts.threads;
  runtime::GraphExecutor ex(g, opsets, eo);
  std::vector<const Value*> ptrs;
  for (auto& v : feeds) ptrs.push_back(&v);
  auto outs = ex.run(ptrs);
  // Every provider agrees with the CPU provider (the test provider: assignment, fallback, copies).
  const std::string differ = check_providers_agree(g, opsets, eo, ptrs, outs);
  EXPECT_EQ(differ, "") << op;
  // Run twice: the second run exercises the cached plan.
  auto outs2 = ex.run(ptrs);
  std::vector<Tensor> r;
  for (size_t i = 0; i < outs2.size(); ++i) {
    EXPECT_EQ(outs[i].tensor.describe(), outs2[i].tensor.describe()) << op << ": second run differs in shape";
    r.push_back(outs2[i].tensor);
  }
  return r;
}

ir::Node make_node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                   std::vector<ir::Attribute> attrs, const std::string& domain) {
  ir::Node n;
  n.op_type = op;
  n.domain = domain;
  n.name = op + "_" + (outputs.empty() ? std::string() : outputs[0]);
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.attrs = std::move(attrs);
  return n;
}

ir::ValueInfo value_info(const std::string& name, DType dt, const Shape& shape) {
  return ir::ValueInfo{name, shape.empty() ? ir::TypeInfo::tensor(dt) : ir::TypeInfo::tensor(dt, shape), ""};
}

KernelRun run_kernel(const std::string& op, const std::vector<Tensor>& inputs, const std::vector<ir::Attribute>& attrs,
                     const RunOptions& opts, InPlace mode, const std::vector<size_t>& unnamed) {
  ir::Node n;
  n.op_type = op;
  n.domain = opts.domain;
  n.name = "node_" + op;
  n.attrs = attrs;
  for (size_t i = 0; i < inputs.size(); ++i) n.inputs.push_back(inputs[i].defined() ? numbered("x", i) : "");
  for (size_t k = 0; k < opts.num_outputs; ++k) {
    const bool named = std::find(unnamed.begin(), unnamed.end(), k) == unnamed.end();
    n.outputs.push_back(named ? numbered("y", k) : "");
  }
  const int64_t opset = opts.domain.empty() ? opts.opset : opts.domain_opset;
  OpsetMap opsets{{"", opts.opset}};
  if (!opts.domain.empty()) opsets[opts.domain] = opset;
  ExecOptions eo;
  eo.num_threads = opts.threads;
  auto kernel = create_kernel(n, opsets, eo);
  std::vector<PrepareContext::In> ins(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined())
      ins[i] = {.kind = Value::Kind::kTensor, .dtype = inputs[i].dtype(), .shape = inputs[i].shape(), .value = nullptr};
  PrepareContext ctx(n, opset, eo, ins, opts.num_outputs);
  kernel->prepare(ctx);

  std::vector<Value> in_vals(inputs.size()), out_vals(opts.num_outputs);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined()) in_vals[i] = Value::of(inputs[i]);
  KernelRun r;
  std::vector<Value*> out_p(opts.num_outputs, nullptr);
  std::vector<bool> overwritten(inputs.size(), false);
  for (size_t k = 0; k < opts.num_outputs; ++k) {
    const auto& o = ctx.outputs()[k];
    r.inplace_of.push_back(o.inplace_of);
    if (!o.requested) continue;
    EXPECT_TRUE(o.set && !o.dynamic) << op << ": output " << k << " not prepared with a static shape";
    if (o.inplace_of >= 0) {
      const size_t j = size_t(o.inplace_of);
      EXPECT_FALSE(overwritten[j]) << op << ": two outputs overwrite input " << j;
      overwritten[j] = true;
      EXPECT_EQ(o.dtype, inputs[j].dtype()) << op << ": output " << k;
      EXPECT_EQ(o.shape, inputs[j].shape()) << op << ": output " << k;
      if (mode == InPlace::kAliased) {
        in_vals[j] = Value::of(inputs[j].clone());
        out_p[k] = &in_vals[j];
        continue;
      }
    }
    Tensor t = Tensor::empty(o.dtype, o.shape);
    std::memset(t.raw_data(), 0xff, t.nbytes());  // NaN in every float type: unwritten elements show
    out_vals[k] = Value::of(t);
    out_p[k] = &out_vals[k];
  }
  std::vector<Value*> in_p;
  for (size_t i = 0; i < inputs.size(); ++i) in_p.push_back(inputs[i].defined() ? &in_vals[i] : nullptr);
  std::vector<char> ws(ctx.workspace() + 64, char(0xff));
  void* wsp = ws.data() + (64 - reinterpret_cast<uintptr_t>(ws.data()) % 64) % 64;
  ThreadScope scope(opts.threads);
  RunContext rc(n, in_p.data(), in_p.size(), out_p.data(), out_p.size(), nullptr, 0, wsp, ctx.workspace(), eo,
                current_threads());
  kernel->run(rc);
  for (size_t k = 0; k < opts.num_outputs; ++k) r.outputs.push_back(out_p[k] ? out_p[k]->tensor : Tensor());
  return r;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

std::vector<Value> run(runtime::GraphExecutor& ex, const std::vector<Tensor>& inputs) {
  std::vector<Value> feeds;
  for (const auto& t : inputs) feeds.push_back(Value::of(t));
  std::vector<const Value*> ptrs;
  for (auto& v : feeds) ptrs.push_back(&v);
  return ex.run(ptrs);
}

std::vector<Tensor> run_model(const ir::Model& m, const std::vector<Tensor>& inputs, int threads) {
  ExecOptions eo;
  eo.num_threads = threads;
  return run_model(m, inputs, eo);
}

std::vector<Tensor> run_model(const ir::Model& m, const std::vector<Tensor>& inputs, const ExecOptions& eo) {
  runtime::GraphExecutor ex(m.graph, m.opsets, eo);
  std::vector<Value> feeds;
  for (const auto& t : inputs) feeds.push_back(Value::of(t));
  std::vector<const Value*> ptrs;
  for (size_t i = 0; i < ex.input_names().size(); ++i) ptrs.push_back(i < feeds.size() ? &feeds[i] : nullptr);
  auto outs = ex.run(ptrs);
  EXPECT_EQ(check_providers_agree(m.graph, m.opsets, eo, ptrs, outs), "");
  std::vector<Tensor> r;
  for (auto& v : outs) r.push_back(v.tensor);
  return r;
}

Tensor from_double(DType dt, const Shape& shape, const std::vector<double>& v) {
  Tensor t = Tensor::empty(dt, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double x = v[size_t(i)];
    switch (dt) {
      case DType::kFloat32: t.data<float>()[i] = float(x); break;
      case DType::kFloat64: t.data<double>()[i] = x; break;
      case DType::kFloat16: t.data<float16>()[i] = float16(float(x)); break;
      case DType::kBFloat16: t.data<bfloat16>()[i] = bfloat16(float(x)); break;
      case DType::kInt8: t.data<int8_t>()[i] = int8_t(x); break;
      case DType::kInt16: t.data<int16_t>()[i] = int16_t(x); break;
      case DType::kInt32: t.data<int32_t>()[i] = int32_t(x); break;
      case DType::kInt64: t.data<int64_t>()[i] = int64_t(x); break;
      case DType::kUInt8: t.data<uint8_t>()[i] = uint8_t(x); break;
      case DType::kUInt16: t.data<uint16_t>()[i] = uint16_t(x); break;
      case DType::kUInt32: t.data<uint32_t>()[i] = uint32_t(x); break;
      case DType::kUInt64: t.data<uint64_t>()[i] = uint64_t(x); break;
      case DType::kBool: t.data<bool>()[i] = x != 0; break;
      default: ADD_FAILURE() << "from_double: unsupported dtype";
    }
  }
  return t;
}

Tensor random_tensor(DType dt, const Shape& shape, std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(size_t(shape_numel(shape)));
  for (auto& x : v) {
    x = u(rng);
    if (dt == DType::kBool) x = x > (lo + hi) / 2;
    else if (!dtype_is_float(dt)) x = std::round(x);
  }
  return from_double(dt, shape, v);
}

std::vector<double> to_double(const Tensor& t) {
  std::vector<double> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    double x = 0;
    switch (t.dtype()) {
      case DType::kFloat32: x = t.data<float>()[i]; break;
      case DType::kFloat64: x = t.data<double>()[i]; break;
      case DType::kFloat16: x = float(t.data<float16>()[i]); break;
      case DType::kBFloat16: x = float(t.data<bfloat16>()[i]); break;
      case DType::kInt8: x = t.data<int8_t>()[i]; break;
      case DType::kInt16: x = t.data<int16_t>()[i]; break;
      case DType::kInt32: x = t.data<int32_t>()[i]; break;
      case DType::kInt64: x = double(t.data<int64_t>()[i]); break;
      case DType::kUInt8: x = t.data<uint8_t>()[i]; break;
      case DType::kUInt16: x = t.data<uint16_t>()[i]; break;
      case DType::kUInt32: x = t.data<uint32_t>()[i]; break;
      case DType::kUInt64: x = double(t.data<uint64_t>()[i]); break;
      case DType::kBool: x = t.data<bool>()[i] ? 1 : 0; break;
      default: ADD_FAILURE() << "to_double: unsupported dtype";
    }
    v[size_t(i)] = x;
  }
  return v;
}

::testing::AssertionResult all_close(const Tensor& actual, const Shape& shape, const std::vector<double>& expected,
                                     double rtol, double atol) {
  if (actual.shape() != shape)
    return ::testing::AssertionFailure() << "shape " << shape_to_string(actual.shape()) << " != expected "
                                         << shape_to_string(shape);
  if (expected.size() != size_t(actual.numel()))
    return ::testing::AssertionFailure() << "expected " << expected.size() << " values, got " << actual.numel();
  auto a = to_double(actual);
  int bad = 0;
  std::ostringstream os;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = expected[i], x = a[i];
    bool ok = (std::isnan(e) && std::isnan(x)) || (std::isinf(e) && x == e) ||
              std::fabs(x - e) <= atol + rtol * std::fabs(e);
    if (!ok && bad++ < 5) os << "\n  [" << i << "] got " << x << " expected " << e;
  }
  if (bad) return ::testing::AssertionFailure() << bad << " of " << a.size() << " values differ:" << os.str();
  return ::testing::AssertionSuccess();
}

std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    idx[i] = shape[i] ? flat % shape[i] : 0;
    flat = shape[i] ? flat / shape[i] : 0;
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t f = 0;
  for (size_t i = 0; i < shape.size(); ++i) f = f * shape[i] + idx[i];
  return f;
}

int64_t broadcast_index(const std::vector<int64_t>& out_idx, const Shape& in_shape) {
  const size_t off = out_idx.size() - in_shape.size();
  int64_t f = 0;
  for (size_t i = 0; i < in_shape.size(); ++i) f = f * in_shape[i] + (in_shape[i] == 1 ? 0 : out_idx[off + i]);
  return f;
}

std::string linear_model_bytes(bool scaled) {
  ir::Model m;
  m.opsets = {{"", 14}};
  m.graph = std::make_shared<ir::Graph>();
  auto& g = *m.graph;
  g.inputs = {ir::ValueInfo{"X", ir::TypeInfo::tensor(DType::kFloat32, {-1, 2}), ""}};
  g.initializers.emplace_back("W", Tensor::from_vector<float>({2, 1}, {0.5f, -0.25f}));
  g.initializers.emplace_back("b", Tensor::from_vector<float>({1}, {0.1f}));
  g.nodes.push_back(make_node("MatMul", {"X", "W"}, {"xw"}));
  g.nodes.push_back(make_node("Add", {"xw", "b"}, {scaled ? "z" : "y"}));
  if (scaled) {
    g.initializers.emplace_back("s", Tensor::from_vector<float>({1}, {2.0f}));
    g.nodes.push_back(make_node("Mul", {"z", "s"}, {"y"}));
  }
  g.outputs = {ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kFloat32, {-1, 1}), ""}};
  return ir::serialize_model(m);
}

}  // namespace ot_test
