// Runs one cluster scenario and prints its outcome as one JSON line (primary) —
// the same file is the workers' script. Usage: node scenario.mjs <scenario>
import cluster from 'node:cluster';
import { connectCluster, serveCluster } from '../../dist/cluster.js';
import { Concurrency, ManualClock, TokenBucket } from '../../dist/index.js';

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
    out.unknown = await connectCluster('nobody', { timeoutMs: 100 }).tryAcquire().catch(describe);
    process.send(out);
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
