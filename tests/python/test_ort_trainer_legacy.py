"""The legacy trainer onnxruntime.capi.ort_trainer.ORTTrainer against PyTorch: a torch MLP + loss_fn
trained 10 steps with SGD (learning rate fed each step) and with Adam (per-weight attributes from
map_optimizer_attributes, decoupled decay, gradient-norm clipping, learning rate from
get_lr_this_step) tracks torch within 1e-4 relative per step; fetches, eval_step, state_dict
round trips, save_as_onnx, checkpoints, every NotImplementedError path, and a script under the
onnxruntime alias."""
import copy
import warnings

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from test_ort_scripts import run_script

import onnxtrain as ot
from onnxtrain.capi.ort_trainer import (IODescription, LossScaler, ModelDescription, ORTTrainer, generate_sample,
                                        load_checkpoint, save_checkpoint)

STEPS = 10
LR_DESC = IODescription("Learning_Rate", [1], torch.float32)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(10, 16)
        self.fc2 = torch.nn.Linear(16, 4)
        self.register_buffer("bias_buffer", torch.tensor(1e-3))

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))) + self.bias_buffer


def loss_fn(pred, label):
    return F.cross_entropy(pred, label)


def model_desc():
    return ModelDescription([IODescription("x", ["batch", 10], torch.float32),
                             IODescription("label", ["batch"], torch.int64, num_classes=4)],
                            [IODescription("loss", [], torch.float32),
                             IODescription("probability", ["batch", 4], torch.float32)])


def batches(n=STEPS, seed=3, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return [(scale * torch.randn(8, 10, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(n)]


def adam_attributes(name):
    """onnxruntime's BERT recipe: no decay for biases, decay 0.01 elsewhere."""
    return {"alpha": 0.9, "beta": 0.999, "lambda": 0.0 if "bias" in name else 0.01, "epsilon": 1e-6}


def make_trainer(optimizer="SGDOptimizer", attributes=None, seed=0, **kwargs):
    torch.manual_seed(seed)
    model = MLP()
    ref = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = ORTTrainer(model, loss_fn, model_desc(), optimizer, attributes, LR_DESC, torch.device("cpu"),
                             **kwargs)
    return trainer, ref


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))


def max_weight_rel(trainer, ref):
    state = trainer.state_dict()
    return max(rel(state[n].numpy(), p.detach().numpy()) for n, p in ref.named_parameters())




# --------------------------------------------------------------------------------- trajectories
def test_sgd_with_learning_rate_fed_each_step_tracks_torch():
    trainer, ref = make_trainer("SGDOptimizer", enable_grad_norm_clip=True)  # SGD is never clipped
    topt = torch.optim.SGD(ref.parameters(), lr=0.1)
    worst = 0.0
    for step, (x, y) in enumerate(batches()):
        lr = 0.1 * (1.0 - step / (2 * STEPS))
        if step % 2:
            loss, prob = trainer.train_step(x, y, torch.tensor([lr]))  # positional, after the model inputs
        else:
            loss, prob = trainer.train_step(x, label=y, Learning_Rate=np.array([lr], np.float32))  # by name
        assert isinstance(loss, torch.Tensor) and loss.dim() == 0 and tuple(prob.shape) == (8, 4)
        topt.param_groups[0]["lr"] = lr
        topt.zero_grad()
        tloss = loss_fn(ref(x), y)
        tloss.backward()
        topt.step()
        worst = max(worst, rel(float(loss), float(tloss)), max_weight_rel(trainer, ref))
        assert worst < 1e-4, (step, float(loss), float(tloss))
    assert trainer.global_step_ == STEPS and trainer.current_step == STEPS
    print(f"SGD: max relative difference to torch over {STEPS} steps (loss and weights): {worst:.2e}")


def test_adam_per_weight_attributes_and_get_lr_this_step_track_torch_adamw():
    seen = []

    def get_lr_this_step(global_step):
        seen.append(global_step)
        return 0.01 * 0.9 ** global_step

    trainer, ref = make_trainer("AdamOptimizer", adam_attributes, get_lr_this_step=get_lr_this_step)
    named = dict(ref.named_parameters())
    # onnxruntime's AdamOptimizer decays decoupled from the moments (weight_decay_mode 0): torch's AdamW
    topt = torch.optim.AdamW([{"params": [p for n, p in named.items() if "bias" not in n], "weight_decay": 0.01},
                              {"params": [p for n, p in named.items() if "bias" in n], "weight_decay": 0.0}],
                             lr=0.01, betas=(0.9, 0.999), eps=1e-6)
    worst, clipped = 0.0, 0
    for step, (x, y) in enumerate(batches(scale=4.0)):
        loss, _ = trainer.train_step(x, y)
        for g in topt.param_groups:
            g["lr"] = 0.01 * 0.9 ** step
        topt.zero_grad()
        tloss = loss_fn(ref(x), y)
        tloss.backward()
        # enable_grad_norm_clip (default True): the global gradient norm is clipped to max_norm_clip=1
        clipped += float(torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)) > 1.0
        topt.step()
        worst = max(worst, rel(float(loss), float(tloss)), max_weight_rel(trainer, ref))
        assert worst < 1e-4, (step, float(loss), float(tloss))
    assert clipped > 0, "the reference never clipped: the test would not cover clipping"
    assert seen == list(range(STEPS)) and trainer.global_step_ == STEPS
    state = trainer.state_dict()
    assert state["bias_buffer"].item() == pytest.approx(1e-3)  # torch buffers are frozen
    assert state["Update_Count_fc1.weight"].tolist() == [STEPS + 1]  # onnxruntime counts from 1
    np.testing.assert_allclose(state["Moment_1_fc2.weight"].numpy(),
                               topt.state[named["fc2.weight"]]["exp_avg"].numpy(), rtol=1e-3, atol=1e-6)
    print(f"Adam: max relative difference to torch AdamW over {STEPS} steps (loss and weights): {worst:.2e}")


