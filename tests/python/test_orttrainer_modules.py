"""The modules onnxruntime-training 1.13's users imported beside ORTTrainer
(``model_desc_validation``, ``_checkpoint_storage``, ``_utils``), and the legacy and the new
ORTTrainer seeded alike. Expected texts are onnxruntime 1.13's (its error messages); numbers are
checked against torch."""
import copy
import io
import pickle

import numpy as np
import onnx
import pytest
import torch

import onnxtrain as ot
from onnxtrain._errors import InvalidArgument
from onnxtrain.capi import ort_trainer as legacy
from onnxtrain.training import ORTTrainer, ORTTrainerOptions, _checkpoint_storage, _utils, optim
from onnxtrain.training import model_desc_validation as md_val


# --- model_desc_validation ---------------------------------------------------------------------

def test_model_desc_entries_are_named_tuples_that_index():
    desc = md_val._ORTTrainerModelDesc({"inputs": [("x", ["batch", 3]), ("label", ["batch"])],
                                        "outputs": [("loss", [], True), ("probs", ["batch", 2])]})
    x = desc.inputs[0]
    assert isinstance(x, desc._InputDescription) and x.name == "x" and x[0] == "x" and x[1] == ["batch", 3]
    assert len(x) == 2
    assert desc.outputs[1] == ("probs", ["batch", 2], False) and desc.outputs[0].is_loss is True
    assert desc.learning_rate == (md_val.LEARNING_RATE_IO_DESCRIPTION_NAME, [1], torch.float32)
    assert desc.all_finite is None and desc.loss_scale_input is None and desc.gradient_accumulation is None
    desc.all_finite = md_val.ALL_FINITE_IO_DESCRIPTION_NAME
    desc.loss_scale_input = md_val.LOSS_SCALE_INPUT_IO_DESCRIPTION_NAME
    desc.gradient_accumulation = md_val.GRADIENT_ACCUMULATION_IO_DESCRIPTION_NAME
    assert (desc.all_finite.name, desc.all_finite.shape, desc.all_finite.dtype) == ("__all_finite", [1], torch.bool)
    assert (desc.loss_scale_input.shape, desc.loss_scale_input.dtype) == ([], torch.float32)
    assert desc.gradient_accumulation.name == "__gradient_accumulation_name"
    desc.add_type_to_input_description(1, torch.int64)
    desc.add_type_to_output_description(0, torch.float32, torch.float16)
    assert isinstance(desc.inputs[1], desc._InputDescriptionTyped) and desc.inputs[1][2] == torch.int64
    assert desc.outputs[0] == ("loss", [], True, torch.float32, torch.float16)
    with pytest.raises(AssertionError, match="must be a torch.dtype"):
        desc.add_type_to_input_description(0, "float")
    desc._add_input_description(desc.inputs, "extra", [2], torch.float32)
    assert desc.inputs[-1] == ("extra", [2], torch.float32)
    with pytest.raises(AssertionError, match="'name' extra already exists in the inputs description"):
        desc._add_input_description(desc.inputs, "extra", [2])
    with pytest.raises(AssertionError, match="Only one 'is_loss' is supported"):
        desc._add_output_description(desc.outputs, "loss2", [], True)
    assert "Inputs:" in repr(desc) and "Mixed Precision:" in repr(desc)


