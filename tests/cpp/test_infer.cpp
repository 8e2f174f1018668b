// Per-node typing (ir/infer.h) against ONNX's own whole-model inference (InferShapes on the
// serialized model, the reference), over every conformance model; the nodes ONNX 1.12's
// inference functions crash on; onnxtrain's rule for the operators ONNX does not know.
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <map>

#include "ir/emitter.h"
#include "ir/infer.h"
#include "ir/onnx_io.h"
#include "ir/proto.h"
#include "test_util.h"

using namespace onnxtrain;
using namespace ot_test;

namespace {

std::vector<std::string> conformance_models() {
  const char* env = std::getenv("ONNXTRAIN_CONFORMANCE_DIR");
  const std::string root = env ? env : ONNXTRAIN_SOURCE_DIR "/../shared/conformance/onnx-1.12";
  std::vector<std::string> r;
  for (const char* sub : {"node", "simple"})
    for (const auto& name : list_dir(root + "/" + sub))
      if (std::ifstream(root + "/" + sub + "/" + name + "/model.onnx")) r.push_back(root + "/" + sub + "/" + name);
  return r;
}

// Where two types differ ("" when they agree): kind, element type, rank, fixed dimensions; the
// symbolic dimensions must correspond one to one across a model (`ref_to_got`, `got_to_ref`).
struct TypeComparer {
  std::map<std::string, std::string> ref_to_got, got_to_ref;

  std::string operator()(const ir::TypeInfo& ref, const ir::TypeInfo& got) {
    if (ref.kind != got.kind || ref.elem != got.elem || ref.has_shape != got.has_shape ||
        ref.dims.size() != got.dims.size() || bool(ref.inner) != bool(got.inner))
      return ref.to_string() + " vs " + got.to_string();
    for (size_t d = 0; d < ref.dims.size(); ++d) {
      const ir::Dim &a = ref.dims[d], &b = got.dims[d];
      if (a.value != b.value || a.param.empty() != b.param.empty()) return ref.to_string() + " vs " + got.to_string();
      if (a.param.empty()) continue;
      auto [f, fnew] = ref_to_got.emplace(a.param, b.param);
      auto [g, gnew] = got_to_ref.emplace(b.param, a.param);
      if (f->second != b.param || g->second != a.param)
        return ref.to_string() + " vs " + got.to_string() + " (symbols do not correspond)";
    }
    return ref.inner ? (*this)(*ref.inner, *got.inner) : "";
  }
};

// The one accepted difference: ONNX 1.12 gives Slice and Reshape outputs no shape when starts,
// ends or the target shape are computed at run time, and so to what follows them; onnxtrain
// records their rank (infer.cpp, rank_by_rule), dimensions unknown (symbols where ONNX's
// functions name them downstream). Element types must agree all the same.
bool rank_known_beyond_onnx(const ir::TypeInfo& ref, const ir::TypeInfo& got) {
  if (ref.kind != ir::TypeInfo::Kind::kTensor || got.kind != ref.kind || ref.elem != got.elem || ref.has_shape ||
      !got.has_shape)
    return false;
  for (const auto& d : got.dims)
    if (d.fixed()) return false;
  return true;
}

const ir::TypeInfo* find_type(const ir::Graph& g, const std::string& name) {
  for (const auto* list : {&g.value_info, &g.outputs})
    for (const auto& v : *list)
      if (v.name == name && v.type.kind != ir::TypeInfo::Kind::kUnknown) return &v.type;
  return nullptr;
}

const ir::ValueInfo* find_info(const ir::Model& m, const std::string& name) {
  for (const auto* list : {&m.graph->value_info, &m.graph->outputs})
    for (const auto& v : *list)
      if (v.name == name) return &v;
  return nullptr;
}

ir::Model load_proto(const onnx::ModelProto& p) {
  const std::string bytes = p.SerializeAsString();
  return ir::load_model_bytes(bytes.data(), bytes.size());
}

onnx::ModelProto model_proto(int opset, std::vector<std::pair<std::string, std::string>> extra_opsets = {}) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* o = m.add_opset_import();
  o->set_version(opset);
  for (const auto& [domain, version] : extra_opsets) {
    auto* e = m.add_opset_import();
    e->set_domain(domain);
    e->set_version(std::stoi(version));
  }
  m.mutable_graph()->set_name("g");
  return m;
}

void add_input(onnx::GraphProto* g, const std::string& name, int elem, const std::vector<int64_t>& dims) {
  auto* v = g->add_input();
  v->set_name(name);
  if (elem == 0) return;
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem);
  t->mutable_shape();
  for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
}

onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op, std::vector<std::string> in,
                          std::vector<std::string> out, const std::string& domain = "") {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + std::to_string(g->node_size()));
  if (!domain.empty()) n->set_domain(domain);
  for (const auto& i : in) n->add_input(i);
  for (const auto& o : out) n->add_output(o);
  return n;
}

