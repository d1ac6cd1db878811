// Cluster scenarios about batch bounds and give-backs of calls nobody waits for. Like
// scenario.mjs: the primary prints its outcome as one JSON line, and the same file is the
// workers' script. Usage: node batches.mjs <scenario>
// DIST (optional) points at another build, to show a test failing on an older one.
import cluster from 'node:cluster';

const DIST = process.env.DIST ?? new URL('../../dist/', import.meta.url).pathname;
const { connectCluster, serveCluster } = await import(`${DIST}/cluster.js`);
const { Concurrency, FixedWindow, ManualClock, SlidingLog, TokenBucket } = await import(
  `${DIST}/index.js`
);

const scenario = process.argv[2] ?? process.env.SCENARIO;
const done = (w) => new Promise((r) => w.on('message', (m) => m?.done && r(m)));
const code = (e) => e?.code ?? e?.name ?? String(e);
const tally = (outcomes) => {
  const t = {};
  for (const o of outcomes) t[o] = (t[o] ?? 0) + 1;
  return t;
};

// Values per record, by op (protocol.ts): NAME, TRY, CONSUME, TAKE, REFUND, RELEASE, STATS,
// RESET, ACQUIRE, ABORT, DROP, GIVE.
const WIDTHS = [2, 3, 3, 4, 3, 3, 2, 2, 5, 2, 2, 4];
const ABORT = 9;
// A batch refused by the primary: what it answers for one of more than 24 576 values.
const REFUSAL = {
  name: 'TypeError',
  code: 'ERR_INVALID_ARG_TYPE',
  message: 'cluster primary: a batch must be an array of at most 24576 values, got 30000 values',
};