@pytest.mark.parametrize("desc,error", [
    ({"inputs": [(True, [])], "outputs": [(True, [])]},
     "{'inputs': [{0: ['the first element of the tuple (aka name) must be a string']}], "
     "'outputs': [{0: ['the first element of the tuple (aka name) must be a string']}]}"),
    ({"inputs": [("in1", None)], "outputs": [("out1", None)]},
     "{'inputs': [{0: ['the second element of the tuple (aka shape) must be a list']}], "
     "'outputs': [{0: ['the second element of the tuple (aka shape) must be a list']}]}"),
    ({"inputs": [("in1", [])], "outputs": [("out1", [], None)]},
     "{'outputs': [{0: ['the third element of the tuple (aka is_loss) must be a boolean']}]}"),
    ({"inputs": [("in1", [True])], "outputs": [("out1", [True])]},
     "{'inputs': [{0: ['each shape must be either a string or integer']}], "
     "'outputs': [{0: ['each shape must be either a string or integer']}]}"),
    ({"inputs": [("in1", [])], "outputs": [("out1", [], True), ("out2", [], True)]},
     "{'outputs': [{1: ['only one is_loss can bet set to True']}]}"),
    ({"inputz": [("in1", [])], "outputs": [("out1", [], True)]},
     "{'inputs': ['required field'], 'inputz': ['unknown field']}"),
    ({"inputs": [("in1",)], "outputs": [("out1", [], True)]},
     "{'inputs': [{0: ['must be a tuple with size 2']}]}"),
])
def test_model_desc_errors_are_onnxruntimes(desc, error):
    with pytest.raises(ValueError) as e:
        md_val._ORTTrainerModelDesc(desc)
    assert str(e.value) == "Invalid model_desc: " + error


# --- _checkpoint_storage -----------------------------------------------------------------------

def nested():
    return {"int1": 1, "float1": 2.345, "bool1": True, "str1": "onnxruntime", "list1": [1, 2, 3],
            "t": torch.arange(6, dtype=torch.int16).reshape(2, 3),
            "d": {"a": np.arange(5, dtype=np.float32), "e": {}, "f": {"g": np.float64(0.5)}}}


def test_checkpoint_storage_round_trip_gives_numpy_values(tmp_path):
    path = str(tmp_path / "c.ortcp")
    _checkpoint_storage.save(nested(), path)
    got = _checkpoint_storage.load(path)
    assert set(got) == set(nested())
    assert type(got["int1"]) is np.int64 and got["int1"] == 1
    assert type(got["float1"]) is np.float64 and got["float1"] == 2.345
    assert type(got["bool1"]) is np.bool_ and got["bool1"]
    assert got["str1"] == "onnxruntime"
    assert isinstance(got["list1"], np.ndarray) and got["list1"].tolist() == [1, 2, 3]
    assert got["t"].dtype == np.int16 and got["t"].tolist() == [[0, 1, 2], [3, 4, 5]]
    np.testing.assert_array_equal(got["d"]["a"], np.arange(5, dtype=np.float32))
    assert got["d"]["e"] == {} and got["d"]["f"]["g"] == 0.5
    # key: '/'-separated levels, a trailing '/' allowed (onnxruntime's tests pass 'dict1/str1/')
    assert _checkpoint_storage.load(path, key="d/f/") == {"g": 0.5}
    assert _checkpoint_storage.load(path, key="d/a").tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(KeyError, match="'d/x'"):
        _checkpoint_storage.load(path, key="d/x")


def test_checkpoint_storage_file_objects_and_errors(tmp_path):
    buf = io.BytesIO()
    _checkpoint_storage.save({"w": torch.ones(2, 3, dtype=torch.float64)}, buf)
    buf.seek(0)
    assert _checkpoint_storage.load(buf)["w"].shape == (2, 3)
    path = str(tmp_path / "c")
    with pytest.raises(ValueError, match="Object to be saved must be a dictionary"):
        _checkpoint_storage.save([1, 2], path)
    with pytest.raises(TypeError, match="builtins.set"):
        _checkpoint_storage.save({"s": {1, 2}}, path)
    with pytest.raises(TypeError, match="'/o'"):
        _checkpoint_storage.save({"o": object()}, path)
    with pytest.raises(FileNotFoundError):
        _checkpoint_storage.load(path)
    _checkpoint_storage.save({"a": 1}, path)
    with pytest.raises(FileExistsError):  # h5py's mode "w-": never overwritten
        _checkpoint_storage.save({"a": 2}, path)
    other = tmp_path / "other"
    other.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="other"):
        _checkpoint_storage.load(str(other))


