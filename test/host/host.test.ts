import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { hostMemory, removeHostMemory } from '../../src/host/index.js';
import {
  type AnyLimiter,
  Concurrency,
  chain,
  FixedWindow,
  LeakyBucket,
  ManualClock,
  SlidingLog,
  SlidingWindow,
  TokenBucket,
  WarmingBucket,
} from '../../src/index.js';
import { killDeciders, regionName, startDecider } from '../helpers/host.js';

// Limiters of every class in host memory, decided on by several real processes at once
// (test/host/decide.mjs, from the built package: npm run build first). Time is a
// ManualClock in a region of its own that nobody advances, so the counts are exact.

const regions: string[] = [];
function region(what: string): string {
  const name = regionName(what);
  regions.push(name);
  return name;
}

afterEach(() => killDeciders());
afterAll(() => {
  for (const name of regions) removeHostMemory(name);
});

const LIMIT = 300;
const CASES: { cls: string; options: Record<string, unknown> }[] = [
  { cls: 'TokenBucket', options: { capacity: LIMIT, refillPerSecond: 1, keys: 64 } },
  { cls: 'LeakyBucket', options: { capacity: LIMIT, ratePerSecond: 1, keys: 64 } },
  { cls: 'FixedWindow', options: { limit: LIMIT, windowMs: 60_000, keys: 64 } },
  { cls: 'SlidingWindow', options: { limit: LIMIT, windowMs: 60_000, keys: 64 } },
  {
    cls: 'SlidingWindow',
    options: { limit: LIMIT, windowMs: 60_000, segments: 10, keys: 64 },
  },
  { cls: 'SlidingLog', options: { limit: LIMIT, windowMs: 60_000, keys: 64 } },
  { cls: 'Concurrency', options: { limit: LIMIT, keys: 64 } },
  { cls: 'WarmingBucket', options: { ratePerSecond: LIMIT, warmupMs: 10_000, keys: 64 } },
];

const CLASSES = {
  TokenBucket,
  LeakyBucket,
  FixedWindow,
  SlidingWindow,
  SlidingLog,
  Concurrency,
  WarmingBucket,
} as unknown as Record<string, new (o: object) => AnyLimiter>;

describe('a limiter in host memory', () => {
  for (const { cls, options } of CASES) {
    const label = `${cls}${options.segments ? ' (segments)' : ''}`;
    it(`${label}: three processes and this one admit what one process would, exactly`, async () => {
      // What the same limiter admits in one process on a frozen clock (a LeakyBucket: one).
      const reference = new CLASSES[cls]!({ ...options, clock: new ManualClock() });
      let admits = 0;
      for (let i = 0; i < 3200; i++) if (reference.tryAcquire('k')) admits++;
      expect(admits).toBeGreaterThan(0);
      const name = region(cls.toLowerCase());
      const clockName = region('clock');
      // This process creates the region; the children attach to it.
      const clock = new ManualClock(0, { memory: hostMemory(clockName) });
      const here = new CLASSES[cls]!({ ...options, clock, memory: hostMemory(name) });
      const spec = { cls, options, region: name, clockRegion: clockName, key: 'k', tries: 1000 };
      const deciders = await Promise.all(
        [1, 2, 3].map(() => startDecider({ ...spec, hold: true })),
      );
      const counts = await Promise.all(deciders.map((d) => d.go()));
      let mine = 0;
      for (let i = 0; i < 200; i++) if (here.tryAcquire('k')) mine++;
      const total = counts.reduce((sum, c) => sum + c.granted, 0) + mine;
      expect(total).toBe(admits);
      const stats = here.stats('k');
      expect(stats.admitted).toBe(admits);
      expect(stats.rejected).toBe(3 * 1000 + 200 - admits);
      expect(here.tableStats().inserts).toBe(1);
    });
  }

  it('a ManualClock in host memory moves for every process: time advanced here refills there', async () => {
    const name = region('refill');
    const clockName = region('clock');
    const clock = new ManualClock(0, { memory: hostMemory(clockName) });
    const options = { capacity: 10, refillPerSecond: 10, keys: 8 };
    const bucket = new TokenBucket({ ...options, clock, memory: hostMemory(name) });
    const spec = { cls: 'TokenBucket', options, region: name, clockRegion: clockName, key: 'k' };
    const first = await startDecider({ ...spec, tries: 50 });
    expect((await first.go()).granted).toBe(10);
    clock.advance(500); // five tokens, seen by the next process
    const second = await startDecider({ ...spec, tries: 50 });
    expect((await second.go()).granted).toBe(5);
    expect(bucket.tryAcquire('k')).toBe(false);
  });

  it('a region outlives its processes: limits hold across a restart with nobody attached between', async () => {
    const name = region('restart');
    const clockName = region('clock');
    const options = { capacity: 10, refillPerSecond: 1, keys: 8 };
    const spec = { cls: 'TokenBucket', options, region: name, clockRegion: clockName, key: 'k' };
    // Only the children open these regions, one after the other.
    const before = await startDecider({ ...spec, tries: 50 });
    const exited = new Promise((r) => before.child.once('exit', r));
    expect((await before.go()).granted).toBe(10);
    await exited;
    const after = await startDecider({ ...spec, tries: 50 });
    expect((await after.go()).granted).toBe(0);
  });

  it('chain() of two limiters in host memory takes from both, or from neither', () => {
    const a = new TokenBucket({
      capacity: 5,
      refillPerSecond: 1e-6,
      keys: 8,
      memory: hostMemory(region('chain-a')),
    });
    const b = new FixedWindow({
      limit: 3,
      windowMs: 60_000,
      keys: 8,
      memory: hostMemory(region('chain-b')),
    });
    const both = chain(a, b);
    let granted = 0;
    for (let i = 0; i < 10; i++) if (both.tryAcquire('k')) granted++;
    expect(granted).toBe(3);
    expect(a.stats('k').available).toBe(2); // the bucket's take was given back on b's refusals
  });

  it('a table that grows in one process is used by the others, to its ceiling', async () => {
    const name = region('grow');
    const clockName = region('clock');
    const clock = new ManualClock(0, { memory: hostMemory(clockName) });
    const options = { limit: 1, windowMs: 60_000, keys: 64, maxKeys: 4096 };
    const here = new FixedWindow({ ...options, clock, memory: hostMemory(name) });
    const before = here.byteLength;
    for (let k = 0; k < 2000; k++) expect(here.tryAcquire(`key-${k}`)).toBe(true);
    expect(here.tableStats().segments).toBeGreaterThan(1);
    expect(here.byteLength).toBeGreaterThan(before);
    // Another process sees every key, in the grown segments too: each one is spent.
    const spec = { cls: 'FixedWindow', options, region: name, clockRegion: clockName };
    const other = await startDecider({ ...spec, key: 'key-1999', tries: 5 });
    expect((await other.go()).granted).toBe(0);
    expect(here.stats('key-1999').rejected).toBe(5);
  });
});

describe('the host-mode example', () => {
  it('host-processes: three separate processes are granted the bucket capacity once in total', async () => {
    const { spawn } = await import('node:child_process');
    const out = await new Promise<string>((resolve, reject) => {
      const child = spawn(process.execPath, ['examples/host-processes.mjs'], {
        cwd: new URL('../..', import.meta.url).pathname,
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      let stdout = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.once('error', reject);
      child.once('close', () => resolve(stdout));
    });
    const summary = JSON.parse(out.trim().split('\n').pop()!);
    expect(summary).toEqual({ capacity: 100, processes: 3, total: 100 });
  });
});
