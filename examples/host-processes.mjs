// One quota for separate processes of one host, with no primary: three processes (think an
// API server, a worker and a cron job, started independently) each open the same named
// region with hostMemory('example-quota') and share one TokenBucket of 100 requests.
//
//   node examples/host-processes.mjs
//
// The parent starts three children; each tries 80 times on the key 'tenant-42'. Together
// they are granted exactly 100 (the bucket refills too slowly to matter here). Prints one
// line per process; the last line is JSON.
import { fork } from 'node:child_process';
import { TokenBucket } from 'atomic-limiter';
import { hostMemory, removeHostMemory } from 'atomic-limiter/host';

const REGION = `example-quota-${process.pid}`;
const options = { capacity: 100, refillPerSecond: 0.001, keys: 1024 };

if (process.argv[2] === 'child') {
  // Every process opens the region by name, with the same options: the first creates it.
  const limiter = new TokenBucket({ ...options, memory: hostMemory(process.argv[3]) });
  let granted = 0;
  for (let i = 0; i < 80; i++) if (limiter.tryAcquire('tenant-42')) granted++;
  process.send({ pid: process.pid, granted }, () => process.disconnect());
} else {
  const children = [1, 2, 3].map(() => fork(new URL(import.meta.url).pathname, ['child', REGION]));
  const results = await Promise.all(
    children.map((child) => new Promise((resolve) => child.once('message', resolve))),
  );
  for (const r of results) console.log(`process ${r.pid}: granted ${r.granted} of 80`);
  // The region outlives its processes (limits hold across restarts) until removed.
  removeHostMemory(REGION);
  const total = results.reduce((sum, r) => sum + r.granted, 0);
  console.log(JSON.stringify({ capacity: options.capacity, processes: results.length, total }));
}
