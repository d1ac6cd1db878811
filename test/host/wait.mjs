// A process that waits on a limiter in host memory, driven line by line on stdin:
//   acquire <timeoutMs|-> : acquire('k'); prints "acquired" or "rejected <name>"
//   release               : releases the last lease; prints "released"
// argv[2]: JSON { cls, options, region, clockRegion? }. Prints "ready" once open.
import { createInterface } from 'node:readline';
import { hostMemory } from '../../dist/host.js';
import { Concurrency, ManualClock, TokenBucket } from '../../dist/index.js';

const spec = JSON.parse(process.argv[2]);
const clock =
  spec.clockRegion !== undefined
    ? new ManualClock(0, { memory: hostMemory(spec.clockRegion) })
    : undefined;
const Cls = { Concurrency, TokenBucket }[spec.cls];
const limiter = new Cls({
  ...spec.options,
  ...(clock ? { clock } : {}),
  memory: hostMemory(spec.region),
});
const leases = [];
const say = (line) => process.stdout.write(`${line}\n`);

createInterface({ input: process.stdin }).on('line', (line) => {
  const [cmd, arg] = line.split(' ');
  if (cmd === 'acquire') {
    const options = arg === '-' ? {} : { timeoutMs: Number(arg) };
    limiter.acquire('k', 1, options).then(
      (lease) => {
        leases.push(lease);
        say('acquired');
      },
      (error) => say(`rejected ${error.name}`),
    );
  } else if (cmd === 'release') {
    leases.shift()?.release();
    say('released');
  }
});
say('ready');