void add_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void add_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

}  // namespace

// Counts of the comparison below.
struct Compared {
  int models = 0, values = 0, reference_failed = 0, ranks_beyond = 0;
};

// Types `ref` both ways (ONNX's whole-model inference on the proto, per-node typing on the IR) and
// compares every value ONNX types that the model does not declare.
void compare_with_onnx(onnx::ModelProto ref, const std::string& what, Compared* c) {
  ir::Model m = load_proto(ref);
  std::set<std::string> declared;  // outputs the model types: kept as declared by both
  for (const auto& o : m.graph->outputs)
    if (o.type.kind != ir::TypeInfo::Kind::kUnknown) declared.insert(o.name);
  try {
    onnx::shape_inference::InferShapes(ref, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(false, 0, true));
  } catch (const std::exception&) {
    ++c->reference_failed;  // ONNX typed nothing: nothing to compare
    return;
  }
  ASSERT_NO_THROW(ir::infer_types(m)) << what;
  TypeComparer compare;
  for (const auto* list : {&ref.graph().value_info(), &ref.graph().output()})
    for (const auto& v : *list) {
      const ir::TypeInfo want = ir::type_from_proto(v.type());
      if (want.kind == ir::TypeInfo::Kind::kUnknown || declared.count(v.name())) continue;
      const ir::TypeInfo* got = find_type(*m.graph, v.name());
      ++c->values;
      if (!got) {
        ADD_FAILURE() << what << ": '" << v.name() << "' untyped; ONNX: " << want.to_string();
      } else if (rank_known_beyond_onnx(want, *got)) {
        ++c->ranks_beyond;
      } else {
        EXPECT_EQ(compare(want, *got), "") << what << ": '" << v.name() << "'";
      }
    }
  ++c->models;
}

// Every value ONNX's whole-model inference types in a conformance model, per-node typing types the
// same: element type, rank, fixed dimensions, and symbols corresponding one to one. Each model is
// compared as it is, and with its outputs' declared types removed (so that every node's outputs
// are inferred, not only those of the multi-node models).
TEST(Infer, SameAsOnnxOnEveryConformanceModel) {
  const auto dirs = conformance_models();
  if (dirs.empty()) GTEST_SKIP() << "conformance suite not found";
  Compared declared, undeclared;
  for (const auto& dir : dirs) {
    onnx::ModelProto p;
    ASSERT_TRUE(p.ParseFromString(slurp(dir + "/model.onnx"))) << dir;
    compare_with_onnx(p, dir, &declared);
    for (auto& o : *p.mutable_graph()->mutable_output()) o.clear_type();
    compare_with_onnx(p, dir + " (outputs undeclared)", &undeclared);
  }
  for (const auto* c : {&declared, &undeclared})
    std::printf("compared %d values of %d models with ONNX's inference (%d models ONNX could not type); %d values "
                "have a rank where ONNX has none\n",
                c->values, c->models, c->reference_failed, c->ranks_beyond);
  EXPECT_GT(declared.models, 900);
  EXPECT_GT(undeclared.values, 1500);
}

// LayerNormalization's statistics with a negative axis: ONNX 1.12 writes out of bounds for
// axis < -rank (and for an axis past INT_MAX). Typed as ONNX types them for a valid axis; kept
// from ONNX otherwise, in the main graph and in subgraphs.
TEST(Infer, LayerNormalizationAxisGuard) {
  for (int64_t axis : {int64_t(-1), int64_t(-2), int64_t(-3), int64_t(-65537), int64_t(INT_MAX) + 1, int64_t(1)}) {
    onnx::ModelProto p = model_proto(17);
    auto* g = p.mutable_graph();
    add_input(g, "x", onnx::TensorProto::FLOAT, {3, 4});
    add_input(g, "scale", onnx::TensorProto::FLOAT, {4});
    add_int(add_node(g, "LayerNormalization", {"x", "scale"}, {"y", "mean", "inv_std"}), "axis", axis);
    add_node(g, "Relu", {"mean"}, {"z"});
    // The same node in an If branch, where the rank is not known beforehand.
    onnx::GraphProto branch;
    branch.set_name("b");
    add_int(add_node(&branch, "LayerNormalization", {"x", "scale"}, {"by", "bmean"}), "axis", axis);
    branch.add_output()->set_name("bmean");
    add_input(g, "c", onnx::TensorProto::BOOL, {});
    auto* iff = add_node(g, "If", {"c"}, {"w"});
    for (const char* name : {"then_branch", "else_branch"}) {
      auto* a = iff->add_attribute();
      a->set_name(name);
      a->set_type(onnx::AttributeProto::GRAPH);
      *a->mutable_g() = branch;
    }
    for (const char* o : {"y", "z", "w"}) g->add_output()->set_name(o);
    ir::Model m = load_proto(p);
    ASSERT_NO_THROW(ir::infer_types(m)) << axis;
    const ir::ValueInfo* y = find_info(m, "y");
    ASSERT_TRUE(y && y->type.elem == DType::kFloat32) << axis;
    const bool valid = axis >= -2 && axis <= INT_MAX;
    const ir::ValueInfo* mean = find_info(m, "mean");
    if (!valid) {
      EXPECT_TRUE(!mean || mean->type.kind == ir::TypeInfo::Kind::kUnknown) << axis;
      continue;
    }
    ASSERT_TRUE(mean && mean->type.has_shape) << axis;
    const int64_t a = axis < 0 ? axis + 2 : axis;
    EXPECT_EQ(mean->type.to_string(), a == 0 ? "tensor(float)[1, 1]" : "tensor(float)[3, 1]") << axis;
    EXPECT_EQ(find_info(m, "z")->type.to_string(), mean->type.to_string()) << axis;
  }
}

