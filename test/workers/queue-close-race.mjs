// One waiter per round for the close()-versus-grant race (test/queue-threads.test.ts): for
// each message { round, handle, control } it attaches to that round's limiter, calls
// acquire('k'), sets control[0] = 1 (queued) and reports how the acquire settled. An error
// thrown where nobody can catch it (an unhandled rejection) is reported too, so the main
// thread can name it; the acquire() it came from would never settle.
import { parentPort } from 'node:worker_threads';
import { attach } from '../../dist/index.js';
import { outcomeOf } from './lib.mjs';

process.on('unhandledRejection', (error) => {
  parentPort.postMessage({ type: 'unhandled', error: String(error?.stack ?? error) });
});

parentPort.on('message', ({ round, handle, control }) => {
  const limiter = attach(handle);
  const pending = limiter.acquire('k');
  const queued = new Int32Array(control);
  Atomics.store(queued, 0, 1);
  Atomics.notify(queued, 0);
  pending.then(
    () => parentPort.postMessage({ type: 'settled', round, outcome: 'granted' }),
    (error) => parentPort.postMessage({ type: 'settled', round, outcome: outcomeOf(error) }),
  );
});