def test_lamb_onnx_model_with_loss_first_output(tmp_path):
    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(10, 4)

        def forward(self, x, label):
            out = self.fc(x)
            return F.cross_entropy(out, label), out

    x, y = batches(1)[0]
    path = tmp_path / "with_loss.onnx"
    torch.onnx.export(WithLoss(), (x, y), str(path), input_names=["x", "label"], output_names=["loss", "probability"],
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, opset_version=14)
    lamb = {"alpha": 0.9, "beta": 0.999, "lambda": 0.01, "epsilon": 1e-6, "ratio_min": 0.1, "ratio_max": 10.0,
            "do_bias_correction": 1}
    t = ORTTrainer(onnx.load(str(path)), None, model_desc(), "LambOptimizer", lambda n: lamb, LR_DESC, "cpu",
                   enable_grad_norm_clip=False)
    assert set(t.state_dict()) == {"fc.weight", "fc.bias", "Moment_1_fc.weight", "Moment_2_fc.weight",
                                   "Moment_1_fc.bias", "Moment_2_fc.bias", "Step"}  # session built at once
    params = t.session.parameters
    assert params.training_optimizer_name == "LambOptimizer"
    assert dict(params.optimizer_attributes_map["fc.weight"])["ratio_min"] == pytest.approx(0.1)
    assert dict(params.optimizer_int_attributes_map["fc.weight"]) == {"do_bias_correction": 1}
    losses = [float(t.train_step(x, y, torch.tensor([0.01]))[0]) for x, y in batches(5)]
    assert t.state_dict()["Step"].tolist() == [6]
    assert all(np.isfinite(losses))


