import { spawnSync } from 'node:child_process';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { HOLDER_DEAD_MS } from '../../src/engine/queue.js';
import { hostMemory, removeHostMemory } from '../../src/host/index.js';
import { Concurrency } from '../../src/index.js';
import { killDeciders, regionName, startDecider } from '../helpers/host.js';

// Concurrency permits held by a process that dies come back by the process's liveness,
// well before its heartbeat would go silent (HOLDER_DEAD_MS); a live process keeps them.

const regions: string[] = [];
afterEach(() => killDeciders());
afterAll(() => {
  for (const name of regions) removeHostMemory(name);
});

const options = { limit: 5, keys: 16 };
const REUSE = new URL('../fixtures/host/pid-reuse.mjs', import.meta.url).pathname;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Tries every 50 ms until granted or `ms` pass; the time it took, or Infinity. */
async function grantedWithin(limiter: Concurrency, ms: number): Promise<number> {
  const start = Date.now();
  while (Date.now() - start < ms) {
    if (limiter.tryAcquire('k')) return Date.now() - start;
    await sleep(50);
  }
  return Number.POSITIVE_INFINITY;
}

describe('a process holding Concurrency permits on host memory', () => {
  it('that is SIGKILLed gives its permits back on the next refused decisions, not after its heartbeat', async () => {
    const name = regionName('dead');
    regions.push(name);
    const here = new Concurrency({ ...options, memory: hostMemory(name) });
    const holder = await startDecider({
      cls: 'Concurrency',
      options,
      region: name,
      key: 'k',
      tries: 5,
      hold: true,
    });
    expect((await holder.go()).granted).toBe(5);
    expect(here.tryAcquire('k')).toBe(false);
    const exited = new Promise((r) => holder.child.once('exit', r));
    holder.child.kill('SIGKILL');
    await exited;
    const took = await grantedWithin(here, HOLDER_DEAD_MS / 2);
    expect(took).toBeLessThan(HOLDER_DEAD_MS / 2);
    // All five came back, once: one taken above, four more, then the limit.
    let more = 0;
    while (here.tryAcquire('k')) more++;
    expect(more).toBe(4);
    expect(here.stats('k').available).toBe(0);
  }, 20_000);

  // A PID namespace of its own lets the test give the dead holder's id to a new process.
  const canUnshare =
    process.getuid?.() === 0 &&
    spawnSync('unshare', ['-p', '-f', '-m', '--mount-proc', 'true']).status === 0;

  it.skipIf(!canUnshare)(
    'that is SIGKILLed gives its permits back though a new process has its process id',
    () => {
      const r = spawnSync('unshare', ['-p', '-f', '-m', '--mount-proc', process.execPath, REUSE], {
        encoding: 'utf8',
      });
      expect(r.stderr).toBe('');
      const out = JSON.parse(r.stdout.trim().split('\n').pop()!);
      expect(out).toEqual({ granted: 2, reused: true, before: false, after: true });
    },
    20_000,
  );

  it('that is alive keeps its permits while others are refused', async () => {
    const name = regionName('alive');
    regions.push(name);
    const here = new Concurrency({ ...options, memory: hostMemory(name) });
    const holder = await startDecider({
      cls: 'Concurrency',
      options,
      region: name,
      key: 'k',
      tries: 5,
      hold: true,
    });
    expect((await holder.go()).granted).toBe(5);
    // Refused decisions reap every 250 ms: a dozen reaps find no dead holder.
    expect(await grantedWithin(here, 3000)).toBe(Number.POSITIVE_INFINITY);
    expect(here.stats('k').available).toBe(0);
  }, 20_000);
});