class _Custom:
    pass


def test_serialized_hex_is_pickle_hex_and_refuses_classes():
    user = {"epoch": 3, "loss": [1.5, 0.25], "name": "run"}
    text = _checkpoint_storage.to_serialized_hex(user)
    assert text == pickle.dumps(user).hex()
    assert _checkpoint_storage.from_serialized_hex(text) == user
    assert _checkpoint_storage.from_serialized_hex(text.encode()) == user
    with pytest.raises(InvalidArgument, match="_Custom"):
        _checkpoint_storage.from_serialized_hex(pickle.dumps({"c": _Custom()}).hex())


# --- _utils ------------------------------------------------------------------------------------

def test_import_module_from_file(tmp_path):
    f = tmp_path / "my_helpers_mod.py"
    f.write_text("VALUE = 41 + 1\n")
    m = _utils.import_module_from_file(str(f))
    assert m.VALUE == 42 and m.__name__ == "my_helpers_mod"
    assert _utils.import_module_from_file(str(f), "other_name_mod").__name__ == "other_name_mod"
    with pytest.raises(AssertionError, match="file_path"):
        _utils.import_module_from_file(str(tmp_path / "missing.py"))


def test_dtype_onnx_to_torch():
    T = onnx.TensorProto
    assert _utils.dtype_onnx_to_torch(T.FLOAT) is torch.float32
    assert _utils.dtype_onnx_to_torch("int64") is torch.int64
    assert _utils.dtype_onnx_to_torch(T.DOUBLE) is torch.float64
    assert _utils.dtype_onnx_to_torch(T.BOOL) is torch.bool
    assert _utils.dtype_onnx_to_torch(T.STRING) is str
    assert _utils.dtype_onnx_to_torch(T.UNDEFINED) is None
    with pytest.raises(AssertionError):
        _utils.dtype_onnx_to_torch(99)
    with pytest.raises(ValueError):
        _utils.dtype_onnx_to_torch(1.0)


# --- legacy and new ORTTrainer seeded alike ----------------------------------------------------

class DropNet(torch.nn.Module):
    """Dropout, and a buffer the model reads (neither trainer may train it)."""

    def __init__(self, p):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 16)
        self.drop = torch.nn.Dropout(p)
        self.fc2 = torch.nn.Linear(16, 3)
        self.register_buffer("shift", torch.linspace(-1, 1, 6))

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x + self.shift))))


def ce(preds, label):
    return torch.nn.functional.cross_entropy(preds, label)


def batches(n=4):
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(n)]


def run_new(p, seed=5, lr=0.1):
    torch.manual_seed(seed)
    ot.set_seed(seed)
    model = DropNet(p)
    desc = {"inputs": [("x", ["batch", 6]), ("label", ["batch"])],
            "outputs": [("loss", [], True), ("preds", ["batch", 3])]}
    t = ORTTrainer(model, desc, optim.SGDConfig(lr=lr), loss_fn=ce,
                   options=ORTTrainerOptions({"utils": {"grad_norm_clip": False}}))
    return [float(t.train_step(x, y)[0]) for x, y in batches()], t


def run_legacy(p, seed=5, lr=0.1):
    torch.manual_seed(seed)
    ot.set_seed(seed)
    model = DropNet(p)
    desc = legacy.ModelDescription([legacy.IODescription("x", ["batch", 6]), legacy.IODescription("label", ["batch"])],
                                   [legacy.IODescription("loss", []), legacy.IODescription("preds", ["batch", 3])])
    lr_desc = legacy.IODescription("Learning_Rate", [1], torch.float32)
    t = legacy.ORTTrainer(model, ce, desc, "SGDOptimizer", None, lr_desc, "cpu", enable_grad_norm_clip=False)
    return [float(t.train_step(x, y, torch.tensor([lr]))[0]) for x, y in batches()], t


