// A worker that waits on limiters when told to, for the wait-queue tests. The main thread
// sends it commands (attach, acquire, abort, release, call); it answers each with a message,
// and records in the shared `events` buffer (see test/workers/lib.mjs, `logOutcome`):
// - how many acquire() calls it has made (after acquire() returns, the waiter is queued),
// - each settled acquire, in the global order in which they settled across all agents.
import { parentPort, workerData } from 'node:worker_threads';
import { attach, LimiterClosedError, QueueFullError } from '../../dist/index.js';
import { EV_ENQUEUED, logOutcome, OUTCOME, outcomeOf } from './lib.mjs';

const events = new Int32Array(workerData.events);
const limiters = new Map();
const controllers = new Map();
const leases = new Map();

function describe(error) {
  return {
    name: error?.name,
    code: error?.code,
    message: String(error?.message ?? error),
    isDomException: error instanceof DOMException,
    isClosedError: error instanceof LimiterClosedError,
    isQueueFullError: error instanceof QueueFullError,
  };
}

function acquire({ id, limiter, key, permits = 1, timeoutMs, abortable, hold }) {
  const options = {};
  if (abortable) {
    const controller = new AbortController();
    controllers.set(id, controller);
    options.signal = controller.signal;
  }
  if (timeoutMs !== undefined) options.timeoutMs = timeoutMs;
  const started = performance.now();
  const pending = limiters.get(limiter).acquire(key, permits, options);
  // acquire() queues the waiter before it returns: the main thread may rely on it now.
  Atomics.add(events, EV_ENQUEUED, 1);
  Atomics.notify(events, EV_ENQUEUED);
  pending.then(
    (lease) => {
      logOutcome(events, id, OUTCOME.granted);
      if (hold) leases.set(id, lease);
      else lease.release();
      const waitedMs = performance.now() - started;
      parentPort.postMessage({ type: 'settled', id, outcome: 'granted', waitedMs });
    },
    (error) => {
      const outcome = outcomeOf(error);
      logOutcome(events, id, OUTCOME[outcome]);
      const waitedMs = performance.now() - started;
      parentPort.postMessage({ type: 'settled', id, outcome, waitedMs, error: describe(error) });
    },
  );
}

parentPort.on('message', (command) => {
  switch (command.op) {
    case 'attach':
      limiters.set(command.name, attach(command.handle));
      parentPort.postMessage({ type: 'done', seq: command.seq });
      return;
    case 'acquire':
      acquire(command);
      return;
    case 'abort':
      controllers.get(command.id).abort();
      parentPort.postMessage({ type: 'done', seq: command.seq });
      return;
    case 'release':
      leases.get(command.id).release();
      leases.delete(command.id);
      parentPort.postMessage({ type: 'done', seq: command.seq });
      return;
    case 'call': {
      // A synchronous method (tryAcquire, consume, release, stats…): its value or its error.
      const limiter = limiters.get(command.limiter);
      try {
        const value =
          command.method === 'closed' ? limiter.closed : limiter[command.method](...command.args);
        parentPort.postMessage({ type: 'done', seq: command.seq, value });
      } catch (error) {
        parentPort.postMessage({ type: 'done', seq: command.seq, error: describe(error) });
      }
      return;
    }
    case 'acquire-settled': {
      // acquire() whose outcome is wanted as the answer (for calls on a closed limiter).
      limiters
        .get(command.limiter)
        .acquire(command.key)
        .then(
          () => parentPort.postMessage({ type: 'done', seq: command.seq, value: 'granted' }),
          (error) =>
            parentPort.postMessage({ type: 'done', seq: command.seq, error: describe(error) }),
        );
      return;
    }
    default:
      throw new Error(`queue-agent: unknown command ${JSON.stringify(command)}`);
  }
});
