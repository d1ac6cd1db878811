import { Worker } from 'node:worker_threads';
import {
  type DataPoint,
  type Histogram,
  MeterProvider,
  MetricReader,
} from '@opentelemetry/sdk-metrics';
import { describe, expect, it } from 'vitest';
import {
  attach,
  FixedWindow,
  ManualClock,
  SlidingLog,
  TokenBucket,
  WarmingBucket,
} from '../../src/index.js';
import { observeLimiters } from '../../src/metrics/index.js';

/** A reader that collects when asked: what a Prometheus scrape or a periodic export does. */
class TestReader extends MetricReader {
  protected async onShutdown(): Promise<void> {}
  protected async onForceFlush(): Promise<void> {}
}

function setup() {
  const reader = new TestReader();
  const provider = new MeterProvider({ readers: [reader] });
  const meter = provider.getMeter('test');
  /** The data points of each instrument, as `name → [attributes, value][]`. */
  const collect = async () => {
    const { resourceMetrics, errors } = await reader.collect();
    expect(errors).toEqual([]);
    const out = new Map<string, [Record<string, unknown>, unknown][]>();
    for (const scope of resourceMetrics.scopeMetrics) {
      for (const m of scope.metrics) {
        out.set(
          m.descriptor.name,
          (m.dataPoints as DataPoint<unknown>[]).map((p) => [p.attributes, p.value]),
        );
      }
    }
    return out;
  };
  return { meter, collect };
}

function point(
  points: [Record<string, unknown>, unknown][] | undefined,
  attributes: Record<string, unknown>,
) {
  return points?.find(([a]) => JSON.stringify(a) === JSON.stringify(attributes))?.[1];
}

