import { afterAll, afterEach, expect, it } from 'vitest';
import { hostMemory, removeHostMemory } from '../../src/host/index.js';
import { FixedWindow, ManualClock } from '../../src/index.js';
import { killDeciders, regionName, startDecider } from '../helpers/host.js';

// Processes sharing a limiter in host memory (test/host/decide.mjs, from the built
// package: npm run build first). The clock is a ManualClock nobody advances.

const regions: string[] = [];
afterEach(() => killDeciders());
afterAll(() => {
  for (const name of regions) removeHostMemory(name);
});

it('a reconfigure() in one process applies to the next decision of every process sharing the region, and of one that opens it later with the options it was created with', async () => {
  const region = regionName('reconf');
  const clockRegion = regionName('reconf-clock');
  regions.push(region, clockRegion);
  const options = { limit: 2, windowMs: 60_000, keys: 64 };
  const clock = new ManualClock(0, { memory: hostMemory(clockRegion) });
  const limiter = new FixedWindow({ ...options, clock, memory: hostMemory(region) });
  const spec = { cls: 'FixedWindow', options, region, clockRegion, key: 'k', tries: 10 };
  const before = await startDecider(spec);
  limiter.reconfigure({ limit: 5 });
  const after = await startDecider(spec);
  expect(limiter.tryAcquire('k', 2)).toBe(true);
  expect((await before.go()).granted).toBe(3);
  limiter.reconfigure({ limit: 7 });
  expect((await after.go()).granted).toBe(2);
  expect(limiter.stats('k')).toMatchObject({ admitted: 7, available: 0 });
});
