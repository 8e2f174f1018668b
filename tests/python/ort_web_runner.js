// Runs onnxruntime-web 1.19.2's on-device training API (WebAssembly, under Node 20) on a job given
// as JSON (argv[2]) and prints the results as JSON: the reference onnxtrain's on-device training is
// compared with (tests/python/test_ort_checkpoint.py). The package is found at
// $ONNXTRAIN_ORT_WEB (its folder), installed by scripts/install_onnxruntime_web.sh.
//
// Job: {checkpoint, train_model, optimizer_model?, parameters_buffer?: [floats] (loaded into every
//      parameter before anything else: completes a nominal checkpoint),
//      steps: [{feeds: {name: {dims, data}}, optimizer: bool}]}
// Prints: {parameters_before: [...], parameters_trainable_before: [...], losses: [...], parameters_after: [...]}
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require(path.join(process.env.ONNXTRAIN_ORT_WEB, 'dist', 'ort.training.wasm.js'));
ort.env.wasm.numThreads = 1;

async function main() {
  const job = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const bytes = (p) => new Uint8Array(fs.readFileSync(p));
  const options = {checkpointState: bytes(job.checkpoint), trainModel: bytes(job.train_model)};
  if (job.optimizer_model) options.optimizerModel = bytes(job.optimizer_model);
  const session = await ort.TrainingSession.create(options);
  if (job.parameters_buffer) {
    const values = Float32Array.from(job.parameters_buffer);
    await session.loadParametersBuffer(new Uint8Array(values.buffer), false);
  }
  const out = {
    training_inputs: session.trainingInputNames,
    training_outputs: session.trainingOutputNames,
    parameters_size: await session.getParametersSize(false),
    parameters_before: Array.from((await session.getContiguousParameters(false)).data),
    parameters_trainable_before: Array.from((await session.getContiguousParameters(true)).data),
    losses: [],
  };
  for (const step of job.steps || []) {
    const feeds = {};
    for (const [name, t] of Object.entries(step.feeds)) {
      const data = t.type === 'int64' ? BigInt64Array.from(t.data.map(BigInt))
                 : t.type === 'int32' ? Int32Array.from(t.data) : Float32Array.from(t.data);
      feeds[name] = new ort.Tensor(t.type || 'float32', data, t.dims);
    }
    const result = await session.runTrainStep(feeds);
    out.losses.push(Number(result[session.trainingOutputNames[0]].data[0]));
    if (step.optimizer) {
      await session.runOptimizerStep();
      await session.lazyResetGrad();
    }
  }
  out.parameters_after = Array.from((await session.getContiguousParameters(false)).data);
  await session.release();
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