if (cluster.isPrimary) {
  cluster.setupPrimary({ exec: new URL(import.meta.url).pathname, args: [scenario] });
  if (scenario === 'acquires') {
    // 6000 acquire() calls in one tick (below maxPending), alternating between two names:
    // a NAME before each ACQUIRE, 7 values a call, 42 000 in all.
    const a = new TokenBucket({ capacity: 1_000_000, refillPerSecond: 1 });
    const b = new TokenBucket({ capacity: 1_000_000, refillPerSecond: 1 });
    serveCluster({ a, b });
    const w = cluster.fork();
    const r = await done(w);
    console.log(JSON.stringify({ ...r, admitted: [a.stats('k').admitted, b.stats('k').admitted] }));
    w.kill();
  } else if (scenario === 'drops') {
    // 13 000 leases released in one tick: 13 000 DROP records, 26 002 values.
    const sem = new Concurrency({ limit: 20_000 });
    serveCluster({ sem });
    const w = cluster.fork();
    const r = await done(w);
    console.log(JSON.stringify({ ...r, sem: sem.stats('k') }));
    w.kill();
  } else if (scenario === 'mixed') {
    // 4000 tryAcquire calls (below 4096) and 3000 lease releases in one tick, alternating
    // between two names: 32 000 values.
    const api = new TokenBucket({ capacity: 1_000_000, refillPerSecond: 1 });
    const sem = new Concurrency({ limit: 5000 });
    serveCluster({ api, sem });
    const w = cluster.fork();
    const r = await done(w);
    console.log(JSON.stringify({ ...r, api: api.stats('k'), sem: sem.stats('k') }));
    w.kill();
  } else if (scenario === 'refused') {
    // A primary that refuses every batch whole, as the real one refuses an oversized one;
    // it reports the acquire() calls the worker aborted. It learns the protocol's mark from
    // the worker's hello.
    const w = cluster.fork();
    const aborted = [];
    w.on('message', (m) => {
      if (m?.t === 'hello') {
        const api = { algorithm: 'TokenBucket', limit: 10, capacity: 10, refillPerSecond: 1 };
        w.send({ mark: m.mark, t: 'ready', served: { api } });
      } else if (m?.t === 'c') {
        for (let i = 0; i < m.c.length; i += WIDTHS[m.c[i]]) {
          if (m.c[i] === ABORT) aborted.push(m.c[i + 1]);
        }
        w.send({ mark: m.mark, t: 'r', s: m.s, v: [], e: REFUSAL });
      }
    });
    const r = await done(w);
    console.log(JSON.stringify({ ...r, aborted }));
    w.kill();
  } else if (scenario === 'give-back' || scenario === 'close-recount') {
    // give-back: a client with permit blocks of 100 keys closes. close-recount: in one tick,
    // 7 calls of a client that then closes, then 5 of another. The batches the worker sends
    // after its { counting } message are counted.
    const api = new TokenBucket({ capacity: 1000, refillPerSecond: 1, clock: new ManualClock() });
    serveCluster({ api });
    const w = cluster.fork();
    let counting = false;
    let messages = 0;
    w.on('message', (m) => {
      if (m?.counting) counting = true;
      else if (m?.t === 'c' && counting) messages++;
    });
    const r = await done(w);
    const available = Array.from({ length: 100 }, (_, i) => api.stats(`k${i}`).available);
    console.log(JSON.stringify({ ...r, messages, available, api: api.stats('k') }));
    w.kill();
  } else if (scenario === 'inflight') {
    // 64 loops each awaiting its own calls: 40 consume() calls each of a key of its own,
    // 1 to 4 permits a call, from buckets of 60 that never refill (the clock stands still).
    // The primary counts the calls of each message.
    const api = new TokenBucket({ capacity: 60, refillPerSecond: 1, clock: new ManualClock() });
    serveCluster({ api });
    const w = cluster.fork();
    const sizes = [];
    w.on('message', (m) => {
      if (m?.t === 'c') sizes.push(m.c.filter((v) => typeof v === 'string' && v[0] === 'k').length);
    });
    const r = await done(w);
    const admitted = Array.from({ length: 64 }, (_, i) => api.stats(`k${i}`).admitted);
    console.log(JSON.stringify({ ...r, sizes, admitted }));
    w.kill();
  } else if (scenario === 'late') {
    // Calls answered after their client was closed: a bucket's grants go back,
    // a window's and a log's stay counted (the answers do not say when they were taken). The
    // clock stands still: nothing refills meanwhile.
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 10, refillPerSecond: 1, clock });
    const log = new SlidingLog({ limit: 10, windowMs: 60_000, clock });
    const win = new FixedWindow({ limit: 10, windowMs: 60_000, clock });
    serveCluster({ bucket, log, win });
    const w = cluster.fork();
    const r = await done(w);
    const available = (l) => ['t', 'c', 'a'].map((k) => l.stats(k).available);
    console.log(
      JSON.stringify({
        ...r,
        bucket: available(bucket),
        log: available(log),
        win: available(win),
      }),
    );
    w.kill();
  }
} else if (scenario === 'acquires') {
  const a = connectCluster('a');
  const b = connectCluster('b');
  await Promise.all([a.ready(), b.ready()]);
  const calls = [];
  for (let i = 0; i < 3000; i++) {
    // A refused batch used to leave these waiting forever: the timeout ends the test.
    calls.push(a.acquire('k', 1, { timeoutMs: 1000 }).then(() => 'ok', code));
    calls.push(b.acquire('k', 1, { timeoutMs: 1000 }).then(() => 'ok', code));
  }
  process.send({ done: true, outcomes: tally(await Promise.all(calls)) });
} else if (scenario === 'drops') {
  const sem = connectCluster('sem');
  await sem.ready();
  const leases = [];
  for (let i = 0; i < 13; i++) {
    leases.push(...(await Promise.all(Array.from({ length: 1000 }, () => sem.acquire('k')))));
  }
  const before = (await sem.stats('k')).available;
  for (const lease of leases) lease.release(); // one tick
  // Answered after the releases' batches were run (one channel, in order).
  const after = await sem.stats('k').then((s) => s.available, code);
  process.send({ done: true, before, after });
} else if (scenario === 'mixed') {
  const api = connectCluster('api');
  const sem = connectCluster('sem');
  await Promise.all([api.ready(), sem.ready()]);
  const leases = await Promise.all(Array.from({ length: 3000 }, () => sem.acquire('k')));
  const calls = [];
  for (let i = 0; i < 4000; i++) {
    calls.push(api.tryAcquire('k').then(String, code));
    if (i < 3000) leases[i].release();
  }
  const outcomes = tally(await Promise.all(calls));
  await sem.stats('k'); // the releases' batches have been run
  process.send({ done: true, outcomes });
} else if (scenario === 'refused') {
  const api = connectCluster('api');
  await api.ready();
  const outcome = (p) => p.then(String, (e) => `${e.name} ${e.code}`);
  // One batch of answered calls around an acquire(), then one of acquire() calls only (not
  // tracked as a batch: answered by id). The timeout ends the test if they hang.
  const mixed = [
    outcome(api.tryAcquire('k')),
    outcome(api.acquire('k', 1, { timeoutMs: 500 })),
    outcome(api.consume('k')),
  ];
  const first = await Promise.all(mixed);
  const only = [
    outcome(api.acquire('k', 1, { timeoutMs: 500 })),
    outcome(api.acquire('k', 2, { timeoutMs: 500 })),
  ];
  const second = await Promise.all(only);
  // Any abort left before this message: it was queued before the calls were rejected.
  process.send({ done: true, first, second });
} else if (scenario === 'give-back') {
  const blocked = connectCluster('api', { block: 4 });
  const other = connectCluster('api');
  await Promise.all([blocked.ready(), other.ready()]);
  for (let i = 0; i < 100; i++) await blocked.tryAcquire(`k${i}`); // a block of 4, 1 spent
  process.send({ counting: true });
  blocked.close(); // 100 give-backs of 3 permits: nobody awaits them
  await other.stats('k0'); // answered after them (one channel, in order)
  process.send({ done: true });
} else if (scenario === 'close-recount') {
  const a = connectCluster('api');
  const b = connectCluster('api');
  await Promise.all([a.ready(), b.ready()]);
  process.send({ counting: true });
  const first = Array.from({ length: 7 }, () => a.tryAcquire('k').then(String, code));
  a.close(); // its 7 calls leave the batch: none was in flight
  const second = Array.from({ length: 5 }, () => b.tryAcquire('k').then(String, code));
  const outcomes = [...(await Promise.all(first)), ...(await Promise.all(second))];
  process.send({ done: true, outcomes });
} else if (scenario === 'inflight') {
  const api = connectCluster('api');
  await api.ready();
  // Each loop's answers, in the order of its calls: the permits left, or -1 when refused.
  const loops = await Promise.all(
    Array.from({ length: 64 }, async (_, i) => {
      const seen = [];
      for (let j = 0; j < 40; j++) {
        const d = await api.consume(`k${i}`, 1 + (i % 4));
        seen.push(d.allowed ? d.remaining : -1);
      }
      return seen;
    }),
  );
  process.send({ done: true, loops });
} else if (scenario === 'late') {
  const names = ['bucket', 'log', 'win'];
  const clients = names.map((name) => connectCluster(name));
  await Promise.all(clients.map((c) => c.ready()));
  // The acquire() outcomes arrive after the answers of the batch (the primary sends them a
  // microtask later), and this listener runs after the client's: once all three came, every
  // late grant has been handled.
  const acquired = new Promise((resolve) => {
    let n = 0;
    process.on('message', (m) => {
      if (m?.t === 'a' && (n += m.v.length / 3) === names.length) resolve();
    });
  });
  const calls = clients.flatMap((c) => [
    c.tryAcquire('t', 4).then(String, code),
    c.consume('c', 3).then(String, code),
    c.acquire('a', 2).then(String, code),
  ]);
  await null; // the batch has left: its flush was queued first
  for (const c of clients) c.close();
  const outcomes = await Promise.all(calls);
  await acquired;
  // The give-backs leave before this message (one channel, in order).
  process.send({ done: true, outcomes });
}
