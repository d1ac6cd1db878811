// A worker thread that claims a key's fetch in fleet mode and then stops reading: it
// computes (blocks until the test lets it go) or exits at once.
import { parentPort, workerData } from 'node:worker_threads';
import { Redis } from 'ioredis';
import { attach } from '../../dist/redis.js';

const { handle, port, mode, release } = workerData;
const redis = new Redis(port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
await redis.ping();
const limiter = attach(handle, { redis });
// The block is empty: this call claims the key's fetch before it returns.
const decided = limiter.tryAcquire('hot').catch(() => false);
parentPort.postMessage('claimed');
if (mode === 'exit') process.exit(0);
// Computes: no timer, no reply is read, until the test says so.
Atomics.wait(new Int32Array(release), 0, 0);
await decided;
await limiter.close();
redis.disconnect();
