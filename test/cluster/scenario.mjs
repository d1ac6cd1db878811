// Runs one cluster scenario and prints its outcome as one JSON line (primary) —
// the same file is the workers' script. Usage: node scenario.mjs <scenario>
import cluster from 'node:cluster';
import { connectCluster, serveCluster } from '../../dist/cluster.js';
import { Concurrency, FixedWindow, ManualClock, TokenBucket } from '../../dist/index.js';

const scenario = process.argv[2] ?? process.env.SCENARIO;

function collect(workers) {
  return Promise.all(
    workers.map(
      (w) =>
        new Promise((resolve, reject) => {
          w.on('message', (m) => m?.done && resolve(m));
          w.once('error', reject);
        }),
    ),
  );
}

/** The primary stops answering for 300 ms when worker `w` says it is busy. */
function stallOnBusy(w) {
  w.on('message', (m) => {
    if (m?.busy) {
      const t = Date.now();
      while (Date.now() - t < 300); // the primary cannot answer for a while
    }
  });
}

if (cluster.isPrimary) {
  cluster.setupPrimary({ exec: new URL(import.meta.url).pathname, args: [scenario] });
  if (scenario === 'exact') {
    // Workers start (and call) before the primary serves: their calls wait, no polling.
    const workers = [1, 2, 3].map(() => cluster.fork());
    const done = collect(workers);
    await Promise.all(
      workers.map((w) => new Promise((r) => w.on('message', (m) => m?.calling && r()))),
    );
    const clock = new ManualClock();
    const api = new TokenBucket({ capacity: 50, refillPerSecond: 1, clock });
    serveCluster({ api });
    const results = await done;
    const admitted = results.reduce((a, r) => a + r.admitted, 0);
    console.log(
      JSON.stringify({
        admitted,
        perWorker: results.map((r) => r.admitted),
        stats: api.stats('hot'),
        errors: results.map((r) => r.errors),
      }),
    );
    for (const w of workers) w.kill();
  } else if (scenario === 'errors') {
    const sem = new Concurrency({ limit: 2 });
    const closed = new TokenBucket({ capacity: 1, refillPerSecond: 1 });
    closed.close();
    serveCluster({ sem, closed });
    const w = cluster.fork();
    const r = await new Promise((resolve) => w.on('message', (m) => m?.done && resolve(m)));
    console.log(JSON.stringify(r));
    w.kill();
  } else if (scenario === 'blocks') {
    // Permit blocks: spent locally, the unspent rest given back on close(); exact in total.
    const clock = new ManualClock();
    const api = new TokenBucket({ capacity: 50, refillPerSecond: 1, clock });
    serveCluster({ api });
    const first = cluster.fork({ ROLE: 'first' });
    const r1 = await new Promise((r) => first.on('message', (m) => m?.done && r(m)));
    const afterFirst = api.stats('k');
    const second = cluster.fork({ ROLE: 'second' });
    const r2 = await new Promise((r) => second.on('message', (m) => m?.done && r(m)));
    console.log(JSON.stringify({ r1, afterFirst, r2, stats: api.stats('k') }));
    first.kill();
    second.kill();
  } else if (scenario === 'block-window') {
    // A block's permits count in the window they were taken in: none is spent in the next.
    // (Real time: the worker cannot read the primary's clock.)
    const api = new FixedWindow({ limit: 10, windowMs: 400 });
    serveCluster({ api });
    const w = cluster.fork();
    const took = await new Promise((r) => w.on('message', (m) => m?.took !== undefined && r(m)));
    // The block took the window's 10; the next window starts with all 10 again.
    while (api.stats('k').available !== 10) await new Promise((r) => setTimeout(r, 5));
    const direct = api.tryAcquire('k', 10); // this window's whole limit, here
    const done = new Promise((r) => w.on('message', (m) => m?.done && r(m)));
    w.send('go');
    const r = await done;
    console.log(JSON.stringify({ took: took.took, direct, later: r.admitted }));
    w.kill();
  } else if (scenario === 'block-give') {
    // A block topped up in a later window gives back only what it took there, there.
    const clock = new ManualClock();
    const api = new FixedWindow({ limit: 100, windowMs: 1000, clock });
    serveCluster({ api });
    const w = cluster.fork();
    w.on('message', (m) => {
      if (m === 'advance') {
        clock.advance(1000);
        w.send('advanced');
      }
    });
    const r = await new Promise((res) => w.on('message', (m) => m?.done && res(m)));
    console.log(JSON.stringify({ ...r, stats: api.stats('k') }));
    w.kill();
  } else if (scenario === 'leases') {
    // Two servers in one primary: a lease given back to one never frees the other's.
    const a = new Concurrency({ limit: 1 });
    const b = new Concurrency({ limit: 1 });
    serveCluster({ a });
    serveCluster({ b });
    const w = cluster.fork();
    await new Promise((r) => w.on('message', (m) => m?.holding && r()));
    // Read while the worker waits for 'go': its release cannot have been sent yet (it
    // used to go out at once, and could be handled before this line ran).
    const held = [a.stats().available, b.stats().available];
    const done = new Promise((res) => w.on('message', (m) => m?.done && res(m)));
    w.send('go');
    // The worker's drop travels before its stats calls in the same channel: by its 'done'
    // the primary has handled the drop.
    const r = await done;
    console.log(JSON.stringify({ held, after: [a.stats().available, b.stats().available], r }));
    w.kill();
  } else if (scenario === 'late') {
    // A Concurrency tryAcquire that timed out in the worker but was granted late is given back.
    const sem = new Concurrency({ limit: 1 });
    serveCluster({ sem });
    const w = cluster.fork();
    stallOnBusy(w);
    const r = await new Promise((res) => w.on('message', (m) => m?.done && res(m)));
    console.log(JSON.stringify({ ...r, available: sem.stats().available }));
    w.kill();
  } else if (scenario === 'close-acquire') {
    // close() while acquire() calls wait at the primary: they leave its queues.
    const api = new TokenBucket({ capacity: 10, refillPerSecond: 0.001, queueLimit: 10 });
    const sem = new Concurrency({ limit: 1, queueLimit: 10 });
    serveCluster({ api, sem });
    api.tryAcquire('k', 10); // drained
    sem.tryAcquire('k'); // held here
    const w = cluster.fork();
    const r = await new Promise((res) => w.on('message', (m) => m?.done && res(m)));
    sem.release('k'); // a waiter still queued would take it now
    console.log(JSON.stringify({ ...r, semAfterRelease: sem.stats('k').available }));
    w.kill();
  } else if (scenario === 'close-same-tick') {
    // Calls made in the tick of close() are not sent; the other clients' calls are.
    const api = new TokenBucket({ capacity: 20, refillPerSecond: 0.001 });
    const other = new TokenBucket({ capacity: 5, refillPerSecond: 0.001 });
    serveCluster({ api, other });
    const w = cluster.fork();
    const r = await new Promise((res) => w.on('message', (m) => m?.done && res(m)));
    console.log(
      JSON.stringify({ ...r, api: api.stats('k').admitted, other: other.stats('k').admitted }),
    );
    w.kill();
  } else if (scenario === 'block-retry') {
    // Waiters of one block request, refused: each Decision is that of its own count.
    const clock = new ManualClock();
    const api = new TokenBucket({ capacity: 10, refillPerSecond: 1, clock });
    serveCluster({ api });
    const ref = new TokenBucket({ capacity: 10, refillPerSecond: 1, clock });
    ref.tryAcquire('k', 10);
    const inMemory = [ref.consume('k', 1).retryAfterMs, ref.consume('k', 5).retryAfterMs];
    const w = cluster.fork();
    const r = await new Promise((res) => w.on('message', (m) => m?.done && res(m)));
    console.log(JSON.stringify({ ...r, inMemory }));
    w.kill();
  } else if (scenario === 'timeout-order') {
    // The primary stalls; a call's timeout fires at its own timeoutMs.
    const api = new TokenBucket({ capacity: 100, refillPerSecond: 0.001 });
    serveCluster({ api });
    const w = cluster.fork();
    stallOnBusy(w);
    const r = await new Promise((res) => w.on('message', (m) => m?.done && res(m)));
    console.log(JSON.stringify(r));
    w.kill();
  } else if (scenario === 'cross') {
    // A takes the only permit, B releases it, C takes it; A dies: C still holds it.
    const sem = new Concurrency({ limit: 1 });
    serveCluster({ sem });
    const step = (w, name) => new Promise((r) => w.on('message', (m) => m?.step === name && r()));
    const [a, b, c] = ['A', 'B', 'C'].map((ROLE) => cluster.fork({ ROLE }));
    await Promise.all([step(a, 'took'), step(b, 'up'), step(c, 'up')]);
    b.send('go');
    await step(b, 'released');
    c.send('go');
    await step(c, 'took');
    const before = sem.stats().available;
    a.process.kill('SIGKILL');
    await new Promise((r) => a.on('exit', r));
    await new Promise((r) => setImmediate(r));
    console.log(JSON.stringify({ before, afterDeath: sem.stats().available }));
    b.kill();
    c.kill();
  } else if (scenario === 'death') {
    const sem = new Concurrency({ limit: 1, queueLimit: 5 });
    serveCluster({ sem });
    const holder = cluster.fork({ ROLE: 'holder' });
    await new Promise((r) => holder.on('message', (m) => m?.holding && r()));
    const waiter = cluster.fork({ ROLE: 'waiter' });
    await new Promise((r) => waiter.on('message', (m) => m?.waiting && r()));
    const before = sem.stats('k');
    holder.process.kill('SIGKILL');
    const served = await new Promise((r) => waiter.on('message', (m) => m?.done && r(m)));
    console.log(JSON.stringify({ before, served, after: sem.stats('k') }));
    waiter.kill();
  }
} else {
  if (scenario === 'exact') {
    const api = connectCluster('api');
    let admitted = 0;
    const errors = [];
    const calls = [];
    for (let i = 0; i < 100; i++)
      calls.push(
        api.tryAcquire('hot').then(
          (ok) => ok && admitted++,
          (e) => errors.push(e.code),
        ),
      );
    process.send({ calling: true }); // the calls are out; the primary serves only now
    await Promise.all(calls);
    process.send({ done: true, admitted, errors });
  } else if (scenario === 'errors') {
    const { ClusterTimeoutError, LimiterClosedError, QueueFullError } = await import(
      '../../dist/index.js'
    );
    const sem = connectCluster('sem');
    const describe = (e) => ({
      name: e.name,
      code: e.code,
      range: e instanceof RangeError,
      closed: e instanceof LimiterClosedError,
      full: e instanceof QueueFullError,
      timeout: e instanceof ClusterTimeoutError,
    });
    const out = { done: true };
    out.tooMany = await sem.tryAcquire('k', 3).catch(describe);
    out.queueFull = await sem
      .acquire('k', 1)
      .then(() => sem.acquire('k', 2))
      .catch(describe);
    const d = await sem.consume('k', 2);
    // Infinity crossed the IPC channel (JSON) as Infinity, not null.
    out.decision = {
      allowed: d.allowed,
      retryIsInfinity: d.retryAfterMs === Number.POSITIVE_INFINITY,
    };
    out.closed = await connectCluster('closed').tryAcquire().catch(describe);
    // A name the primary does not serve: answered at once, whatever the timeout.
    out.unknown = await connectCluster('nobody', { timeoutMs: 60_000 })
      .tryAcquire()
      .catch((e) => ({ ...describe(e), message: e.message }));
    process.send(out);
  } else if (scenario === 'blocks') {
    const api = connectCluster('api', { block: 8 });
    let admitted = 0;
    const tries = process.env.ROLE === 'first' ? 3 : 100;
    for (let i = 0; i < tries; i++) if (await api.tryAcquire('k')) admitted++;
    api.close(); // gives the unspent rest of the block back
    const check = connectCluster('api');
    const stats = await check.stats('k'); // after the refund, in channel order
    process.send({ done: true, admitted, available: stats.available });
  } else if (scenario === 'block-window') {
    const api = connectCluster('api', { block: 10, blockTtlMs: 60_000 });
    let took = 0;
    for (let i = 0; i < 3; i++) if (await api.tryAcquire('k')) took++;
    const go = new Promise((r) => process.on('message', (m) => m === 'go' && r()));
    process.send({ took });
    await go;
    let admitted = 0;
    for (let i = 0; i < 7; i++) if (await api.tryAcquire('k')) admitted++;
    process.send({ done: true, admitted });
  } else if (scenario === 'block-give') {
    const blk = connectCluster('api', { block: 10 });
    const direct = connectCluster('api');
    const step = (m) => {
      const next = new Promise((r) => process.once('message', r));
      process.send(m);
      return next;
    };
    for (let i = 0; i < 5; i++) await blk.tryAcquire('k'); // a block of 10 in window 0
    await step('advance'); // window 1
    await blk.tryAcquire('k'); // 4 left: a top-up of 6 is taken in window 1
    await direct.stats('k'); // answered after the top-up: it has landed
    let others = 0;
    for (let i = 0; i < 94; i++) if (await direct.tryAcquire('k')) others++;
    blk.close(); // gives the block back
    const after = await direct.stats('k'); // after the give-back, in channel order
    process.send({ done: true, others, available: after.available });
  } else if (scenario === 'leases') {
    const a = connectCluster('a');
    const b = connectCluster('b');
    const go = new Promise((r) => process.on('message', (m) => m === 'go' && r()));
    const la = await a.acquire();
    await b.acquire();
    process.send({ holding: true });
    await go;
    la.release();
    const stats = [await a.stats(), await b.stats()]; // after the release, in channel order
    process.send({ done: true, available: stats.map((x) => x.available) });
  } else if (scenario === 'late') {
    const sem = connectCluster('sem', { timeoutMs: 50 });
    await sem.stats(); // connected
    process.send({ busy: true });
    const outcome = await sem.tryAcquire().then(String, (e) => e.code);
    // The late grant arrives and is given back; watch the primary (bounded).
    let available = 0;
    const slow = connectCluster('sem', { timeoutMs: 5000 });
    for (let i = 0; i < 200 && available !== 1; i++) available = (await slow.stats()).available;
    process.send({ done: true, outcome, seen: available });
  } else if (scenario === 'close-acquire') {
    const api = connectCluster('api');
    const sem = connectCluster('sem');
    const watch = connectCluster('api');
    const watchSem = connectCluster('sem');
    await Promise.all([api.ready(), sem.ready()]);
    const a = api.acquire('k', 10).then(String, (e) => e.code);
    const s = sem.acquire('k').then(String, (e) => e.code);
    // Wait until the primary shows both queued.
    for (;;) {
      const [x, y] = [await watch.stats('k'), await watchSem.stats('k')];
      if (x.queued === 10 && y.queued === 1) break;
    }
    api.close();
    sem.close();
    const outcomes = [await a, await s];
    // After the aborts, in channel order.
    const queued = [(await watch.stats('k')).queued, (await watchSem.stats('k')).queued];
    process.send({ done: true, outcomes, queued });
  } else if (scenario === 'close-same-tick') {
    const a = connectCluster('api');
    const b = connectCluster('api');
    const o = connectCluster('other');
    await Promise.all([a.ready(), o.ready()]);
    const outcome = (p) => p.then(String, (e) => e.code);
    // One tick, one batch: b's, a's, o's and b's records; a closes before it leaves.
    const calls = [
      outcome(b.tryAcquire('k', 2)),
      outcome(a.consume('k', 5)),
      outcome(a.acquire('k', 1)),
      outcome(o.tryAcquire('k')),
      outcome(b.tryAcquire('k', 3)),
    ];
    a.close();
    const outcomes = await Promise.all(calls);
    await Promise.all([b.stats('k'), o.stats('k')]); // the batch has been run
    process.send({ done: true, outcomes });
  } else if (scenario === 'block-retry') {
    const plain = connectCluster('api');
    const blk = connectCluster('api', { block: 4 });
    await blk.ready();
    await plain.consume('k', 10); // drained
    // One block request (1 permit at least); the call for 5 joins it.
    const [one, five] = await Promise.all([blk.consume('k', 1), blk.consume('k', 5)]);
    process.send({
      done: true,
      allowed: [one.allowed, five.allowed],
      retryAfterMs: [one.retryAfterMs, five.retryAfterMs],
    });
  } else if (scenario === 'timeout-order') {
    const fast = connectCluster('api', { timeoutMs: 5 });
    const slow = connectCluster('api', { timeoutMs: 5000 });
    await slow.stats(); // connected (both: one channel per process)
    await new Promise((r) => setTimeout(r, 60)); // no timer of those calls is left
    process.send({ busy: true });
    const order = [];
    // The slow call's batch leaves first, its deadline 5 s away; the fast call's is sooner.
    const answered = slow.stats().then(() => order.push('slow answered'));
    await new Promise((r) => setImmediate(r));
    const timedOut = fast.tryAcquire().then(
      () => order.push('fast answered'),
      (e) => order.push(e.code),
    );
    const timer = new Promise((r) => setTimeout(r, 20)).then(() => order.push('timer 20 ms'));
    await Promise.all([answered, timedOut, timer]);
    process.send({ done: true, order });
  } else if (scenario === 'cross') {
    const sem = connectCluster('sem');
    const go = new Promise((r) => process.on('message', (m) => m === 'go' && r()));
    process.send({ step: 'up' });
    if (process.env.ROLE === 'A') {
      await sem.tryAcquire();
      process.send({ step: 'took' });
    }
    if (process.env.ROLE === 'B') {
      await go;
      await sem.release();
      process.send({ step: 'released' });
    }
    if (process.env.ROLE === 'C') {
      await go;
      await sem.tryAcquire();
      process.send({ step: 'took' });
    }
  } else if (scenario === 'death') {
    const sem = connectCluster('sem');
    if (process.env.ROLE === 'holder') {
      await sem.acquire('k');
      process.send({ holding: true });
    } else {
      const p = sem.acquire('k');
      // Wait until the primary shows this waiter queued.
      for (;;) {
        const s = await sem.stats('k');
        if (s.queued === 1) break;
      }
      process.send({ waiting: true });
      const lease = await p;
      process.send({ done: true, granted: true });
      lease.release();
    }
  }
}
