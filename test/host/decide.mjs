// A process that opens a limiter on host memory and counts its grants: argv[2] is a JSON
// { cls, options, region, clockRegion?, key?, tries, permits?, hold? }. Reports
// { granted, pid } on stdout once done; waits for "go" on stdin first when `gate` is set.

import { hostMemory } from '../../dist/host.js';
import {
  Concurrency,
  FixedWindow,
  LeakyBucket,
  ManualClock,
  SlidingLog,
  SlidingWindow,
  TokenBucket,
  WarmingBucket,
} from '../../dist/index.js';

const spec = JSON.parse(process.argv[2]);
const clock =
  spec.clockRegion !== undefined
    ? new ManualClock(0, { memory: hostMemory(spec.clockRegion) })
    : undefined;
const classes = {
  TokenBucket,
  LeakyBucket,
  FixedWindow,
  SlidingWindow,
  SlidingLog,
  Concurrency,
  WarmingBucket,
};
const Cls = classes[spec.cls];
const limiter = new Cls({
  ...spec.options,
  ...(clock ? { clock } : {}),
  memory: hostMemory(spec.region),
});

function run() {
  let granted = 0;
  for (let i = 0; i < spec.tries; i++) {
    if (limiter.tryAcquire(spec.key, spec.permits ?? 1)) granted++;
  }
  process.stdout.write(`${JSON.stringify({ granted, pid: process.pid })}\n`);
  if (spec.hold) setInterval(() => {}, 1000);
  else process.exit(0);
}

if (spec.gate) {
  process.stdout.write('ready\n');
  process.stdin.once('data', run);
} else {
  run();
}
