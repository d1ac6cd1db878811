import { expect, it } from 'vitest';
import { ManualClock, WarmingBucket } from '../../src/index.js';
import { GuavaWarmingUp } from '../helpers/guava.js';
import { seededRandom } from '../helpers/random.mjs';
import { startWorkers, waitForCount } from '../helpers/threads.js';

// Needs dist/ (npm run build): workers import the built package.
const THREADS = 4;

it('threads sharing a WarmingBucket never admit more than Guava would for one caller', async () => {
  const clock = new ManualClock(0);
  const limiter = new WarmingBucket({ ratePerSecond: 100, warmupMs: 2000, clock });
  const guava = new GuavaWarmingUp(100, 2000);
  const steps = 1500;
  const calls = 3;
  const ctl = new Int32Array(new SharedArrayBuffer(8));
  const group = startWorkers<number>('threads:warming-steps', THREADS, {
    limiter: limiter.handle,
    ctl: ctl.buffer,
    steps,
    calls,
  });
  let expected = 0;
  const random = seededRandom(12345);
  for (let step = 1; step <= steps; step++) {
    // Steps of 0 to 25 ms (whole µs), and now and then an idle gap that cools it down.
    const us = step % 300 === 0 ? 1_500_000 : Math.floor(random() * 25_000);
    clock.advance(us / 1000);
    // The one caller Guava knows tries THREADS × calls times at this instant too.
    for (let i = 0; i < THREADS * calls; i++) if (guava.tryAcquire(1, clock.nowUs())) expected++;
    Atomics.store(ctl, 0, step);
    Atomics.notify(ctl, 0);
    await waitForCount(ctl, 1, step * THREADS);
  }
  const counts = await group.results;
  await group.terminate();
  const total = counts.reduce((a, b) => a + b, 0);
  expect(total).toBeLessThanOrEqual(expected);
  // Every step's first caller decides as Guava's would (the state is one word): no fewer.
  expect(total).toBe(expected);
  expect(limiter.stats('k').admitted).toBe(total);
  expect(limiter.stats('k').rejected).toBe(steps * THREADS * calls - total);
});
