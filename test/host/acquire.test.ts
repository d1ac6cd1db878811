import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { hostMemory, removeHostMemory } from '../../src/host/index.js';
import { parkedWaits } from '../../src/host/waits.js';
import { Concurrency, ManualClock, TokenBucket } from '../../src/index.js';
import { regionName } from '../helpers/host.js';

// acquire() on host memory: waiters of several processes in one FIFO queue, woken by a
// release, a refund or time moving in another process (test/host/wait.mjs).

const WAIT = new URL('../fixtures/host/wait.mjs', import.meta.url).pathname;
const DUAL = new URL('../fixtures/host/dual.mjs', import.meta.url).pathname;
const regions: string[] = [];
const children = new Set<ChildProcess>();
function region(what: string): string {
  const name = regionName(what);
  regions.push(name);
  return name;
}
afterEach(() => {
  for (const child of children) child.kill('SIGKILL');
  children.clear();
});
afterAll(() => {
  for (const name of regions) removeHostMemory(name);
});

interface Waiter {
  send(line: string): void;
  /** The next line it prints. */
  next(): Promise<string>;
}

async function waiter(spec: object): Promise<Waiter> {
  const child = spawn(process.execPath, [WAIT, JSON.stringify(spec)], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  children.add(child);
  const lines: string[] = [];
  const readers: ((line: string) => void)[] = [];
  createInterface({ input: child.stdout! }).on('line', (line) => {
    const reader = readers.shift();
    if (reader) reader(line);
    else lines.push(line);
  });
  const w: Waiter = {
    send: (line) => child.stdin!.write(`${line}\n`),
    next: () =>
      lines.length > 0
        ? Promise.resolve(lines.shift()!)
        : new Promise((resolve) => readers.push(resolve)),
  };
  expect(await w.next()).toBe('ready');
  return w;
}

const tick = () => new Promise((r) => setTimeout(r, 10));
async function until(f: () => boolean): Promise<void> {
  while (!f()) await tick();
}

describe('acquire() across processes on host memory', () => {
  it('waiters of three processes are served in the order they queued, each woken by a release elsewhere', async () => {
    const name = region('fifo');
    const options = { limit: 1, keys: 16, queueLimit: 10 };
    const here = new Concurrency({ ...options, memory: hostMemory(name) });
    expect(here.tryAcquire('k')).toBe(true);
    const spec = { cls: 'Concurrency', options, region: name };
    const [a, b, c] = await Promise.all([waiter(spec), waiter(spec), waiter(spec)]);
    let queued = 0;
    for (const w of [a!, b!, c!]) {
      w.send('acquire -');
      queued++;
      await until(() => here.stats('k').queued === queued);
    }
    const order: string[] = [];
    const served = (label: string, w: Waiter) =>
      w.next().then((line) => {
        order.push(`${label} ${line}`);
      });
    const aDone = served('a', a!);
    here.release('k'); // this process releases: a, in another process, is woken
    await aDone;
    const bDone = served('b', b!);
    a!.send('release');
    expect(await a!.next()).toBe('released');
    await bDone;
    const cDone = served('c', c!);
    b!.send('release');
    await cDone;
    expect(order).toEqual(['a acquired', 'b acquired', 'c acquired']);
    expect(here.stats('k').queued).toBe(0);
    expect(here.tryAcquire('k')).toBe(false); // c holds the permit
  });

  it('a waiter in another process times out, and leaves the queue', async () => {
    const name = region('timeout');
    const options = { limit: 1, keys: 16, queueLimit: 10 };
    const here = new Concurrency({ ...options, memory: hostMemory(name) });
    expect(here.tryAcquire('k')).toBe(true);
    const w = await waiter({ cls: 'Concurrency', options, region: name });
    w.send('acquire 100');
    expect(await w.next()).toBe('rejected TimeoutError');
    expect(here.stats('k').queued).toBe(0);
  });

  it('a waiter in another process is woken when time moves on a shared ManualClock', async () => {
    const name = region('time');
    const clockName = region('time-clock');
    const clock = new ManualClock(0, { memory: hostMemory(clockName) });
    const options = { capacity: 1, refillPerSecond: 1, keys: 16, queueLimit: 10 };
    const here = new TokenBucket({ ...options, clock, memory: hostMemory(name) });
    expect(here.tryAcquire('k')).toBe(true);
    const w = await waiter({ cls: 'TokenBucket', options, region: name, clockRegion: clockName });
    w.send('acquire -');
    await until(() => here.stats('k').queued === 1);
    const line = w.next();
    clock.advance(1000); // one token: the waiter in the other process takes it
    expect(await line).toBe('acquired');
    expect(here.tryAcquire('k')).toBe(false);
  });

  it('a waiter here is woken by a release in another process', async () => {
    const name = region('here');
    const options = { limit: 1, keys: 16, queueLimit: 10 };
    const here = new Concurrency({ ...options, memory: hostMemory(name) });
    const holder = await waiter({ cls: 'Concurrency', options, region: name });
    holder.send('acquire -');
    expect(await holder.next()).toBe('acquired');
    const lease = here.acquire('k');
    await until(() => here.stats('k').queued === 1);
    holder.send('release');
    await lease; // settles only if the other process's release woke this one
    expect(here.stats('k').queued).toBe(0);
  });

  it('close() in one process rejects the waiters of every process, and a process that opens the region later finds it closed', async () => {
    const name = region('close');
    const options = { limit: 1, keys: 16, queueLimit: 10 };
    const here = new Concurrency({ ...options, memory: hostMemory(name) });
    expect(here.tryAcquire('k')).toBe(true);
    const spec = { cls: 'Concurrency', options, region: name };
    const [a, b] = await Promise.all([waiter(spec), waiter(spec)]);
    a!.send('acquire -');
    b!.send('acquire 60000');
    await until(() => here.stats('k').queued === 2);
    const mine = here.acquire('k').catch((e: Error) => e.name);
    here.close();
    expect(await mine).toBe('LimiterClosedError');
    expect([await a!.next(), await b!.next()]).toEqual([
      'rejected LimiterClosedError',
      'rejected LimiterClosedError',
    ]);
    const later = await waiter(spec);
    later.send('acquire -');
    expect(await later.next()).toBe('rejected LimiterClosedError');
  });

  it('a waiter process SIGKILLed at the head of the queue holds up nobody: the next decision here finds it dead', async () => {
    const name = region('dead-waiter');
    const options = { limit: 1, keys: 16, queueLimit: 10 };
    const here = new Concurrency({ ...options, memory: hostMemory(name) });
    expect(here.tryAcquire('k')).toBe(true);
    const w = await waiter({ cls: 'Concurrency', options, region: name });
    w.send('acquire -');
    await until(() => here.stats('k').queued === 1);
    const child = [...children][0]!;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
    here.release('k');
    // Its waiter is still first in line; the process behind it is gone, so this decision
    // removes it rather than wait behind it for its heartbeat to go silent.
    expect(here.tryAcquire('k')).toBe(true);
    expect(here.stats('k')).toMatchObject({ available: 0, queued: 0 });
  });

  it('an ESM and a CommonJS copy of the package in one process both have their waiters woken by another process', async () => {
    const name = region('dual');
    const here = new Concurrency({ limit: 1, keys: 16, queueLimit: 10, memory: hostMemory(name) });
    const child = spawn(process.execPath, [DUAL, name], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.add(child);
    const lines: string[] = [];
    createInterface({ input: child.stdout! }).on('line', (line) => lines.push(line));
    await until(() => lines.includes('waiting') && here.stats('k').queued === 2);
    here.release('k'); // the ESM copy's waiter, first in line, takes it
    await until(() => lines.length === 2);
    here.release('k'); // then the CommonJS copy's, woken from this process
    await until(() => lines.length === 3);
    expect(lines).toEqual(['waiting', 'esm granted', 'cjs granted']);
  });

  it('waiters that leave on their own (abort, timeout) end their waits across processes too: none stays parked', async () => {
    const here = new Concurrency({
      limit: 1,
      keys: 16,
      queueLimit: 1000,
      memory: hostMemory(region('left')),
    });
    expect(here.tryAcquire('k')).toBe(true);
    const before = parkedWaits();
    const head = here.acquire('k'); // stays at the head: the others leave from behind it
    const controllers = Array.from({ length: 150 }, () => new AbortController());
    const aborted = controllers.map((c) => here.acquire('k', 1, { signal: c.signal }));
    const timedOut = Array.from({ length: 50 }, () => here.acquire('k', 1, { timeoutMs: 20 }));
    await until(() => here.stats('k').queued === 201);
    for (const c of controllers) c.abort();
    const names = await Promise.all(
      [...aborted, ...timedOut].map((p) => p.catch((e: Error) => e.name)),
    );
    expect(names.filter((n) => n === 'AbortError')).toHaveLength(150);
    expect(names.filter((n) => n === 'TimeoutError')).toHaveLength(50);
    // Each left wait is settled by the addon's thread (a thread-safe call): a few turns.
    for (let i = 0; i < 50 && parkedWaits() > before + 1; i++) await tick();
    expect(parkedWaits()).toBe(before + 1); // the head's own
    here.release('k');
    await head;
    for (let i = 0; i < 50 && parkedWaits() > before; i++) await tick();
    expect(parkedWaits()).toBe(before);
  });
});
