// A worker thread of fleet-child.mjs: opens the process's limiter with its own client.
import { parentPort, workerData } from 'node:worker_threads';
import { Redis } from 'ioredis';
import { attach } from '../../dist/redis.js';

const { handle, port, mode, attempts } = workerData;
const redis = new Redis(port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
const limiter = attach(handle, { redis });
let admitted = 0;
if (mode === 'hold') {
  if (await limiter.tryAcquire('hot')) admitted++;
} else {
  // Several calls in flight at once, as a server would have.
  for (let i = 0; i < attempts; i += 10) {
    const batch = await Promise.all(Array.from({ length: 10 }, () => limiter.tryAcquire('hot')));
    admitted += batch.filter(Boolean).length;
  }
}
await limiter.close();
redis.disconnect();
parentPort.postMessage(admitted);
