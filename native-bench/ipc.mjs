// Group e: message round trips. MessagePort (worker echo) and the child-process IPC channel
// that node:cluster uses (child_process.fork + process.send, echo in ipc-child.mjs).
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import { figure, isMain, runStandalone, sizes, summarize } from './lib.mjs';

const WORKER = new URL('./worker.mjs', import.meta.url);
const CHILD = new URL('./ipc-child.mjs', import.meta.url);

/** Sends `samples` messages one at a time through `send`, awaiting each echo. */
async function roundTrips(emitter, send, samples) {
  let resolve = null;
  const onMessage = (m) => resolve?.(m);
  emitter.on('message', onMessage);
  const rt = new Float64Array(samples);
  const warm = Math.min(500, samples);
  for (let i = -warm; i < samples; i++) {
    const reply = new Promise((r) => {
      resolve = r;
    });
    const t0 = process.hrtime.bigint();
    send({ seq: i });
    const m = await reply;
    const t1 = process.hrtime.bigint();
    if (m.seq !== i) throw new Error(`ipc: echo out of order (${m.seq} != ${i})`);
    if (i >= 0) rt[i] = Number(t1 - t0);
  }
  emitter.off('message', onMessage);
  return summarize(rt);
}

export async function run({ quick = false, reporter }) {
  const { samples } = sizes(quick);

  const worker = new Worker(WORKER, { workerData: { role: 'echo' } });
  const wExit = once(worker, 'exit');
  await once(worker, 'online');
  const a = await roundTrips(worker, (m) => worker.postMessage(m), samples);
  worker.postMessage('exit');
  await wExit;
  reporter.add(
    'ipc.roundtrip.messageport',
    figure(a.median, { p99Ns: a.p99, note: `worker echo, ${samples} round trips` }),
  );

  const child = fork(CHILD, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const cExit = once(child, 'exit');
  await once(child, 'message'); // 'ready'
  const b = await roundTrips(child, (m) => child.send(m), samples);
  child.disconnect();
  await cExit;
  reporter.add(
    'ipc.roundtrip.process-send',
    figure(b.median, {
      p99Ns: b.p99,
      note: 'child_process.fork echo (the channel node:cluster uses), JSON serialization',
    }),
  );
}

if (isMain(import.meta.url)) await runStandalone('ipc', run);