def test_legacy_and_new_trainer_seeded_alike_give_the_same_losses():
    new, t_new = run_new(0.3)
    old, t_old = run_legacy(0.3)
    assert new == old  # same dropout masks: the same graph, node names and seed
    # the weights carry the module's own names; the buffer is not trained
    state = t_new.state_dict()
    assert set(state["model"]["full_precision"]) == {n for n, _ in DropNet(0.3).named_parameters()} | {"shift"}
    np.testing.assert_array_equal(state["model"]["full_precision"]["shift"], torch.linspace(-1, 1, 6).numpy())


def test_new_trainer_without_dropout_tracks_torch():
    losses, _ = run_new(0.0)
    torch.manual_seed(5)
    ref = DropNet(0.0)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for (x, y), got in zip(batches(), losses):
        opt.zero_grad()
        loss = ce(ref(x), y)
        loss.backward()
        opt.step()
        assert abs(got - float(loss)) < 1e-5 * max(1.0, abs(float(loss)))


# --- ORTTrainer._training_session and state dicts ----------------------------------------------

class _StubSession:
    """What onnxruntime's tests assign to ORTTrainer._training_session."""

    def get_model_state(self, include_mixed_precision_weights=False):
        return {"full_precision": {"a": np.arange(5)}}

    def get_optimizer_state(self):
        return {"a": {"Moment_1": np.arange(5)}, "shared_optimizer_state": {"step": np.arange(1)}}

    def get_partition_info_map(self):
        return {"a": {"original_dim": [1, 2, 3]}}


def desc_and_model():
    desc = {"inputs": [("x", ["batch", 6]), ("label", ["batch"])],
            "outputs": [("loss", [], True), ("preds", ["batch", 3])]}
    return DropNet(0.0), desc


def test_state_dict_before_the_first_step_warns_and_holds_a_loaded_state():
    model, desc = desc_and_model()
    t = ORTTrainer(model, desc, optim.LambConfig(), loss_fn=ce)
    with pytest.warns(UserWarning, match="ONNX Runtime training session is not initialized yet. Please run "
                                         "train_step or eval_step at least once before calling ORTTrainer.state_dict"):
        assert t.state_dict() == {}
    assert t._training_session is None and not t._load_state_dict
    _, trained = run_new(0.0)
    state = trained.state_dict()
    t.load_state_dict(state)
    assert t._load_state_dict.args[0]["model"].keys() == state["model"].keys()  # onnxruntime's partial
    with pytest.warns(UserWarning):
        held = t.state_dict()
    np.testing.assert_array_equal(held["model"]["full_precision"]["fc1.weight"],
                                  state["model"]["full_precision"]["fc1.weight"])


def test_training_session_methods_and_partition_info():
    losses, t = run_new(0.0)
    sess = t._training_session
    weights = {n: p.detach().numpy() for n, p in DropNet(0.0).named_parameters()}
    assert set(sess.get_model_state()["full_precision"]) == set(weights)
    assert set(weights) <= set(sess.get_state())
    assert sess.get_partition_info_map() == {}
    assert "partition_info" not in t.state_dict()
    model, desc = desc_and_model()
    z = ORTTrainer(model, desc, optim.LambConfig(), loss_fn=ce,
                   options=ORTTrainerOptions({"distributed": {"deepspeed_zero_optimization": {"stage": 1}}}))
    z._training_session = _StubSession()
    state = z.state_dict()
    assert state["partition_info"] == {"a": {"original_dim": [1, 2, 3]}}
    np.testing.assert_array_equal(state["optimizer"]["a"]["Moment_1"], np.arange(5))
    np.testing.assert_array_equal(state["model"]["full_precision"]["a"], np.arange(5))