// MaxUnpool: ONNX 1.12 reads dimension 1 of the indices' shape unchecked. With untyped indices
// the output has X's element type and rank; with indices of a known shape, ONNX's full type.
TEST(Infer, MaxUnpoolIndicesGuard) {
  for (int indices_rank : {-1, 1, 4}) {
    onnx::ModelProto p = model_proto(11);
    auto* g = p.mutable_graph();
    add_input(g, "x", onnx::TensorProto::FLOAT, {1, 2, 2, 2});
    std::vector<int64_t> dims(size_t(std::max(indices_rank, 0)), 2);
    add_input(g, "i", indices_rank < 0 ? 0 : onnx::TensorProto::INT64, dims);
    auto* unpool = add_node(g, "MaxUnpool", {"x", "i"}, {"y"});
    add_ints(unpool, "kernel_shape", {2, 2});
    add_ints(unpool, "strides", {2, 2});
    add_node(g, "Relu", {"y"}, {"z"});
    g->add_output()->set_name("z");
    ir::Model m = load_proto(p);
    ASSERT_NO_THROW(ir::infer_types(m)) << indices_rank;
    const ir::ValueInfo *y = find_info(m, "y"), *z = find_info(m, "z");
    ASSERT_TRUE(y && z) << indices_rank;
    EXPECT_EQ(y->type.to_string(), indices_rank == 4 ? "tensor(float)[1, 2, 4, 4]" : "tensor(float)[?, ?, ?, ?]")
        << indices_rank;
    EXPECT_EQ(z->type.dims.size(), 4u) << indices_rank;
  }
}

// Scan-8 without its required num_scan_inputs crashed inside libonnx, and a zero stride divides by
// zero in ONNX's pooling inference: such a node (a subgraph holding one included) is left untyped,
// the rest of the graph is typed.
TEST(Infer, SchemaViolationsLeaveTheNodeUntyped) {
  {
    onnx::ModelProto p = model_proto(8);
    auto* g = p.mutable_graph();
    add_input(g, "s", onnx::TensorProto::FLOAT, {1, 2});
    add_input(g, "x", onnx::TensorProto::FLOAT, {1, 3, 2});
    auto* scan = add_node(g, "Scan", {"", "s", "x"}, {"s_out", "y"});
    auto* body = scan->add_attribute();
    body->set_name("body");
    body->set_type(onnx::AttributeProto::GRAPH);
    auto* bg = body->mutable_g();
    bg->set_name("body");
    add_input(bg, "bs", onnx::TensorProto::FLOAT, {2});
    add_input(bg, "bx", onnx::TensorProto::FLOAT, {2});
    add_node(bg, "Add", {"bs", "bx"}, {"bs_out"});
    add_node(bg, "Identity", {"bs_out"}, {"by"});
    for (const char* o : {"bs_out", "by"}) bg->add_output()->set_name(o);
    add_node(g, "Relu", {"s"}, {"r"});
    for (const char* o : {"y", "r"}) g->add_output()->set_name(o);
    ir::Model m = load_proto(p);
    ASSERT_NO_THROW(ir::infer_types(m));
    EXPECT_EQ(find_info(m, "r")->type.to_string(), "tensor(float)[1, 2]");
    EXPECT_EQ(find_info(m, "y")->type.kind, ir::TypeInfo::Kind::kUnknown);
  }
  for (const char* op : {"MaxPool", "Conv", "AveragePool"}) {
    onnx::ModelProto p = model_proto(13);
    auto* g = p.mutable_graph();
    add_input(g, "x", onnx::TensorProto::FLOAT, {1, 1, 4, 4});
    add_input(g, "w", onnx::TensorProto::FLOAT, {1, 1, 2, 2});
    const bool conv = std::string(op) == "Conv";
    auto* n = add_node(g, op, conv ? std::vector<std::string>{"x", "w"} : std::vector<std::string>{"x"}, {"y"});
    add_ints(n, "kernel_shape", {2, 2});
    add_ints(n, "strides", {0, 1});
    add_node(g, "Relu", {"x"}, {"r"});
    for (const char* o : {"y", "r"}) g->add_output()->set_name(o);
    ir::Model m = load_proto(p);
    ASSERT_NO_THROW(ir::infer_types(m)) << op;
    EXPECT_EQ(find_info(m, "y")->type.kind, ir::TypeInfo::Kind::kUnknown) << op;
    EXPECT_EQ(find_info(m, "r")->type.to_string(), "tensor(float)[1, 1, 4, 4]") << op;
  }
}

