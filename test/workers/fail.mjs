// Misbehaving workers for the helper's own tests: workerData.mode picks how to fail.
// Only worker 0 misbehaves; the others wait at the barrier (forever, since worker 0 never
// arrives) so the helper must terminate them.
import { parentPort, workerData } from 'node:worker_threads';
import { arrive } from './lib.mjs';

if (workerData.index === 0) {
  if (workerData.mode === 'throw') throw new Error('worker 0 failed on purpose');
  if (workerData.mode === 'exit') process.exit(3);
  if (workerData.mode === 'silent') process.exit(0);
} else {
  arrive();
  parentPort.postMessage('unreachable');
}
