#!/usr/bin/env node
// onnxruntime-node's side of bench/vs_onnxruntime.py: one measurement per process.
//   node bench/ort_node_runner.js JOB.json
// JOB: {model, inputs: [{name, file, dtype: "float32"|"int64", shape}], threads, warmup, min_iters,
//       max_iters, budget_s, cap_s, output_file}; input files are raw little-endian data. Timed runs
// stop after min_iters once budget_s is spent, or after 3 once cap_s is spent. The package is found
// through ONNXTRAIN_ORT_NODE (its folder), else .npm/node_modules/onnxruntime-node of the checkout
// (scripts/install_onnxruntime_node.sh). Writes the first output of the first run to output_file
// (raw float32) and prints one line "RESULT {json}": median_s, iters, load_s, output_shape, versions.
'use strict';
const fs = require('fs');
const path = require('path');

const job = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const pkg = process.env.ONNXTRAIN_ORT_NODE ||
    path.join(__dirname, '..', '.npm', 'node_modules', 'onnxruntime-node');
const ort = require(pkg);

function readInput(spec) {
  const buf = fs.readFileSync(spec.file);
  const bytes = new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength).slice();
  const data = spec.dtype === 'int64' ? new BigInt64Array(bytes.buffer) : new Float32Array(bytes.buffer);
  return new ort.Tensor(spec.dtype, data, spec.shape);
}

const now = () => Number(process.hrtime.bigint()) / 1e9;

async function main() {
  const t0 = now();
  const session = await ort.InferenceSession.create(job.model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: job.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const loadS = now() - t0;
  const feeds = {};
  for (const spec of job.inputs) feeds[spec.name] = readInput(spec);

  // The first run (also the first warm-up) gives the output compared with onnxtrain's.
  const first = await session.run(feeds);
  const out = first[session.outputNames[0]];
  if (out.type !== 'float32') throw new Error(`first output is ${out.type}, not float32`);
  fs.writeFileSync(job.output_file, Buffer.from(out.data.buffer, out.data.byteOffset, out.data.byteLength));
  for (let i = 1; i < job.warmup; i++) await session.run(feeds);

  const times = [];
  const start = now();
  while (times.length < job.max_iters) {
    const t = now();
    await session.run(feeds);
    times.push(now() - t);
    const spent = now() - start;
    if ((times.length >= job.min_iters && spent > job.budget_s) || (times.length >= 3 && spent > job.cap_s)) break;
  }
  times.sort((a, b) => a - b);
  const m = times.length >> 1;
  const median = times.length % 2 ? times[m] : (times[m - 1] + times[m]) / 2;
  const version = JSON.parse(fs.readFileSync(path.join(pkg, 'package.json'), 'utf8')).version;
  console.log('RESULT ' + JSON.stringify({
    median_s: median, iters: times.length, load_s: loadS, output_shape: Array.from(out.dims),
    versions: {'onnxruntime-node': version, node: process.version},
  }));
}

main().catch((e) => {
  console.error(String(e && e.stack || e));
  process.exit(1);
});