// Operators ONNX does not know: typed by onnxtrain's rule (custom_output_types), in the same pass
// as what follows them. Elementwise ones keep their source's shape; others give the element type;
// an operator without a rule stays untyped.
TEST(Infer, CustomOperatorsTypedByRule) {
  onnx::ModelProto p = model_proto(17, {{"com.onnxtrain", "1"}, {"com.microsoft", "1"}});
  auto* g = p.mutable_graph();
  add_input(g, "x", onnx::TensorProto::FLOAT, {2, 3});
  add_input(g, "w", onnx::TensorProto::FLOAT, {4, 3, 1, 1});
  add_node(g, "Gelu", {"x"}, {"gelu"}, "com.onnxtrain");
  add_node(g, "Relu", {"gelu"}, {"after_gelu"});
  add_node(g, "ConvGrad", {"gelu", "x", "w"}, {"dx", "dw", "db"}, "com.onnxtrain");
  add_node(g, "NoSuchOp", {"x"}, {"unknown"}, "com.onnxtrain");
  add_node(g, "YieldOp", {"x"}, {"yielded"}, "com.microsoft");
  for (const char* o : {"after_gelu", "dx", "dw", "db", "unknown", "yielded"}) g->add_output()->set_name(o);
  ir::Model m = load_proto(p);
  ir::infer_types(m);
  EXPECT_EQ(find_info(m, "gelu")->type.to_string(), "tensor(float)[2, 3]");
  EXPECT_EQ(find_info(m, "after_gelu")->type.to_string(), "tensor(float)[2, 3]");
  for (const char* o : {"dx", "dw", "db", "yielded"}) EXPECT_EQ(find_info(m, o)->type.to_string(), "tensor(float)") << o;
  EXPECT_EQ(find_info(m, "unknown")->type.kind, ir::TypeInfo::Kind::kUnknown);
  // The one rule: what the emitter gives, plus the elementwise operators' shapes.
  ir::Node gelu;
  gelu.op_type = "Gelu";
  gelu.domain = ir::kOnnxtrainDomain;
  gelu.inputs = {"x"};
  gelu.outputs = {"y"};
  const ir::TypeInfo x = ir::TypeInfo::tensor(DType::kFloat32, {2, 3});
  const ir::TypeLookup lookup = [&](const std::string& v) { return v == "x" ? &x : nullptr; };
  EXPECT_EQ(ir::custom_output_types(gelu, lookup)[0].to_string(), "tensor(float)[2, 3]");
  EXPECT_EQ(ir::output_types(gelu, {}, lookup)[0].to_string(), "tensor(float)");
}

// Slice with starts computed at run time: ONNX 1.12 gives no shape; the rank is the data's, and
// what follows is typed from it. Declared types stay as declared; untyped outputs take theirs.
TEST(Infer, RanksAndDeclaredTypes) {
  onnx::ModelProto p = model_proto(13);
  auto* g = p.mutable_graph();
  add_input(g, "x", onnx::TensorProto::FLOAT, {4, 5});
  add_input(g, "starts", onnx::TensorProto::INT64, {1});
  add_input(g, "ends", onnx::TensorProto::INT64, {1});
  add_node(g, "Slice", {"x", "starts", "ends"}, {"s"});
  add_node(g, "Relu", {"s"}, {"r"});
  add_node(g, "Neg", {"x"}, {"declared"});
  auto* d = g->add_value_info();
  d->set_name("declared");
  d->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  g->add_output()->set_name("r");
  ir::Model m = load_proto(p);
  ir::infer_types(m);
  const ir::ValueInfo* r = find_info(m, "r");
  ASSERT_TRUE(r && r->type.has_shape);
  EXPECT_EQ(r->type.dims.size(), 2u);
  EXPECT_EQ(find_info(m, "declared")->type.to_string(), "tensor(float)");
  EXPECT_EQ(m.graph->outputs[0].type.dims.size(), 2u);
}