# ------------------------------------------------------------------------- steps and outputs
def test_fetches_eval_step_and_call_modes():
    trainer, _ = make_trainer()
    (x, y), (x2, y2) = batches(2)
    prob = trainer.train_step(x, y, torch.tensor([0.1]), fetches=["probability"])
    assert tuple(prob.shape) == (8, 4) and trainer.global_step_ == 1  # a fetch still trains
    before = trainer.state_dict()
    loss, prob = trainer.eval_step(x2, y2)
    assert loss.dim() == 0 and tuple(prob.shape) == (8, 4)
    only_prob = trainer.eval_step(x2, fetches=["probability"])  # no label needed for the predictions
    np.testing.assert_allclose(only_prob.numpy(), prob.numpy(), rtol=1e-6)
    loss_only = trainer.eval_step(x=x2, label=y2, fetches=["loss"])
    assert float(loss_only) == pytest.approx(float(loss))
    after = trainer.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # eval changes nothing
    trainer.eval()
    assert float(trainer(x2, y2)[0]) == pytest.approx(float(loss))
    trainer.train()
    trainer([x2, y2, torch.tensor([0.1])])  # one list of inputs, as onnxruntime accepted
    assert trainer.global_step_ == 2
    with pytest.raises(ValueError, match="fetches"):
        trainer.eval_step(x2, y2, fetches=["nope"])
    with pytest.raises(ValueError, match="missing inputs"):
        trainer.train_step(x2, y2)  # no learning rate
    with pytest.raises(ValueError, match="unknown input 'z'"):
        trainer.train_step(x2, y2, torch.tensor([0.1]), z=1)


def test_gradient_accumulation_counts_global_steps_and_frozen_weights():
    trainer, _ = make_trainer("SGDOptimizer", gradient_accumulation_steps=2, frozen_weights=["fc1.weight"])
    first = None
    for i, (x, y) in enumerate(batches(4)):
        trainer.train_step(x, y, torch.tensor([0.1]))
        assert trainer.global_step_ == (i + 1) // 2
        if first is None:
            first = trainer.state_dict()
    last = trainer.state_dict()
    assert torch.equal(first["fc1.weight"], last["fc1.weight"]) and not torch.equal(first["fc2.weight"],
                                                                                   last["fc2.weight"])
    trainer, _ = make_trainer(frozen_weights=["nope"])
    with pytest.raises(RuntimeError, match=r"\['nope'\] in frozen_weights not found"):
        trainer.train_step(*batches(1)[0], torch.tensor([0.1]))


def test_inputs_matched_to_forward_by_name():
    """model_desc names a subset of forward()'s parameters in another order: called by keyword."""
    class Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 4)

        def forward(self, y=None, x=None):
            return self.linear(x) + (y if y is not None else 1.0)

    torch.manual_seed(0)
    model = Linear()
    desc = ModelDescription([IODescription("x", [2, 2], torch.float32), IODescription("label", [2], torch.int64)],
                            [IODescription("loss", [], torch.float32), IODescription("output", [2, 4], torch.float32)])
    t = ORTTrainer(model, loss_fn, desc, "SGDOptimizer", None, LR_DESC, "cpu")
    x, label = torch.randn(2, 2), torch.tensor([0, 3])
    loss, out = t.train_step(x, label, torch.tensor([0.0]))
    with torch.no_grad():
        np.testing.assert_allclose(out.numpy(), model(x=x).numpy(), rtol=1e-6)
        assert float(loss) == pytest.approx(float(loss_fn(model(x=x), label)), rel=1e-6)
    assert set(t.state_dict()) == {"linear.weight", "linear.bias"}


def test_export_options(tmp_path):
    seen = []
    path = tmp_path / "training_graph.onnx"
    trainer, _ = make_trainer(_opset_version=13, _extra_postprocess=seen.append, _use_deterministic_compute=True,
                              run_symbolic_shape_infer=True, optimized_model_filepath=str(path))
    trainer.train_step(*batches(1)[0], torch.tensor([0.1]))
    assert len(seen) == 1 and seen[0].opset_import[0].version == 13
    # run_symbolic_shape_infer: as onnxruntime, onnx_model_ becomes the postprocessed model with the
    # inferred types added to its value_info
    assert trainer.onnx_model_.graph.node == seen[0].graph.node
    assert len(trainer.onnx_model_.graph.value_info) > len(seen[0].graph.value_info)
    assert path.exists() and trainer.session.parameters.deterministic_compute


