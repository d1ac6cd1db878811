import { spawn, spawnSync } from 'node:child_process';
import { closeSync, openSync, statSync, writeSync } from 'node:fs';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { LAYOUT_VERSION } from '../../src/engine/layout.js';
import { hostMemory, removeHostMemory } from '../../src/host/index.js';
import { Concurrency, FixedWindow, ManualClock, TokenBucket } from '../../src/index.js';
import { DIST } from '../helpers/child.js';
import { killDeciders, regionName, startDecider } from '../helpers/host.js';

// What host mode refuses, and how it stays safe: names, sizes, regions of another class,
// options or version, corrupted headers, the file mode, and many processes creating one
// region at once.

const HOST_DIST = new URL('../../dist/host.js', import.meta.url).href;
const regions: string[] = [];
function region(what: string): string {
  const name = regionName(what);
  regions.push(name);
  return name;
}
const file = (name: string) => `/dev/shm/atomic-limiter.${name}`;
const FULL = new URL('../fixtures/host/full-shm.mjs', import.meta.url).pathname;
// A mount namespace of its own lets a test give a child a small /dev/shm.
const canUnshare = process.getuid?.() === 0 && spawnSync('unshare', ['-m', 'true']).status === 0;

afterEach(() => killDeciders());
afterAll(() => {
  for (const name of regions) removeHostMemory(name);
});

const bucket = { capacity: 10, refillPerSecond: 1, keys: 16 };

describe('host memory names and sizes', () => {
  it('refuses a name with "/", an empty one and one too long, naming the problem', () => {
    expect(() => hostMemory('a/b')).toThrow(TypeError);
    expect(() => hostMemory('a/b')).toThrow(/no "\/"/);
    expect(() => hostMemory('..')).toThrow(TypeError);
    expect(() => hostMemory('')).toThrow(RangeError);
    expect(() => hostMemory('x'.repeat(201))).toThrow(/1 to 200 characters, got 201/);
    expect(() => hostMemory(42 as unknown as string)).toThrow(/must be a string, got 42/);
    expect(() => removeHostMemory('a/b')).toThrow(TypeError);
  });

  it('refuses bad options of hostMemory() with the option named', () => {
    expect(() => hostMemory('ok', { maxBytes: 100 })).toThrow(/"maxBytes" must be an integer/);
    expect(() => hostMemory('ok', { mode: 0o400 })).toThrow(/"mode" must be a file mode/);
    expect(() => hostMemory('ok', { size: 1 } as object)).toThrow(/unknown option "size"/);
  });

  it('refuses a limiter whose table is past the region ceiling, and a "maxBytes" above it', () => {
    const memory = hostMemory(region('ceiling'), { maxBytes: 2 ** 16 });
    expect(() => new TokenBucket({ ...bucket, keys: 100_000, memory })).toThrow(RangeError);
    expect(() => new TokenBucket({ ...bucket, keys: 100_000, memory })).toThrow(/"maxBytes"/);
    expect(() => new TokenBucket({ ...bucket, maxBytes: 2 ** 20, memory })).toThrow(
      /option "maxBytes" \(1048576\) is past the host memory's ceiling \(its "maxBytes", 65536\)/,
    );
    expect(() => new TokenBucket({ ...bucket, memory: {} as never })).toThrow(
      /option "memory" must be a memory provider/,
    );
  });

  it('refuses a ManualClock that is not in host memory for a limiter that is', () => {
    expect(
      () =>
        new TokenBucket({ ...bucket, clock: new ManualClock(), memory: hostMemory(region('clk')) }),
    ).toThrow(/option "clock": a ManualClock read by a limiter on host memory must be on it too/);
  });
});

