// Cluster scenarios about faults: killed workers, malformed messages, bad keys,
// misuse. Like scenario.mjs: the primary prints its outcome as one JSON line, and the same
// file is the workers' script. Usage: node faults.mjs <scenario>
// DIST (optional) points at another build, to show a test failing on an older one.
import cluster from 'node:cluster';

const DIST = process.env.DIST ?? new URL('../../dist/', import.meta.url).pathname;
const { connectCluster, serveCluster } = await import(`${DIST}/cluster.js`);
const { Concurrency, FixedWindow, ManualClock, TokenBucket, chain } = await import(
  `${DIST}/index.js`
);

const scenario = process.argv[2] ?? process.env.SCENARIO;
const messageOf = (w, test) => new Promise((r) => w.on('message', (m) => test(m) && r(m)));
const exited = (w) => new Promise((r) => (w.isDead() ? r() : w.once('exit', r)));
const describeError = (e) => ({ name: e?.name, code: e?.code, message: e?.message });

if (cluster.isPrimary) {
  cluster.setupPrimary({ exec: new URL(import.meta.url).pathname, args: [scenario] });
  if (scenario === 'kill') {
    // Ten workers in full traffic on a Concurrency and a TokenBucket; eight are killed
    // (SIGKILL) at once. The primary must survive, keep serving the other two, and get back
    // every permit the dead held.
    const sem = new Concurrency({ limit: 4, queueLimit: 10_000 });
    const api = new TokenBucket({ capacity: 2 ** 24, refillPerSecond: 1e6 });
    serveCluster({ sem, api });
    const workers = Array.from({ length: 10 }, () => cluster.fork());
    await Promise.all(workers.map((w) => messageOf(w, (m) => m?.busy)));
    const doomed = workers.slice(0, 8);
    const survivors = workers.slice(8);
    for (const w of doomed) w.process.kill('SIGKILL');
    await Promise.all(doomed.map(exited));
    // The survivors go on for a while after the deaths, then stop and give everything back.
    const done = survivors.map((w) => messageOf(w, (m) => m?.done));
    for (const w of survivors) w.send('finish');
    const reports = await Promise.all(done);
    console.log(
      JSON.stringify({
        reports: reports.map(({ callsAfterDeaths, errors }) => ({ callsAfterDeaths, errors })),
        sem: sem.stats('c'),
        killed: doomed.map((w) => w.process.signalCode),
      }),
    );
    for (const w of survivors) w.kill();
  } else if (scenario === 'malformed') {
    // One worker sends every malformed message we could think of (the old protocol's and
    // this one's); another keeps calling meanwhile.
    const api = new TokenBucket({ capacity: 1_000_000, refillPerSecond: 1 });
    const sem = new Concurrency({ limit: 2 });
    serveCluster({ api, sem });
    const good = cluster.fork({ ROLE: 'good' });
    await messageOf(good, (m) => m?.started);
    const bad = cluster.fork({ ROLE: 'bad' });
    const badReport = await messageOf(bad, (m) => m?.done);
    good.send('finish');
    const goodReport = await messageOf(good, (m) => m?.done);
    console.log(
      JSON.stringify({
        bad: badReport,
        good: goodReport,
        defaultKey: api.stats(),
        sem: sem.stats(),
      }),
    );
    good.kill();
    bad.kill();
  } else if (scenario === 'badkeys') {
    const clock = new ManualClock();
    const api = new TokenBucket({ capacity: 100, refillPerSecond: 1, clock });
    const sem = new Concurrency({ limit: 3 });
    const win = new FixedWindow({ limit: 7, windowMs: 60_000, clock });
    serveCluster({ api, sem, win });
    const w = cluster.fork();
    const report = await messageOf(w, (m) => m?.done);
    console.log(JSON.stringify({ ...report, defaultKey: api.stats(), semDefault: sem.stats() }));
    w.kill();
  } else if (scenario === 'closed') {
    // A worker dies holding a lease, a tryAcquire permit and a queued acquire() of a
    // limiter that was closed meanwhile: giving them back throws LimiterClosedError, and
    // the primary must survive that too.
    const sem = new Concurrency({ limit: 2, queueLimit: 5 });
    const other = new Concurrency({ limit: 1 });
    serveCluster({ sem, other });
    const w = cluster.fork();
    await messageOf(w, (m) => m?.holding);
    sem.close();
    w.process.kill('SIGKILL');
    await exited(w);
    await new Promise((r) => setImmediate(r));
    // Still serving the others.
    const next = cluster.fork({ ROLE: 'next' });
    const report = await messageOf(next, (m) => m?.done);
    console.log(JSON.stringify({ ...report, alive: true }));
    next.kill();
  } else if (scenario === 'abort') {
    // An acquire() waiting at the primary, aborted by its signal in the worker.
    const sem = new Concurrency({ limit: 1, queueLimit: 5 });
    serveCluster({ sem });
    const w = cluster.fork();
    const report = await messageOf(w, (m) => m?.done);
    console.log(JSON.stringify({ ...report, after: sem.stats('k') }));
    w.kill();
  } else if (scenario === 'blockrace') {
    // Three workers, 40 calls each in flight at once through blocks of 8, on a limit of 50
    // that never refills: what they were granted and what came back add up exactly.
    const clock = new ManualClock();
    const api = new TokenBucket({ capacity: 50, refillPerSecond: 1, clock });
    serveCluster({ api });
    const workers = [1, 2, 3].map(() => cluster.fork());
    const reports = await Promise.all(workers.map((w) => messageOf(w, (m) => m?.done)));
    console.log(JSON.stringify({ allowed: reports.map((r) => r.allowed), stats: api.stats('k') }));
    for (const w of workers) w.kill();
  } else if (scenario === 'blocks') {
    // consume() and acquire() through permit blocks: exact in total.
    const clock = new ManualClock();
    const api = new TokenBucket({ capacity: 25, refillPerSecond: 1, clock, queueLimit: 10 });
    const sem = new Concurrency({ limit: 3 });
    serveCluster({ api, sem });
    const w = cluster.fork();
    await messageOf(w, (m) => m?.waiting);
    const whileWaiting = api.stats('a');
    clock.advance(1000); // one permit: the waiting acquire() gets it
    const report = await messageOf(w, (m) => m?.done);
    console.log(JSON.stringify({ ...report, whileWaiting, c: api.stats('c'), a: api.stats('a') }));
    w.kill();
  } else if (scenario === 'stale-block') {
    // A block taken in window 0 and given back in window 1 must not be
    // credited to window 1. Worker A takes a block of 60 in window 0 and holds it; window 1
    // begins; worker B fills window 1; then A closes, giving 59 back; B tries again.
    const clock = new ManualClock();
    const fw = new FixedWindow({ limit: 100, windowMs: 1000, clock });
    serveCluster({ fw });
    const a = cluster.fork({ ROLE: 'holder' });
    await messageOf(a, (m) => m?.took);
    clock.set(1000);
    const b = cluster.fork({ ROLE: 'filler' });
    const first = await messageOf(b, (m) => m?.admitted !== undefined);
    a.send('close');
    await messageOf(a, (m) => m?.closed);
    b.send('again');
    const second = await messageOf(b, (m) => m?.admitted !== undefined && m !== first);
    console.log(
      JSON.stringify({ first: first.admitted, second: second.admitted, window: fw.stats() }),
    );
    a.kill();
    b.kill();
  }
} else if (scenario === 'stale-block') {
  const fw = connectCluster('fw', { block: 60 });
  if (process.env.ROLE === 'holder') {
    await fw.tryAcquire();
    process.send({ took: true });
    process.on('message', async (m) => {
      if (m !== 'close') return;
      fw.close(); // gives the block's 59 unspent permits back
      await new Promise((r) => setImmediate(r));
      process.send({ closed: true });
    });
  } else {
    const plain = connectCluster('fw');
    const tryMany = async () => {
      let admitted = 0;
      for (let i = 0; i < 200; i++) if (await plain.tryAcquire()) admitted++;
      return admitted;
    };
    process.send({ admitted: await tryMany() });
    process.on('message', async (m) => {
      if (m === 'again') process.send({ admitted: await tryMany(), again: true });
    });
  }
} else if (scenario === 'kill') {
  const sem = connectCluster('sem', { timeoutMs: 20_000 });
  const api = connectCluster('api', { timeoutMs: 20_000 });
  let finishing = false;
  let deathsSeen = false;
  let callsAfterDeaths = 0;
  const errors = [];
  process.on('message', (m) => {
    if (m === 'finish') deathsSeen = true;
  });
  const loop = async () => {
    while (!finishing) {
      try {
        await api.tryAcquire('k');
        if (await sem.tryAcquire('c')) await sem.release('c');
        const lease = await sem.acquire('c');
        await api.consume('k');
        lease.release();
      } catch (e) {
        errors.push(e.code ?? e.message);
      }
      if (deathsSeen && ++callsAfterDeaths >= 200) finishing = true;
    }
  };
  const loops = Array.from({ length: 16 }, loop);
  await api.stats('k');
  process.send({ busy: true });
  await Promise.all(loops);
  // Leases were released with fire-and-forget drops: a stats round trip orders them.
  await sem.stats('c');
  process.send({ done: true, callsAfterDeaths, errors });
} else if (scenario === 'malformed') {
  if (process.env.ROLE === 'good') {
    const api = connectCluster('api');
    let finished = false;
    process.on('message', (m) => m === 'finish' && (finished = true));
    let allowed = 0;
    let calls = 0;
    const errors = [];
    await api.stats('good');
    process.send({ started: true });
    while (!finished || calls < 50) {
      try {
        if (await api.tryAcquire('good')) allowed++;
      } catch (e) {
        errors.push(e.code ?? e.message);
      }
      calls++;
      if (calls % 25 === 0) await new Promise((r) => setImmediate(r)); // let 'finish' in
    }
    process.send({ done: true, calls, allowed, errors });
  } else {
    const OLD = 'atomic-limiter/cluster@1';
    const MARK = 'atomic-limiter/cluster@3';
    const answered = new Map();
    process.on('message', (m) => {
      // (Batches 100 and up are the junk below; lower ones are the client's own.)
      if (m?.mark === MARK && m.t === 'r' && m.s >= 100) {
        answered.set(m.s, m.e ? 'batch-error' : m.v);
      }
    });
    const junk = [
      // The old protocol's shapes (they crashed it).
      { mark: OLD, t: 'calls', calls: null },
      { mark: OLD, t: 'calls', calls: [null] },
      { mark: OLD, t: 'calls', calls: [42] },
      { mark: OLD, t: 'calls', calls: 'x' },
      { mark: OLD, t: 'calls', calls: [[1, 'api', 'try', { k: 1 }, 'x', null]] },
      { mark: OLD, t: 'hello', extra: [1, 2, 3] },
      // This protocol's, with wrong types, wrong sizes and missing parts.
      { mark: MARK },
      { mark: MARK, t: 42 },
      { mark: MARK, t: 'c', s: 'x', c: [] },
      { mark: MARK, t: 'c', s: 1.5, c: [] },
      { mark: MARK, t: 'c', s: 101, c: null },
      { mark: MARK, t: 'c', s: 102, c: 'x' },
      { mark: MARK, t: 'c', s: 103, c: { length: 3 } },
      { mark: MARK, t: 'c', s: 104, c: [null] },
      { mark: MARK, t: 'c', s: 105, c: [42] },
      { mark: MARK, t: 'c', s: 106, c: [1] },
      { mark: MARK, t: 'c', s: 107, c: [0, 5, 1, 'k', 1] },
      { mark: MARK, t: 'c', s: 108, c: [0, 'api', 1, { k: 1 }, 1] },
      { mark: MARK, t: 'c', s: 109, c: [0, 'api', 1, 'k', 'x'] },
      { mark: MARK, t: 'c', s: 110, c: [0, 'api', 1, null, 1e9] },
      { mark: MARK, t: 'c', s: 111, c: [0, 'api', 3, 'k', 1, 'big'] },
      { mark: MARK, t: 'c', s: 112, c: [0, 'api', 8, 'id', 'k', 1, -1] },
      { mark: MARK, t: 'c', s: 113, c: [0, 'api', 10, 'x', 9, null, 0, 'sem', 5, null, 7] },
      { mark: MARK, t: 'c', s: 114, c: [0, 'api', 1.5, 'k', 1] },
      { mark: MARK, t: 'c', s: 115, c: new Array(1_000_000).fill(0) },
      { mark: MARK, t: 'c', s: 116, c: [0, 'api', 1, 'x'.repeat(5_000_000), 'x'] },
      { mark: MARK, t: 'c', s: 117, c: [0, 'api', 1, [], 1, 0, 'nope', 1, 'k', 1] },
      // A block's give-back with a time that is not a number; one to a Concurrency limiter.
      { mark: MARK, t: 'c', s: 118, c: [0, 'api', 11, 'k', 1, 'x'] },
      { mark: MARK, t: 'c', s: 119, c: [0, 'sem', 11, null, 1, 0] },
      { mark: MARK, t: 'r', s: 1, v: [1, 2] },
      { mark: MARK, t: 'ready', served: 5 },
    ];
    for (const m of junk) process.send(m);
    // Then a well-formed client in the same process: still served.
    const api = connectCluster('api');
    const after = await api.tryAcquire('after');
    process.send({
      done: true,
      after,
      answers: Object.fromEntries(
        [...answered].map(([s, v]) => [
          s,
          v === 'batch-error' ? v : v.map((x) => (typeof x === 'object' ? x.name : x)),
        ]),
      ),
    });
  }
} else if (scenario === 'badkeys') {
  // Every bad key and permit count: the client must refuse them exactly as the in-memory
  // limiter does (class and message), before sending anything.
  const api = connectCluster('api');
  const sem = connectCluster('sem');
  const win = connectCluster('win');
  const before = { algorithm: api.algorithm, limit: api.limit };
  const readied = await Promise.all([api.ready(), sem.ready(), win.ready()]);
  const readyIsSelf = readied[0] === api && readied[1] === sem && readied[2] === win;
  const described = [api, sem, win].map((c) => ({
    algorithm: c.algorithm,
    limit: c.limit,
    windowMs: c.windowMs,
    capacity: c.capacity,
    refillPerSecond: c.refillPerSecond,
    ratePerSecond: c.ratePerSecond,
  }));
  const local = {
    api: new TokenBucket({ capacity: 100, refillPerSecond: 1 }),
    sem: new Concurrency({ limit: 3 }),
  };
  const keys = [
    Number.NaN,
    Number.POSITIVE_INFINITY,
    Number.NEGATIVE_INFINITY,
    null,
    {},
    [],
    true,
    10n,
    Symbol('k'),
    () => 1,
    'x'.repeat(5000), // past the 4096-byte key limit
    'é'.repeat(2100), // 4200 bytes of UTF-8 in 2100 characters
  ];
  const permits = [0, -1, 1.5, Number.NaN, '1', null, 101, Number.POSITIVE_INFINITY];
  const compare = [];
  const same = async (label, mine, theirs) => {
    let expected;
    try {
      mine();
      expected = 'no error';
    } catch (e) {
      expected = describeError(e);
    }
    const got = await theirs().then(() => 'no error', describeError);
    compare.push({ label, expected, got });
  };
  for (const [i, k] of keys.entries()) {
    await same(
      `api.tryAcquire(key ${i})`,
      () => local.api.tryAcquire(k),
      () => api.tryAcquire(k),
    );
    await same(
      `api.consume(key ${i})`,
      () => local.api.consume(k),
      () => api.consume(k),
    );
    await same(
      `api.refund(key ${i})`,
      () => local.api.refund(k),
      () => api.refund(k),
    );
    await same(
      `api.stats(key ${i})`,
      () => local.api.stats(k),
      () => api.stats(k),
    );
    await same(
      `api.reset(key ${i})`,
      () => local.api.reset(k),
      () => api.reset(k),
    );
    await same(
      `sem.release(key ${i})`,
      () => local.sem.release(k),
      () => sem.release(k),
    );
  }
  for (const [i, p] of permits.entries()) {
    await same(
      `api.tryAcquire(permits ${i})`,
      () => local.api.tryAcquire('k', p),
      () => api.tryAcquire('k', p),
    );
    await same(
      `api.refund(permits ${i})`,
      () => local.api.refund('k', p),
      () => api.refund('k', p),
    );
    await same(
      `sem.release(permits ${i})`,
      () => local.sem.release('k', p),
      () => sem.release('k', p),
    );
  }
  // Through permit blocks too: the local path must not spend bad permits.
  const blocked = connectCluster('api', { block: 4 });
  await blocked.tryAcquire('k'); // a block for 'k' is there now
  for (const [i, p] of permits.entries()) {
    await same(
      `blocked.tryAcquire(permits ${i})`,
      () => local.api.tryAcquire('k', p),
      () => blocked.tryAcquire('k', p),
    );
    await same(
      `blocked.consume(permits ${i})`,
      () => local.api.consume('k', p),
      () => blocked.consume('k', p),
    );
  }
  for (const [i, k] of keys.entries()) {
    await same(
      `blocked.consume(key ${i})`,
      () => local.api.consume(k),
      () => blocked.consume(k),
    );
  }
  // acquire() rejects (never throws) in memory: compare the rejections.
  for (const [i, k] of keys.entries()) {
    const expected = await local.api.acquire(k).then(() => 'no error', describeError);
    const got = await api.acquire(k).then(() => 'no error', describeError);
    compare.push({ label: `api.acquire(key ${i})`, expected, got });
  }
  // chain() takes cluster clients once described (it reads their limit).
  const chained = await chain(api, win).consume('chained', 2);
  const chainResult = {
    allowed: chained.allowed,
    limit: chained.limit,
    members: chained.decisions.map((d) => [d.allowed, d.limit]),
  };
  const mismatches = compare.filter((c) => JSON.stringify(c.expected) !== JSON.stringify(c.got));
  const refusals = compare.filter((c) => c.got !== 'no error').length;
  process.send({
    done: true,
    before,
    described,
    mismatches,
    compared: compare.length,
    refusals,
    chainResult,
    readyIsSelf,
  });
} else if (scenario === 'closed') {
  if (process.env.ROLE === 'next') {
    const other = connectCluster('other');
    process.send({ done: true, granted: await other.tryAcquire() });
  } else {
    const sem = connectCluster('sem');
    await sem.acquire('k');
    await sem.tryAcquire('k');
    sem.acquire('k').catch(() => {}); // queued: the limit is 2
    while ((await sem.stats('k')).queued !== 1);
    process.send({ holding: true });
  }
} else if (scenario === 'abort') {
  const sem = connectCluster('sem');
  const lease = await sem.acquire('k');
  const controller = new AbortController();
  const waiting = sem.acquire('k', 1, { signal: controller.signal });
  while ((await sem.stats('k')).queued !== 1);
  controller.abort();
  const outcome = await waiting.then(() => 'granted', describeError);
  const queuedAfterAbort = (await sem.stats('k')).queued;
  lease.release();
  lease.release(); // twice: one release only
  const heldAfterRelease = await sem.stats('k');
  const timedOut = await sem.acquire('k', 1, { timeoutMs: 0 }).then((l) => {
    l.release();
    return 'granted';
  }, describeError);
  await sem.stats('k'); // the lease's drop travels before this answer
  process.send({
    done: true,
    outcome,
    queuedAfterAbort,
    availableAfterRelease: heldAfterRelease.available,
    timedOut,
  });
} else if (scenario === 'blockrace') {
  const api = connectCluster('api', { block: 8 });
  await api.ready();
  const results = await Promise.all(
    Array.from({ length: 40 }, (_, i) => (i % 2 ? api.tryAcquire('k') : api.consume('k'))),
  );
  const allowed = results.filter((r) => r === true || r?.allowed === true).length;
  api.close(); // gives back what its block still holds
  await connectCluster('api').stats('k'); // the give-back travels before this answer
  process.send({ done: true, allowed });
} else if (scenario === 'blocks') {
  const api = connectCluster('api', { block: 10 });
  // consume() through blocks: 25 permits in all, then refusals that say why.
  const decisions = [];
  for (let i = 0; i < 30; i++) decisions.push(await api.consume('c'));
  const allowed = decisions.filter((d) => d.allowed).length;
  const refused = decisions.find((d) => !d.allowed);
  // acquire() through blocks: 25 at once from the blocks, then one waits at the primary.
  let leases = 0;
  for (let i = 0; i < 25; i++) {
    await api.acquire('a');
    leases++;
  }
  const waiting = api.acquire('a', 1, { timeoutMs: 60_000 });
  const probe = connectCluster('api');
  while ((await probe.stats('a')).queued !== 1);
  process.send({ waiting: true });
  await waiting;
  leases++;
  const sem = connectCluster('sem', { block: 4 });
  const semError = await sem.tryAcquire().then(() => 'no error', describeError);
  api.close();
  await probe.stats('c'); // the blocks' give-back travels before this answer
  process.send({
    done: true,
    allowed,
    remainings: decisions.slice(0, 12).map((d) => d.remaining),
    refused: {
      reason: refused?.reason,
      retryFinite: Number.isFinite(refused?.retryAfterMs) && refused?.retryAfterMs > 0,
    },
    leases,
    semError,
  });
}
