#!/usr/bin/env node
// Runs one model with onnxruntime-node for the Python tests (tests/python/ort_node.py):
//   node ort_node_eval.js JOB.json
// JOB: {package, model, inputs: {name: {dtype: float32|float64|int64|int32|string, shape, data}}}.
// Prints one JSON line: {outputs: {name: {type, dims, data}}} (int64 as numbers), or {error}.
'use strict';
const fs = require('fs');

const ARRAYS = {float32: Float32Array, float64: Float64Array, int32: Int32Array};

async function main() {
  const job = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const ort = require(job.package);
  const result = {outputs: {}};
  try {
    const session = await ort.InferenceSession.create(job.model, {executionProviders: ['cpu']});
    const feeds = {};
    for (const [name, spec] of Object.entries(job.inputs)) {
      let data;
      if (spec.dtype === 'int64') data = BigInt64Array.from(spec.data.map((v) => BigInt(v)));
      else if (spec.dtype === 'string') data = spec.data;
      else data = ARRAYS[spec.dtype].from(spec.data.map((v) => (v === null ? NaN : v)));
      feeds[name] = new ort.Tensor(spec.dtype, data, spec.shape);
    }
    const out = await session.run(feeds);
    for (const [name, t] of Object.entries(out)) {
      const data = Array.from(t.data, (v) => (typeof v === 'bigint' ? Number(v) : (Number.isNaN(v) ? null : v)));
      result.outputs[name] = {type: t.type, dims: Array.from(t.dims), data};
    }
  } catch (e) {
    result.error = String(e && e.message ? e.message : e);
  }
  process.stdout.write(JSON.stringify(result) + '\n');
}

main();