def test_load_state_dict_missing_keys_warn_and_mismatches_raise_runtime_error():
    _, a = run_new(0.0, seed=1)
    _, b = run_new(0.0, seed=2)
    state = a.state_dict()
    del state["optimizer"]
    with pytest.warns(UserWarning, match="^Missing key: optimizer in state_dict$"):
        b.load_state_dict(state)
    np.testing.assert_array_equal(b.state_dict()["model"]["full_precision"]["fc1.weight"],
                                  state["model"]["full_precision"]["fc1.weight"])
    bad = a.state_dict()
    bad["model"]["full_precision"]["extra"] = np.zeros(2, np.float32)
    with pytest.raises(RuntimeError, match=r"unexpected \['extra'\]"):
        b.load_state_dict(bad)


# --- forward() binding and unused inputs -------------------------------------------------------

class KeywordNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 4)

    def forward(self, y=None, x=None):  # onnxruntime's test model: x is the second parameter
        return self.linear(x) + (y if y is not None else 1.0)


def test_inputs_bound_to_forward_by_parameter_name():
    torch.manual_seed(3)
    model = KeywordNet()
    ref = copy.deepcopy(model)
    desc = {"inputs": [("x", [2, 2]), ("label", [2])], "outputs": [("loss", [], True), ("output", [2, 4])]}
    t = ORTTrainer(model, desc, optim.SGDConfig(lr=0.5), loss_fn=ce,
                   options=ORTTrainerOptions({"utils": {"grad_norm_clip": False}}))
    opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    g = torch.Generator().manual_seed(4)
    for _ in range(3):
        x, y = torch.randn(2, 2, generator=g), torch.tensor([0, 3])
        loss, out = t.train_step(x, y)
        opt.zero_grad()
        want = ref(x=x)
        ref_loss = ce(want, y)
        ref_loss.backward()
        opt.step()
        np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
        assert abs(float(loss) - float(ref_loss)) < 1e-5


def test_unused_model_desc_input_is_accepted():
    class Unused(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.tensor([2.0]))

        def forward(self, x, y):  # y is not used: the export drops it
            return torch.mean(x * self.w)

    t = ORTTrainer(Unused(), {"inputs": [("x", [1]), ("y", [1])], "outputs": [("loss", [], True)]},
                   optim.SGDConfig(lr=0.25))
    loss = t.train_step(torch.tensor([3.0]), torch.tensor([1.0]))
    assert float(loss) == 6.0
    # d(mean(x*w))/dw = x = 3: w = 2 - 0.25*3
    np.testing.assert_allclose(t.state_dict()["model"]["full_precision"]["w"], [1.25])


def test_load_state_dict_checks_against_an_assigned_training_session():
    model, desc = desc_and_model()
    t = ORTTrainer(model, desc, optim.LambConfig(), loss_fn=ce)
    t._training_session = _StubSession()  # as onnxruntime's tests do
    with pytest.raises(RuntimeError, match=r"unexpected \['b'\]"):
        t.load_state_dict({"model": {"full_precision": {"a": np.arange(5), "b": np.arange(2)}},
                           "optimizer": {}, "train_step_info": {"optimization_step": 0, "step": 0}})
    # onnxruntime then writes the weights into the ONNX model and makes the session again
    # (_init_session): onnxtrain cannot remake an assigned session and says so.
    t._onnx_model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    with pytest.raises(NotImplementedError, match="not an onnxtrain TrainingSession"):
        t.load_state_dict(t.state_dict())


@pytest.mark.parametrize("config", [optim.AdamConfig, optim.LambConfig])
def test_lr_inside_params_is_refused_with_onnxruntimes_exact_text(config):
    # onnxruntime 1.13's AdamConfig/LambConfig assert this exact text (its tests compare str(e))
    with pytest.raises(AssertionError) as e:
        config(params=[{"params": ["layer1.weight"], "lr": 0.1}], lr=0.2)
    assert str(e.value) == "'lr' is not supported inside params"