# ------------------------------------------------------------------------------------ state
def test_state_dict_round_trip():
    trainer, _ = make_trainer("AdamOptimizer", adam_attributes)
    with pytest.warns(UserWarning, match="not initialized"):
        assert trainer.state_dict() == {}
    data = batches(5)
    for x, y in data[:3]:
        trainer.train_step(x, y, torch.tensor([0.01]))
    state = trainer.state_dict()
    assert set(trainer.state_dict(include_optimizer_state=False)) == {"fc1.weight", "fc1.bias", "fc2.weight",
                                                                       "fc2.bias", "bias_buffer"}
    other, _ = make_trainer("AdamOptimizer", adam_attributes, seed=7)
    other.load_state_dict(state, strict=True)  # before the first step: applied at the export
    for x, y in data[3:]:
        a = trainer.train_step(x, y, torch.tensor([0.01]))[0]
        b = other.train_step(x, y, torch.tensor([0.01]))[0]
        assert float(a) == float(b)
    s1, s2 = trainer.state_dict(), other.state_dict()
    assert s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)
    with pytest.raises(RuntimeError, match="Checkpoint tensor: extra is not present"):
        other.load_state_dict({**s1, "extra": torch.zeros(1)}, strict=True)
    other.load_state_dict({**state, "extra": torch.zeros(1)})  # not strict: ignored
    assert torch.equal(other.state_dict()["fc1.weight"], state["fc1.weight"])
    assert other.state_dict()["Update_Count_fc1.bias"].tolist() == [4]


def test_save_as_onnx(tmp_path):
    trainer, _ = make_trainer()
    path = tmp_path / "trained.onnx"
    with pytest.warns(UserWarning, match="not initialized"):
        trainer.save_as_onnx(str(path))
    assert not path.exists()
    x, y = batches(1)[0]
    trainer.train_step(x, y, torch.tensor([0.1]))
    trainer.save_as_onnx(str(path))
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    state = trainer.state_dict()
    for init in model.graph.initializer:
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(init), state[init.name].numpy())
    sess = ot.InferenceSession(str(path))
    loss = sess.run(["loss"], {"x": x.numpy(), "label": y.numpy()})[0]
    assert float(loss) == pytest.approx(float(trainer.eval_step(x, y)[0]), rel=1e-6)


def test_checkpoint_functions(tmp_path):
    trainer, _ = make_trainer("AdamOptimizer", adam_attributes)
    for x, y in batches(2):
        trainer.train_step(x, y, torch.tensor([0.01]))
    save_checkpoint(trainer, str(tmp_path), "legacy", checkpoint_state_dict={"epoch": 3})
    assert (tmp_path / "legacy.ort.pt").exists()
    other, _ = make_trainer("AdamOptimizer", adam_attributes, seed=5)
    assert load_checkpoint(other, str(tmp_path), "legacy") == {"epoch": 3}
    x, y = batches(1, seed=9)[0]
    lr = torch.tensor([0.01])
    assert float(other.train_step(x, y, lr)[0]) == float(trainer.train_step(x, y, lr)[0])
    (tmp_path / "legacy.ZeRO.0.1.ort.pt").write_bytes(b"")
    with pytest.raises(NotImplementedError, match="ZeRO"):
        load_checkpoint(other, str(tmp_path), "legacy")


