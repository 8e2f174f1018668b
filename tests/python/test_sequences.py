"""Sequences through onnxtrain.InferenceSession, as onnxruntime takes and returns them: sequence inputs
as Python lists of numpy arrays, sequence outputs as lists of numpy arrays, get_inputs()/get_outputs()
typed 'seq(tensor(float))'. Models are built with onnx.helper; every expected value comes from numpy
(np.split, np.concatenate, np.stack, list operations), never from onnxtrain."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain as ort
from onnxtrain.capi.onnxruntime_pybind11_state import InvalidArgument

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def make_session(nodes, inputs, outputs, opset=17):
    graph = helper.make_graph(nodes, "seq", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def seq_info(name, elem=F):
    return helper.make_tensor_sequence_value_info(name, elem, None)


def tensor(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def assert_same_list(got, want):
    assert isinstance(got, list)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_split_insert_erase_concat_against_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    z = rng.standard_normal((2, 4)).astype(np.float32)
    split = np.array([2, 1, 3], dtype=np.int64)
    sess = make_session(
        [helper.make_node("SplitToSequence", ["x", "split"], ["pieces"], axis=0),
         helper.make_node("SequenceInsert", ["pieces", "z", "pos"], ["inserted"]),
         helper.make_node("SequenceErase", ["inserted"], ["erased"]),
         helper.make_node("ConcatFromSequence", ["erased"], ["y"], axis=0),
         helper.make_node("SequenceLength", ["erased"], ["n"])],
        [tensor("x", F, [6, 4]), tensor("z", F, [2, 4]), tensor("split", I64, [3]), tensor("pos", I64, [])],
        [seq_info("pieces"), seq_info("inserted"), tensor("y"), tensor("n", I64, [])])
    for pos in (0, 1, 3, -1, -3):
        pieces, inserted, y, n = sess.run(None, {"x": x, "z": z, "split": split, "pos": np.array(pos, dtype=np.int64)})
        want_pieces = np.split(x, np.cumsum(split)[:-1], axis=0)
        assert_same_list(pieces, want_pieces)
        want = list(want_pieces)
        want.insert(pos if pos >= 0 else pos + len(want), z)
        assert_same_list(inserted, want)
        want.pop()
        np.testing.assert_array_equal(y, np.concatenate(want, axis=0))
        assert n == len(want) and n.dtype == np.int64


def test_sequence_input_as_a_list_of_arrays():
    rng = np.random.default_rng(1)
    items = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(4)]
    sess = make_session(
        [helper.make_node("SequenceAt", ["s", "pos"], ["at"]),
         helper.make_node("SequenceLength", ["s"], ["n"]),
         helper.make_node("ConcatFromSequence", ["s"], ["stacked"], axis=-1, new_axis=1),
         helper.make_node("ConcatFromSequence", ["s"], ["joined"], axis=1),
         helper.make_node("Identity", ["s"], ["same"])],
        [seq_info("s"), tensor("pos", I64, [])],
        [tensor("at"), tensor("n", I64, []), tensor("stacked"), tensor("joined"), seq_info("same")])
    for pos in range(-4, 4):
        at, n, stacked, joined, same = sess.run(None, {"s": items, "pos": np.array(pos, dtype=np.int64)})
        np.testing.assert_array_equal(at, items[pos])
        assert n == 4
        np.testing.assert_array_equal(stacked, np.stack(items, axis=-1))
        np.testing.assert_array_equal(joined, np.concatenate(items, axis=1))
        assert_same_list(same, items)
    # A tuple is a sequence too; the caller's arrays are left as they were.
    before = [a.copy() for a in items]
    sess.run(["same"], {"s": tuple(items), "pos": np.array(0, dtype=np.int64)})
    assert_same_list(items, before)


def test_sequence_types_reported_as_onnxruntime_does():
    sess = make_session(
        [helper.make_node("SequenceInsert", ["s", "x"], ["out"]),
         helper.make_node("SplitToSequence", ["x"], ["parts"], axis=0, keepdims=0)],
        [seq_info("s", I64), tensor("x", I64, [3])],
        [seq_info("out", I64), seq_info("parts", I64)])
    assert [(i.name, i.type) for i in sess.get_inputs()] == [("s", "seq(tensor(int64))"), ("x", "tensor(int64)")]
    assert [(o.name, o.type) for o in sess.get_outputs()] == [("out", "seq(tensor(int64))"),
                                                              ("parts", "seq(tensor(int64))")]
    x = np.array([4, -5, 6], dtype=np.int64)
    out, parts = sess.run(None, {"s": [np.array([1, 2], dtype=np.int64)], "x": x})
    assert_same_list(out, [np.array([1, 2], dtype=np.int64), x])
    assert_same_list(parts, [np.array(v, dtype=np.int64) for v in x])  # keepdims=0: scalars
    # An empty list is an empty sequence of the declared element type.
    out, parts = sess.run(None, {"s": [], "x": x})
    assert_same_list(out, [x])


def test_empty_sequences_in_and_out():
    sess = make_session(
        [helper.make_node("SequenceEmpty", [], ["e"], dtype=F),
         helper.make_node("SequenceLength", ["s"], ["n"]),
         helper.make_node("SplitToSequence", ["x"], ["parts"], axis=1)],
        [seq_info("s"), tensor("x", F, [2, None])],
        [seq_info("e"), tensor("n", I64, []), seq_info("parts")])
    e, n, parts = sess.run(None, {"s": [], "x": np.zeros((2, 0), dtype=np.float32)})
    assert e == [] and n == 0 and parts == []


def test_sequence_map_against_numpy():
    body = helper.make_graph(
        [helper.make_node("Mul", ["a", "w"], ["scaled"]), helper.make_node("ReduceSum", ["a"], ["total"], keepdims=0)],
        "body", [tensor("a"), tensor("w")], [tensor("scaled"), tensor("total")])
    sess = make_session(
        [helper.make_node("SequenceMap", ["s", "w"], ["scaled", "totals"], body=body)],
        [seq_info("s"), tensor("w", F, [1])], [seq_info("scaled"), seq_info("totals")])
    rng = np.random.default_rng(2)
    items = [rng.standard_normal(k).astype(np.float32) for k in (3, 1, 5)]
    w = np.array([1.5], dtype=np.float32)
    scaled, totals = sess.run(None, {"s": items, "w": w})
    assert_same_list(scaled, [a * w for a in items])
    for t, a in zip(totals, items):
        np.testing.assert_allclose(t, a.sum(), rtol=1e-6)


def test_optional_element_of_a_sequence():
    sess = make_session(
        [helper.make_node("Optional", ["s"], ["o"]),
         helper.make_node("OptionalHasElement", ["o"], ["has"]),
         helper.make_node("OptionalGetElement", ["o"], ["got"])],
        [seq_info("s")], [tensor("has", TensorProto.BOOL, []), seq_info("got")], opset=15)
    assert sess.get_inputs()[0].type == "seq(tensor(float))"
    items = [np.arange(3, dtype=np.float32), np.ones((2, 2), dtype=np.float32)]
    has, got = sess.run(None, {"s": items})
    assert bool(has) is True
    assert_same_list(got, items)


def test_bad_sequence_feeds_and_positions():
    sess = make_session(
        [helper.make_node("SequenceAt", ["s", "pos"], ["at"], name="pick")],
        [seq_info("s"), tensor("pos", I64, [])], [tensor("at")])
    items = [np.zeros(2, dtype=np.float32)] * 3
    with pytest.raises(InvalidArgument, match=r"SequenceAt node 'pick': position 3 is out of range for a sequence of "
                                              r"length 3 \(accepted: -3 to 2\)"):
        sess.run(None, {"s": items, "pos": np.array(3, dtype=np.int64)})
    with pytest.raises(InvalidArgument, match="position 0 is out of range: the sequence is empty"):
        sess.run(None, {"s": [], "pos": np.array(0, dtype=np.int64)})
    with pytest.raises(InvalidArgument, match=r"input 's' holds a tensor of element type double at position 1"):
        sess.run(None, {"s": [items[0], np.zeros(2)], "pos": np.array(0, dtype=np.int64)})
    with pytest.raises(InvalidArgument, match="input 's' must be a sequence of tensors"):
        sess.run(None, {"s": items[0], "pos": np.array(0, dtype=np.int64)})
    concat = make_session([helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0, name="cat")],
                          [seq_info("s")], [tensor("y")])
    with pytest.raises(InvalidArgument, match="ConcatFromSequence node 'cat': tensor 1 of the sequence has shape"):
        concat.run(None, {"s": [np.zeros((2, 3), np.float32), np.zeros((2, 4), np.float32)]})
    with pytest.raises(InvalidArgument, match="cannot concatenate an empty sequence"):
        concat.run(None, {"s": []})


def test_optional_outputs_and_types_as_onnxruntime_reports_them():
    seq_t = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, [5]))
    opt_x = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, None))
    sess = make_session(
        [helper.make_node("Optional", [], ["empty"], type=seq_t),
         helper.make_node("OptionalHasElement", ["x"], ["has"])],
        [helper.make_value_info("x", opt_x)],
        [helper.make_value_info("empty", helper.make_optional_type_proto(seq_t)), tensor("has", TensorProto.BOOL, [])],
        opset=16)
    assert [(i.name, i.type) for i in sess.get_inputs()] == [("x", "optional(tensor(float))")]
    assert [(o.name, o.type) for o in sess.get_outputs()] == [("empty", "optional(seq(tensor(float)))"),
                                                              ("has", "tensor(bool)")]
    empty, has = sess.run(None, {"x": None})
    assert empty is None and bool(has) is False
    empty, has = sess.run(None, {"x": np.ones(2, dtype=np.float32)})
    assert empty is None and bool(has) is True
