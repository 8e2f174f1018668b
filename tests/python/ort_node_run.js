#!/usr/bin/env node
// Runs one ONNX model in onnxruntime-node for tests/python/test_opset18_21.py.
//   node ort_node_run.js JOB.json
// JOB: {model, inputs: [{name, file, dtype: "float32"|"float64"|"int64"|"int32"|"bool"|"(u)int8/16"|
//       "uint32"|"uint64", shape}],
//       out_dir}. Input files are raw little-endian data. Writes each output to out_dir/<k>.bin and
// prints one line "RESULT {json}": [{name, dtype, shape, file}]. The package is found through
// ONNXTRAIN_ORT_NODE (its folder).
'use strict';
const fs = require('fs');
const path = require('path');

const job = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const ort = require(process.env.ONNXTRAIN_ORT_NODE);

const arrays = {
  float32: Float32Array, float64: Float64Array, int64: BigInt64Array, int32: Int32Array, bool: Uint8Array,
  int8: Int8Array, uint8: Uint8Array, int16: Int16Array, uint16: Uint16Array, uint32: Uint32Array,
  uint64: BigUint64Array,
};

function readInput(spec) {
  const buf = fs.readFileSync(spec.file);
  const bytes = new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength).slice();
  return new ort.Tensor(spec.dtype, new arrays[spec.dtype](bytes.buffer), spec.shape);
}

async function main() {
  const session = await ort.InferenceSession.create(job.model, {executionProviders: ['cpu']});
  const feeds = {};
  for (const spec of job.inputs) feeds[spec.name] = readInput(spec);
  const outs = await session.run(feeds);
  const result = [];
  session.outputNames.forEach((name, k) => {
    const t = outs[name];
    const file = path.join(job.out_dir, `${k}.bin`);
    const d = t.data;
    fs.writeFileSync(file, Buffer.from(d.buffer, d.byteOffset, d.byteLength));
    result.push({name, dtype: t.type, shape: t.dims, file});
  });
  console.log('RESULT ' + JSON.stringify(result));
}

main().catch((e) => {
  console.error(String(e && e.stack || e));
  process.exit(1);
});
