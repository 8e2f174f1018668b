#!/usr/bin/env python3
"""Seed corpora of the fuzz targets (scripts/fuzz.sh).

usage: make_seeds.py TARGET OUTDIR [--conformance DIR]

model       the conformance models (model.onnx)
gradient    conformance models whose inputs became initializers (their test values) and whose first
            float output feeds a ReduceSum loss, so GradientGraphBuilder has weights and a loss
structured  "OTFZ" containers: a conformance model and its test_data_set_0 inputs
npy, npz    arrays of every supported dtype and layout saved by numpy (npz stored and deflated)
csv         small tables: header, no header, quoting, CRLF, BOM, missing values
checkpoint  written by the fuzz_checkpoint binary itself (ONNXTRAIN_FUZZ_WRITE_SEEDS)
"""
import glob
import io
import os
import struct
import sys

import numpy as np


def conformance_cases(root):
    for model in sorted(glob.glob(os.path.join(root, "node", "*", "model.onnx")) +
                        glob.glob(os.path.join(root, "simple", "*", "model.onnx"))):
        case = os.path.dirname(model)
        inputs = sorted(glob.glob(os.path.join(case, "test_data_set_0", "input_*.pb")),
                        key=lambda p: int(p.rsplit("_", 1)[1].split(".")[0]))
        yield os.path.basename(case), model, inputs


def write(outdir, name, data):
    with open(os.path.join(outdir, name), "wb") as f:
        f.write(data)


def seeds_model(root, outdir):
    for name, model, _ in conformance_cases(root):
        write(outdir, name + ".onnx", open(model, "rb").read())


def seeds_structured(root, outdir):
    for name, model, inputs in conformance_cases(root):
        m = open(model, "rb").read()
        out = b"OTFZ" + struct.pack("<I", len(m)) + m
        for p in inputs:
            t = open(p, "rb").read()
            out += struct.pack("<I", len(t)) + t
        write(outdir, name + ".otfz", out)


def seeds_gradient(root, outdir):
    import onnx
    from onnx import helper, numpy_helper, TensorProto
    for name, model, inputs in conformance_cases(root):
        try:
            m = onnx.load(model)
        except Exception:
            continue
        g = m.graph
        values = {}
        for p in inputs:
            t = onnx.TensorProto()
            t.ParseFromString(open(p, "rb").read())
            values[t.name] = t
        floats = [o for o in g.output if o.type.HasField("tensor_type")
                  and o.type.tensor_type.elem_type in (TensorProto.FLOAT, TensorProto.DOUBLE)]
        if not floats:
            continue
        moved = False
        init_names = {i.name for i in g.initializer}
        for i, inp in enumerate(list(g.input)):
            t = values.get(inp.name)
            if t is None or inp.name in init_names or t.data_type not in (TensorProto.FLOAT, TensorProto.DOUBLE):
                continue
            t.name = inp.name
            g.initializer.append(t)
            moved = True
        if not moved:
            continue
        keep = [i for i in g.input if i.name not in {t.name for t in g.initializer}]
        del g.input[:]
        g.input.extend(keep)
        y = floats[0]
        g.node.append(helper.make_node("ReduceSum", [y.name], ["fuzz_loss"], keepdims=0))
        loss = helper.make_tensor_value_info("fuzz_loss", y.type.tensor_type.elem_type, [])
        outs = [loss] + list(g.output)
        del g.output[:]
        g.output.extend(outs)
        write(outdir, name + ".onnx", m.SerializeToString())


def seeds_npy(outdir):
    arrays = {
        "f32": np.arange(12, dtype=np.float32).reshape(3, 4),
        "f64": np.linspace(0, 1, 5),
        "f16": np.ones((2, 2), np.float16),
        "i8": np.array([-1, 2], np.int8), "u8": np.arange(6, dtype=np.uint8),
        "i16": np.array([1], np.int16), "u16": np.array([7], np.uint16),
        "i32": np.array([[1, 2]], np.int32), "u32": np.array([3], np.uint32),
        "i64": np.array([-5, 5], np.int64), "u64": np.array([9], np.uint64),
        "bool": np.array([True, False, True]),
        "scalar": np.float32(3.5), "empty": np.zeros((0, 3), np.float32),
        "fortran": np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
        "bigendian": np.arange(4, dtype=">f4"),
    }
    for k, a in arrays.items():
        b = io.BytesIO()
        np.save(b, a)
        write(outdir, k + ".npy", b.getvalue())
    b = io.BytesIO()
    np.lib.format.write_array(b, np.arange(3, dtype=np.float32), version=(2, 0))
    write(outdir, "v2.npy", b.getvalue())


def seeds_npz(outdir):
    a = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "y": np.array([1, 0, 1], np.int64),
         "b": np.array([True]), "e": np.zeros((0,), np.float64)}
    for k, save in (("stored", np.savez), ("deflated", np.savez_compressed)):
        b = io.BytesIO()
        save(b, **a)
        write(outdir, k + ".npz", b.getvalue())
        b = io.BytesIO()
        save(b, only=np.float32(1))
        write(outdir, k + "_one.npz", b.getvalue())


def seeds_csv(outdir):
    tables = {
        "header": "a,b,label\n1,2,0\n3.5,-4e3,1\n",
        "noheader": "1,2,3\n4,5,6\n",
        "quoted": '"x","y"\n"1","2"\n"3",4\n',
        "crlf_bom": "\ufeffa;b\r\n1;2\r\n",
        "blank": "\n\na\n1\n\n2\n",
        "nan": "a,b\nnan,inf\n-inf,1e308\n",
        "missing": "a,b,c\n1,,3\n",
        "tabs": "1\t2\n3\t4\n",
    }
    for k, t in tables.items():
        write(outdir, k + ".csv", t.encode("utf-8"))


def main():
    args = sys.argv[1:]
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "conformance", "onnx-1.12")
    if "--conformance" in args:
        i = args.index("--conformance")
        root = args[i + 1]
        del args[i:i + 2]
    target, outdir = args
    os.makedirs(outdir, exist_ok=True)
    if target in ("model",):
        seeds_model(root, outdir)
    elif target == "structured":
        seeds_structured(root, outdir)
    elif target == "gradient":
        seeds_gradient(root, outdir)
    elif target in ("npy", "npz", "csv"):
        {"npy": seeds_npy, "npz": seeds_npz, "csv": seeds_csv}[target](outdir)
    else:
        sys.exit(f"make_seeds.py: no seeds for target '{target}' (checkpoint seeds come from the binary)")
    print(f"[fuzz] {len(os.listdir(outdir))} seeds for {target} in {outdir}")


if __name__ == "__main__":
    main()