describe('atomic-limiter/metrics', () => {
  it('counts decisions over every thread sharing the limiter', async () => {
    const clock = new ManualClock(0);
    const limiter = new TokenBucket({ capacity: 50, refillPerSecond: 1, clock });
    const { meter, collect } = setup();
    observeLimiters(meter, { api: limiter });
    for (let i = 0; i < 30; i++) limiter.tryAcquire(`user:${i % 3}`);
    const worker = new Worker(
      `const { workerData, parentPort } = require('node:worker_threads');
       import(workerData.dist).then(({ attach }) => {
         const l = attach(workerData.handle);
         let n = 0;
         for (let i = 0; i < 100; i++) if (l.consume('user:' + (i % 4), 2).allowed) n++;
         parentPort.postMessage(n);
       });`,
      {
        eval: true,
        workerData: {
          handle: limiter.handle,
          dist: new URL('../../dist/index.js', import.meta.url).href,
        },
      },
    );
    const grantedThere = await new Promise<number>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    await worker.terminate();
    // Per key: 50 permits. user:0..2 took 10 each here, then 25 calls of 2 permits there.
    const admitted = 30 + grantedThere * 2;
    const m = await collect();
    const d = m.get('atomic_limiter.decisions');
    expect(point(d, { limiter: 'api', result: 'admitted' })).toBe(admitted);
    expect(point(d, { limiter: 'api', result: 'refused' })).toBe(30 + 200 - admitted);
    expect(point(m.get('atomic_limiter.keys'), { limiter: 'api', state: 'held' })).toBe(4);
    expect(point(m.get('atomic_limiter.keys'), { limiter: 'api', state: 'active' })).toBe(4);
    expect(
      point(m.get('atomic_limiter.keys'), { limiter: 'api', state: 'slots' }),
    ).toBeGreaterThanOrEqual(1024);
  });

  it('never counts back when a key is reset or its slot goes to another key', async () => {
    const clock = new ManualClock(0);
    const limiter = new FixedWindow({ limit: 3, windowMs: 1000, keys: 1, maxKeys: 1, clock });
    const { meter, collect } = setup();
    observeLimiters(meter, { w: limiter });
    const counts = async () => {
      const d = (await collect()).get('atomic_limiter.decisions');
      return [
        point(d, { limiter: 'w', result: 'admitted' }),
        point(d, { limiter: 'w', result: 'refused' }),
      ];
    };
    for (let i = 0; i < 5; i++) limiter.tryAcquire('a');
    expect(await counts()).toEqual([3, 2]);
    limiter.reset('a');
    expect(await counts()).toEqual([3, 2]);
    for (let i = 0; i < 4; i++) limiter.tryAcquire('a');
    // New keys take the slots of idle ones once their windows have passed.
    clock.advance(5000);
    let granted = 0;
    for (let i = 0; i < 40; i++) if (limiter.consume(`k${i}`).allowed) granted++;
    expect(limiter.tableStats().reclaims).toBeGreaterThan(0);
    expect(await counts()).toEqual([6 + granted, 3]);
  });

  it('reports permits waiting in acquire(), and how long each waiter waited', async () => {
    const clock = new ManualClock(0);
    const limiter = new SlidingLog({ limit: 2, windowMs: 1000, queueLimit: 10, clock });
    const { meter, collect } = setup();
    observeLimiters(meter, { log: limiter });
    limiter.tryAcquire('k', 2);
    const first = limiter.acquire('k', 1);
    const second = limiter.acquire('k', 1);
    const third = limiter.acquire('k', 1, { timeoutMs: 1 });
    await third.catch(() => {});
    expect(point((await collect()).get('atomic_limiter.queued'), { limiter: 'log' })).toBe(2);
    clock.advance(1000);
    await Promise.all([first, second]);
    const m = await collect();
    expect(point(m.get('atomic_limiter.queued'), { limiter: 'log' })).toBe(0);
    const h = m.get('atomic_limiter.wait.duration');
    const granted = point(h, { limiter: 'log', result: 'admitted' }) as Histogram;
    expect(granted.count).toBe(2);
    expect(granted.sum).toBe(2); // two waits of exactly 1 s on the ManualClock
    const refused = point(h, { limiter: 'log', result: 'refused' }) as Histogram;
    expect(refused.count).toBe(1);
    expect(refused.sum).toBe(0); // timed out in real time; the ManualClock had not moved
  });

  it('unregisters: no more callbacks, no more waits recorded', async () => {
    const clock = new ManualClock(0);
    const limiter = new WarmingBucket({ ratePerSecond: 100, warmupMs: 2000, clock, queueLimit: 5 });
    const { meter, collect } = setup();
    const stop = observeLimiters(meter, { warm: limiter });
    limiter.tryAcquire();
    const waited = limiter.acquire();
    clock.advance(29.9);
    await waited;
    let m = await collect();
    expect(point(m.get('atomic_limiter.decisions'), { limiter: 'warm', result: 'admitted' })).toBe(
      2,
    );
    const h = point(m.get('atomic_limiter.wait.duration'), {
      limiter: 'warm',
      result: 'admitted',
    }) as Histogram;
    expect(h.count).toBe(1);
    expect(h.sum).toBeCloseTo(0.0299, 9);
    stop();
    stop(); // twice is harmless
    clock.advance(100);
    limiter.tryAcquire();
    const again = limiter.acquire();
    clock.advance(30);
    await again;
    m = await collect();
    // No callback ran: the SDK may repeat the last value it had, never a new one.
    const d = m.get('atomic_limiter.decisions') ?? [];
    expect([2, undefined]).toContain(point(d, { limiter: 'warm', result: 'admitted' }));
    const after = point(m.get('atomic_limiter.wait.duration'), {
      limiter: 'warm',
      result: 'admitted',
    }) as Histogram;
    expect(after.count).toBe(1);
  });

  it('counts an attached copy and its original once, from either', async () => {
    const limiter = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock: new ManualClock() });
    const twin = attach(limiter.handle);
    const { meter, collect } = setup();
    observeLimiters(meter, { twin });
    for (let i = 0; i < 4; i++) limiter.tryAcquire('x', 2);
    const d = (await collect()).get('atomic_limiter.decisions');
    expect(point(d, { limiter: 'twin', result: 'admitted' })).toBe(4);
    expect(point(d, { limiter: 'twin', result: 'refused' })).toBe(4);
  });

  it('rejects what is not a meter or an in-memory limiter, naming it', () => {
    const { meter } = setup();
    expect(() => observeLimiters({} as never, {})).toThrow(TypeError);
    expect(() => observeLimiters(meter, { api: {} })).toThrow(/limiters\.api/);
    expect(() => observeLimiters(meter, [] as never)).toThrow(TypeError);
    expect(() => observeLimiters(meter, {}, { counters: 'yes' as never })).toThrow(/"counters"/);
  });
});