describe('attaching to an existing region', () => {
  it('refuses a region that holds another class, naming both', () => {
    const name = region('class');
    new TokenBucket({ ...bucket, memory: hostMemory(name) });
    expect(
      () => new FixedWindow({ limit: 10, windowMs: 1000, keys: 16, memory: hostMemory(name) }),
    ).toThrow(/holds a TokenBucket, not a FixedWindow/);
  });

  it("refuses a ManualClock's region to a limiter, and a limiter's to a ManualClock, naming both", () => {
    const clock = region('clock-of');
    const limiter = region('limiter-of');
    new ManualClock(0, { memory: hostMemory(clock) });
    new TokenBucket({ ...bucket, memory: hostMemory(limiter) });
    expect(() => new TokenBucket({ ...bucket, memory: hostMemory(clock) })).toThrow(
      /holds a ManualClock, not a TokenBucket/,
    );
    expect(() => new ManualClock(0, { memory: hostMemory(limiter) })).toThrow(
      /holds a TokenBucket, not a ManualClock/,
    );
  });

  it('refuses other options, naming the option and both values', () => {
    const name = region('options');
    new TokenBucket({ ...bucket, memory: hostMemory(name) });
    expect(() => new TokenBucket({ ...bucket, capacity: 50, memory: hostMemory(name) })).toThrow(
      /option "capacity" of the TokenBucket in the region is 10, here 50/,
    );
    expect(() => new TokenBucket({ ...bucket, keys: 32, memory: hostMemory(name) })).toThrow(
      /option "keys" of the TokenBucket in the region is 16, here 32/,
    );
    // The same options attach, and share the state.
    const a = new TokenBucket({ ...bucket, memory: hostMemory(name) });
    const b = new TokenBucket({ ...bucket, memory: hostMemory(name) });
    expect(a.tryAcquire('k', 10)).toBe(true);
    expect(b.tryAcquire('k')).toBe(false);
  });

  it('refuses a region made by a copy of another layout version', () => {
    const name = region('version');
    // Another copy of the engine creates the region with its own layout version.
    const other = hostMemory(name).open({
      owner: 'TokenBucket',
      layoutVersion: LAYOUT_VERSION + 1,
      options: {},
      parts: [{ bytes: 4096, maxBytes: 4096 }],
      init: () => {},
    });
    other.publish();
    expect(() => new TokenBucket({ ...bucket, memory: hostMemory(name) })).toThrow(
      new RegExp(`layout version ${LAYOUT_VERSION + 1}; this copy reads version ${LAYOUT_VERSION}`),
    );
  });

  it('detects a corrupted header instead of trusting it', () => {
    const name = region('corrupt');
    new TokenBucket({ ...bucket, memory: hostMemory(name) });
    // One byte of the recorded options changes (a stray write by another program).
    const fd = openSync(file(name), 'r+');
    writeSync(fd, Buffer.from('X'), 0, 1, 260);
    closeSync(fd);
    let caught: unknown;
    try {
      new TokenBucket({ ...bucket, memory: hostMemory(name) });
    } catch (error) {
      caught = error;
    }
    expect((caught as { code: string }).code).toBe('ERR_HOST_MEMORY_CORRUPTED');
    expect(String(caught)).toMatch(/header is corrupted \(its checksum does not match\)/);
  });

  it('refuses a file of that name that is not a region', () => {
    const name = region('foreign');
    new TokenBucket({ ...bucket, memory: hostMemory(name) });
    const fd = openSync(file(name), 'r+');
    writeSync(fd, Buffer.alloc(4096, 0x5a), 0, 4096, 0);
    closeSync(fd);
    expect(() => new TokenBucket({ ...bucket, memory: hostMemory(name) })).toThrow(
      /is not an atomic-limiter region \(magic 0x5a5a5a5a/,
    );
  });

  it('removeHostMemory() deletes a region: the next open creates it anew', () => {
    const name = region('remove');
    const a = new TokenBucket({ ...bucket, memory: hostMemory(name) });
    expect(a.tryAcquire('k', 10)).toBe(true);
    expect(removeHostMemory(name)).toBe(true);
    expect(removeHostMemory(name)).toBe(false);
    const b = new TokenBucket({ ...bucket, memory: hostMemory(name) });
    expect(b.tryAcquire('k', 10)).toBe(true);
    // The first instance keeps its own (now unnamed) region.
    expect(a.tryAcquire('k')).toBe(false);
  });
});

describe('many limiters in one process', () => {
  it('keeps any number of limiters of a region open at once: the 2000th decides, waits and is woken as the first', async () => {
    const name = region('many');
    const open = Array.from(
      { length: 2000 },
      () =>
        new Concurrency({
          limit: 1,
          keys: 16,
          queueLimit: 1,
          memory: hostMemory(name, { maxBytes: 2 ** 20 }),
        }),
    );
    const first = open[0]!;
    const last = open[1999]!;
    expect(first.tryAcquire('k')).toBe(true);
    expect(last.tryAcquire('k')).toBe(false);
    const lease = last.acquire('k');
    first.release('k');
    await lease;
    expect(first.stats('k')).toMatchObject({ available: 0, queued: 0 });
  });
});

describe('creation', () => {
  it('creates regions with mode 0600 whatever the umask, or the mode asked for', () => {
    const name = region('mode');
    const old = process.umask(0);
    try {
      new TokenBucket({ ...bucket, memory: hostMemory(name) });
      expect(statSync(file(name)).mode & 0o777).toBe(0o600);
      const group = region('mode660');
      new TokenBucket({ ...bucket, memory: hostMemory(group, { mode: 0o660 }) });
      expect(statSync(file(group)).mode & 0o777).toBe(0o660);
    } finally {
      process.umask(old);
    }
  });

  it('six processes opening one new region at once make one limiter: the limit holds', async () => {
    for (let round = 0; round < 3; round++) {
      const name = region('race');
      const clockName = region('race-clock');
      const spec = {
        cls: 'SlidingLog',
        options: { limit: 100, windowMs: 60_000, keys: 16 },
        region: name,
        clockRegion: clockName,
        key: 'k',
        tries: 200,
      };
      const deciders = await Promise.all([1, 2, 3, 4, 5, 6].map(() => startDecider(spec)));
      const counts = await Promise.all(deciders.map((d) => d.go()));
      expect(counts.reduce((sum, c) => sum + c.granted, 0)).toBe(100);
    }
  });

  it.skipIf(!canUnshare)(
    'a full /dev/shm when the table grows is an error from that decision, not a crash; decisions go on',
    () => {
      const r = spawnSync(
        'unshare',
        [
          '-m',
          'sh',
          '-c',
          `mount -t tmpfs -o size=2m tmpfs /dev/shm && exec "${process.execPath}" "${FULL}"`,
        ],
        { encoding: 'utf8' },
      );
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      const out = JSON.parse(r.stdout.trim().split('\n').pop()!);
      expect(out).toEqual({ code: 'ENOSPC', grew: true, known: false, attached: false });
    },
    30_000,
  );

  it('an error at creation, not a crash later, when the region cannot be allocated', async () => {
    // A file-size limit stands in for a full /dev/shm: both fail the region's allocation.
    const name = region('efbig');
    const script = `
      const { TokenBucket } = await import(${JSON.stringify(DIST)});
      const { hostMemory } = await import(${JSON.stringify(HOST_DIST)});
      try {
        new TokenBucket({ capacity: 1, refillPerSecond: 1, memory: hostMemory(${JSON.stringify(name)}) });
        console.log('created');
      } catch (error) {
        console.log(error.code + ' ' + error.message);
      }`;
    const out = await new Promise<string>((resolve) => {
      const child = spawn(
        'sh',
        ['-c', `ulimit -f 1024; exec "${process.execPath}" --input-type=module -e "$0"`, script],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      );
      let stdout = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.on('close', () => resolve(stdout));
    });
    expect(out).toMatch(/^EFBIG hostMemory\(".*"\): could not open or create the region/);
    expect(out).toMatch(/\/dev\/shm is full or too small/);
    expect(removeHostMemory(name)).toBe(false); // nothing half-made is left behind
  });
});
