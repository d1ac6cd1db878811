// Cluster scenarios about reset(): what a worker held of a Concurrency key before its reset,
// and a worker's permit block of a reset key. Like faults.mjs: the primary prints its
// outcome as one JSON line, and the same file is the workers' script.
// Usage: node reset.mjs <scenario>
// DIST (optional) points at another build, to show a test failing on an older one.
import cluster from 'node:cluster';

const DIST = process.env.DIST ?? new URL('../../dist/', import.meta.url).pathname;
const { connectCluster, serveCluster } = await import(`${DIST}/cluster.js`);
const { Concurrency, FixedWindow, ManualClock } = await import(`${DIST}/index.js`);

const scenario = process.argv[2] ?? process.env.SCENARIO;
const messageOf = (w, test) => new Promise((r) => w.on('message', (m) => test(m) && r(m)));

if (cluster.isPrimary) {
  cluster.setupPrimary({ exec: new URL(import.meta.url).pathname, args: [scenario] });
  // Resolves once the dispatcher has handled the worker's exit: cluster's 'exit' listeners
  // run in the order they were added, and serveCluster() added its own first.
  const gone = (w) => {
    const handled = new Promise((r) => cluster.on('exit', (x) => x === w && r()));
    w.process.kill('SIGKILL');
    return handled;
  };
  if (scenario === 'held' || scenario === 'lease') {
    // Limit 1: A holds the permit (tryAcquire, or a lease); B resets the key through its
    // client and takes the permit; A dies. B's permit must stay held.
    const sem = new Concurrency({ limit: 1 });
    serveCluster({ sem });
    const a = cluster.fork({ ROLE: scenario === 'lease' ? 'lease' : 'try' });
    await messageOf(a, (m) => m?.holding);
    const b = cluster.fork({ ROLE: 'reset-then-try' });
    const bHeld = (await messageOf(b, (m) => m?.holding)).ok;
    await gone(a);
    const afterA = sem.stats('k');
    const thirdAdmitted = sem.tryAcquire('k');
    if (thirdAdmitted) sem.release('k');
    // What B took after the reset is still recorded: its death gives it back.
    await gone(b);
    console.log(JSON.stringify({ bHeld, afterA, thirdAdmitted, afterB: sem.stats('k') }));
  } else if (scenario === 'same-batch') {
    // A's acquire() and its reset() of the key leave in one batch: the lease is granted
    // before the reset, though the primary records it only after the batch.
    const sem = new Concurrency({ limit: 1 });
    serveCluster({ sem });
    const a = cluster.fork({ ROLE: 'acquire-and-reset' });
    await messageOf(a, (m) => m?.holding);
    const b = cluster.fork({ ROLE: 'try' });
    const bHeld = (await messageOf(b, (m) => m?.holding)).ok;
    await gone(a);
    const afterA = sem.stats('k');
    console.log(JSON.stringify({ bHeld, afterA }));
    b.kill();
  } else if (scenario === 'waiter') {
    // A waits in acquire() behind B; B resets the key, which wakes A: A's lease is taken
    // after the reset. B dies (nothing of its pre-reset permit comes back), then A (its
    // lease comes back).
    const sem = new Concurrency({ limit: 1, queueLimit: 1 });
    serveCluster({ sem });
    const b = cluster.fork({ ROLE: 'try-then-reset' });
    const bHeld = (await messageOf(b, (m) => m?.holding)).ok;
    const a = cluster.fork({ ROLE: 'lease' });
    while (sem.stats('k').queued !== 1) await new Promise((r) => setImmediate(r));
    b.send('reset');
    await messageOf(a, (m) => m?.holding);
    await gone(b);
    const afterB = sem.stats('k');
    await gone(a);
    console.log(JSON.stringify({ bHeld, afterB, afterA: sem.stats('k') }));
  } else {
    // Permit blocks (block-held, block-in-flight, block-top-up): FixedWindow limit 10, its
    // window never ends (a ManualClock that stays put).
    const clock = new ManualClock();
    const api = new FixedWindow({ limit: 10, windowMs: 60_000, clock });
    serveCluster({ api });
    const w = cluster.fork();
    const report = await messageOf(w, (m) => m?.done);
    console.log(JSON.stringify({ ...report, primary: api.stats('k') }));
    w.kill();
  }
} else if (scenario === 'held' || scenario === 'lease' || scenario === 'same-batch') {
  const sem = connectCluster('sem');
  const role = process.env.ROLE;
  if (role === 'lease') {
    await sem.acquire('k');
    process.send({ holding: true, ok: true });
  } else if (role === 'acquire-and-reset') {
    const lease = sem.acquire('k');
    const reset = sem.reset('k'); // same tick: same batch, after the acquire()
    await Promise.all([lease, reset]);
    process.send({ holding: true, ok: true });
  } else {
    if (role === 'reset-then-try') await sem.reset('k');
    process.send({ holding: true, ok: await sem.tryAcquire('k') });
  }
  setInterval(() => {}, 1000); // holds on until killed
} else if (scenario === 'waiter') {
  const sem = connectCluster('sem');
  if (process.env.ROLE === 'lease') {
    await sem.acquire('k');
    process.send({ holding: true });
  } else {
    process.send({ holding: true, ok: await sem.tryAcquire('k') });
    process.on('message', (m) => m === 'reset' && sem.reset('k'));
  }
  setInterval(() => {}, 1000);
} else {
  const api = connectCluster('api', { block: scenario === 'block-top-up' ? 4 : 5 });
  await api.ready();
  let before = 0; // admitted by calls decided before the reset
  let during; // a call made in the same tick as the reset, just before it
  if (scenario === 'block-held') {
    // A block of 5, 4 of them left here when the key is reset.
    if (await api.tryAcquire('k')) before++;
  } else if (scenario === 'block-in-flight') {
    // No block yet: the call's block request leaves before the reset, in the same batch,
    // so the primary takes its permits and then resets the key.
    during = api.tryAcquire('k');
  } else {
    // block-top-up: blocks of 4. The third call leaves 1 and asks for a top-up in the
    // background, which leaves after the reset made in the same tick: its permits count.
    for (let i = 0; i < 2; i++) if (await api.tryAcquire('k')) before++;
    during = api.tryAcquire('k');
  }
  await api.reset('k');
  const duringAllowed = during === undefined ? undefined : await during;
  let admitted = 0;
  for (let i = 0; i < 30; i++) if (await api.tryAcquire('k')) admitted++;
  process.send({ done: true, before, duringAllowed, admitted });
}