def test_helpers():
    s = generate_sample(IODescription("label", ["batch", 3], torch.int64, num_classes=5))
    assert s.shape == (1, 3) and s.dtype == torch.int64 and int(s.max()) < 5
    scaler = LossScaler("loss_scale", True, loss_scale=8.0, up_scale_window=2)
    scaler.update_loss_scale(True)
    scaler.update_loss_scale(True)
    assert scaler.loss_scale_ == 16.0
    scaler.update_loss_scale(False)
    assert scaler.loss_scale_ == 8.0
    scaler.reset()
    assert scaler.loss_scale_ == 8.0 and scaler.stable_steps_ == 0


# ----------------------------------------------------------------------- what onnxtrain lacks
@pytest.mark.parametrize("kwargs, named", [
    ({"device": "xla:0"}, "device='xla:0'"),
])
def test_unimplemented_arguments_raise_naming_them(kwargs, named):
    args = dict(device="cpu")
    args.update(kwargs)
    device = args.pop("device")
    with pytest.raises(NotImplementedError, match=named.replace("(", r"\(")) as e:
        ORTTrainer(MLP(), loss_fn, model_desc(), "SGDOptimizer", None, LR_DESC, device, **args)
    assert isinstance(e.value, ot.NotImplemented)


@pytest.mark.parametrize("optimizer, attributes, named", [
    ("AdamOptimizer", {"momentum": 0.9}, "momentum"),
    ("SGDOptimizer", {"lambda": 0.1}, "lambda"),
    ("AdamOptimizer", {"weight_decay_mode": 2}, "weight_decay_mode=2"),
    ("AdamOptimizer", {"weight_decay_mode": 1, "lambda": 0.01}, "AFTER_WEIGHT_UPDATE"),
    ("LambOptimizer", {"ratio_min": 2.0, "ratio_max": 1.0}, "ratio_min"),
])
def test_unhonoured_optimizer_attributes_raise_naming_them(optimizer, attributes, named):
    trainer, _ = make_trainer(optimizer, lambda name: attributes)
    with pytest.raises(NotImplementedError, match=named):
        trainer.train_step(*batches(1)[0], torch.tensor([0.01]))


def test_per_weight_max_norm_clip_must_agree():
    trainer, _ = make_trainer("AdamOptimizer", lambda n: {"max_norm_clip": 2.0 if "fc1" in n else 1.0})
    with pytest.raises(NotImplementedError, match="max_norm_clip"):
        trainer.train_step(*batches(1)[0], torch.tensor([0.01]))
    with pytest.raises(ValueError, match="float or int"):
        make_trainer("AdamOptimizer", lambda n: {"alpha": "0.9"})[0].train_step(*batches(1)[0], torch.tensor([0.01]))


@pytest.mark.parametrize("kwargs, named", [
    ({"device": "cuda:0"}, "device='cuda:0' (training runs on CPU)"),
    ({"use_memory_efficient_gradient": True}, "use_memory_efficient_gradient=True"),
])
def test_arguments_without_effect_warn(kwargs, named):
    args = dict(device="cpu")
    args.update(kwargs)
    device = args.pop("device")
    with pytest.warns(UserWarning, match=named.replace("(", r"\(").replace(")", r"\)")):
        t = ORTTrainer(MLP(), loss_fn, model_desc(), "SGDOptimizer", None, LR_DESC, device, **args)
    loss, _ = t.train_step(*batches(1)[0], torch.tensor([0.1]))
    assert np.isfinite(float(loss))


# ---------------------------------------------------------------------------------- the alias
LEGACY_SCRIPT = """
    import torch
    import torch.nn.functional as F
    from onnxruntime.capi.ort_trainer import ORTTrainer, IODescription, ModelDescription

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    desc = ModelDescription([IODescription("x", ["batch", 10], torch.float32),
                             IODescription("label", ["batch"], torch.int64, num_classes=4)],
                            [IODescription("loss", [], torch.float32),
                             IODescription("probability", ["batch", 4], torch.float32)])
    trainer = ORTTrainer(model, lambda p, y: F.cross_entropy(p, y), desc, "SGDOptimizer", None,
                         IODescription("Learning_Rate", [1], torch.float32), torch.device("cpu"))
    x, y = torch.randn(32, 10), torch.randint(0, 4, (32,))
    losses = [float(trainer.train_step(x, y, torch.tensor([0.5]))[0]) for _ in range(20)]
    assert losses[-1] < 0.8 * losses[0], losses
    assert type(trainer).__module__ == "onnxtrain.capi.ort_trainer"
    print("legacy ok", sorted(trainer.state_dict()))
"""


def test_legacy_script_under_the_alias(tmp_path):
    out = run_script(tmp_path, LEGACY_SCRIPT)
    assert "legacy ok ['0.bias', '0.weight', '2.bias', '2.weight']" in out


# --------------------------------------------------------------------------------- mixed precision
def test_use_mixed_precision_with_a_legacy_loss_scaler_tracks_torch():
    """use_mixed_precision=True: float16 products, the scaler's loss scale fed after the learning
    rate, update_loss_scale called with every update's flag. A scale of 2^22 overflows float16 at
    first: those updates are skipped (global_step stays) and the scale halves until it fits; the
    applied steps then track torch (fp32) within float16's rounding."""
    scaler = LossScaler("ort_test_input_loss_scaler", True, loss_scale=float(1 << 22), up_scale_window=5)
    trainer, ref = make_trainer("SGDOptimizer", use_mixed_precision=True, loss_scaler=scaler)
    topt = torch.optim.SGD(ref.parameters(), lr=0.1)
    scales, flags = [], []
    for x, y in batches(16):
        scales.append(scaler.loss_scale_)
        before = trainer.global_step_
        loss, prob = trainer.train_step(x, y, torch.tensor([0.1]))
        assert tuple(prob.shape) == (8, 4)
        flags.append(trainer.global_step_ > before)
        if flags[-1]:  # applied: torch takes the same step
            topt.zero_grad()
            loss_fn(ref(x), y).backward()
            topt.step()
    skipped = flags.count(False)
    assert 1 <= skipped < 16 and not flags[0] and trainer.session.skipped_updates == skipped
    # the legacy rule: halved per skipped update, doubled after up_scale_window applied ones
    from test_mixed_precision import reference_scales
    assert scales == reference_scales(flags, float(1 << 22), window=5)[0]
    assert max_weight_rel(trainer, ref) < 2e-2


def test_use_mixed_precision_without_a_scaler_returns_all_finite():
    trainer, _ = make_trainer("SGDOptimizer", use_mixed_precision=True)
    (x, y), = batches(1)
    loss, prob, finite = trainer.train_step(x, y, torch.tensor([0.1]), torch.tensor([256.0]))
    assert finite.dtype == torch.bool and bool(finite.reshape(-1)[0]) and trainer.global_step_ == 1
    loss, prob, finite = trainer.train_step(x, y, Learning_Rate=torch.tensor([0.1]), loss_scale=torch.tensor([3e38]))
    assert not bool(finite.reshape(-1)[0]) and trainer.global_step_ == 1  # overflow: skipped
    with pytest.raises(ValueError, match="loss scale"):
        trainer.train_step(x, y, torch.tensor([0.1]))


def test_deepspeed_zero_stage_one_process():
    """deepspeed_zero_stage=1 on one process: nothing to partition, the same steps as stage 0."""
    a, _ = make_trainer("AdamOptimizer", adam_attributes, deepspeed_zero_stage=1)
    b, _ = make_trainer("AdamOptimizer", adam_attributes)
    for x, y in batches(3):
        a.train_step(x, y, torch.tensor([0.01]))
        b.train_step(x, y, torch.tensor([0.01]))
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k
    with pytest.raises(ValueError, match="deepspeed_zero_stage"):
        make_trainer("SGDOptimizer", deepspeed_zero_stage=2)
