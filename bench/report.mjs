// Turns the measurements into ratios and console tables. Every ratio is a cost ratio:
// ×floor = our time per decision ÷ the floor's time per operation (1 is the floor itself);
// for peers, peer ÷ ours = the peer's time per decision ÷ ours (above 1: ours is faster).
import { fmtNs, fmtOps, fmtRatio, KEYS, median, redisRatioRow, redisRow, table } from './lib.mjs';

const PEERS = ['limiter', 'rate-limiter-flexible', 'bottleneck'];
const SHORT = { limiter: 'limiter', 'rate-limiter-flexible': 'rlf', bottleneck: 'bottleneck' };

// ---- native-bench figures used as floors --------------------------------------------------

/** Picks the floors out of native-bench's figures; a missing figure is undefined. */
export function nativeFloors(figures = {}) {
  const ns = (name) => figures[name]?.medianNs;
  const ops = (name) => figures[name]?.opsPerSec;
  const sum = (a, b) => (ns(a) !== undefined && ns(b) !== undefined ? ns(a) + ns(b) : undefined);
  const busy = (name) => /MACHINE BUSY/.test(figures[name]?.note ?? '');
  return {
    oneKey: {
      ns: sum('clock.calibrated.int32', 'atomics.gcra.i32.plain-read'),
      from: 'clock.calibrated.int32 + atomics.gcra.i32.plain-read',
    },
    manyKeys: { ns: ns('layout.keyed-floor.100k'), from: 'layout.keyed-floor.100k' },
    contention: {
      js: {
        1: ops('layout.contention.1-thread'),
        own: ops('layout.contention.separate-lines'),
        hot: ops('layout.contention.same-word'),
        busy: busy('layout.contention.same-word'),
      },
      c11: {
        1: ops('c11.contention.1-thread'),
        own: ops('c11.contention.separate-lines'),
        hot: ops('c11.contention.same-word'),
        busy: busy('c11.contention.same-word'),
      },
    },
    wake: {
      ns: ns('wake.roundtrip.waitAsync.worker'),
      p99Ns: figures['wake.roundtrip.waitAsync.worker']?.p99Ns,
      from: 'wake.roundtrip.waitAsync.worker',
    },
  };
}

/** The native CAS-contention floor (ops/s) matching a thread run, where one was measured. */
function contentionFloor(c, threads, workload) {
  if (threads === 1) return c[1];
  if (threads === 2) return workload === 'hot key' ? c.hot : c.own;
  return undefined; // native-bench measures one and two threads
}

// ---- analysis -----------------------------------------------------------------------------

/** Adds floors and ratios to the rows of every latency child; returns the flat row list. */
export function analyzeLatency(children, floors) {
  const rows = [];
  const floorsByProcess = [];
  for (const child of children) {
    // Each condition (latency.mjs) has floors of its own, measured in the same passes.
    const floorOf = (keys, condition) =>
      child.rows.find((r) => r.kind === 'floor' && r.keys === keys && r.condition === condition);
    const f1 = floorOf(1, 'one class');
    const fk = floorOf(KEYS, 'one class');
    floorsByProcess.push({
      process: child.subject,
      oneKeyP50Ns: f1.p50Ns,
      manyKeysP50Ns: fk.p50Ns,
    });
    for (const r of child.rows) {
      if (r.kind === 'floor') continue;
      const floor = floorOf(r.keys === 1 ? 1 : KEYS, r.condition);
      const native = r.keys === 1 ? floors.oneKey.ns : floors.manyKeys.ns;
      rows.push({
        ...r,
        floorP50Ns: floor.p50Ns,
        ratioToFloor: r.p50Ns / floor.p50Ns,
        nativeFloorNs: native,
        ratioToNativeFloor: native === undefined ? undefined : r.p50Ns / native,
      });
    }
  }
  // peer ÷ ours, per peer, on the same outcome and key count.
  for (const r of rows) {
    if (r.kind !== 'ours') continue;
    r.peerOverOurs = {};
    for (const peer of PEERS) {
      const p = rows.find(
        (x) => x.subject === peer && x.primary && x.outcome === r.outcome && x.keys === r.keys,
      );
      if (p) r.peerOverOurs[peer] = p.p50Ns / r.p50Ns;
    }
  }
  const coarseChild = children.find((c) => c.notes?.idle);
  const coarse = coarseChild && coarseSummary(coarseChild.notes, rows);
  return { rows, floorsByProcess, coarse };
}

// Our TokenBucket on a CoarseClock against `limiter` measured beside it (same process), and
// against our TokenBucket on the precise clock (its own process).
function coarseSummary(notes, rows) {
  const p50 = (pick) => rows.find(pick)?.p50Ns;
  const perKeys = [1, KEYS].map((keys) => {
    const ours = p50(
      (r) => r.kind === 'ours' && r.subject === 'TokenBucket on CoarseClock' && r.keys === keys,
    );
    const limiter = p50((r) => r.kind === 'beside' && r.subject === 'limiter' && r.keys === keys);
    const precise = p50(
      (r) =>
        r.kind === 'ours' &&
        r.subject === 'TokenBucket' &&
        r.outcome === 'allowed' &&
        r.keys === keys,
    );
    const ratio = limiter / ours;
    return {
      keys,
      oursNs: ours,
      limiterNs: limiter,
      limiterOverOurs: ratio,
      preciseNs: precise,
      preciseOverCoarse: precise / ours,
    };
  });
  const read = (name) => p50((r) => r.subject === 'clock read' && r.name === name);
  return {
    ...notes,
    perKeys,
    readNs: { coarse: read('CoarseClock.nowUs()'), precise: read('MonotonicClock.nowUs()') },
  };
}

export function analyzeThreads(threads, floors) {
  const { entries } = threads;
  for (const e of entries) {
    if (e.subject === 'floor') continue;
    const inRun = entries.find(
      (x) => x.subject === 'floor' && x.workload === e.workload && x.threads === e.threads,
    );
    e.floorOpsPerSec = inRun?.opsPerSec;
    e.ratioToFloor = inRun ? inRun.opsPerSec / e.opsPerSec : undefined;
    const js = contentionFloor(floors.contention.js, e.threads, e.workload);
    const c11 = contentionFloor(floors.contention.c11, e.threads, e.workload);
    e.casFloorOpsPerSec = js;
    e.ratioToCasFloor = js === undefined ? undefined : js / e.opsPerSec;
    e.c11FloorOpsPerSec = c11;
    e.ratioToC11Floor = c11 === undefined ? undefined : c11 / e.opsPerSec;
  }
  return threads;
}

// ---- console report -----------------------------------------------------------------------

function nativeSection(floors, nativeSource) {
  const c = floors.contention;
  const rows = [
    ['clock + Int32 GCRA CAS (1 key)', fmtNs(floors.oneKey.ns), floors.oneKey.from],
    ['Map.get + clock + GCRA CAS (100k keys)', fmtNs(floors.manyKeys.ns), floors.manyKeys.from],
    ['CAS loop, 1 thread', fmtOps(c.js[1]), 'layout.contention.1-thread'],
    ['CAS loop, 2 threads, separate lines', fmtOps(c.js.own), 'layout.contention.separate-lines'],
    [
      'CAS loop, 2 threads, one word',
      fmtOps(c.js.hot),
      `layout.contention.same-word${c.js.busy ? ' (native-bench: MACHINE BUSY)' : ''}`,
    ],
    ['C11 CAS, 1 thread', fmtOps(c.c11[1]), 'c11.contention.1-thread'],
    ['C11 CAS, 2 threads, separate lines', fmtOps(c.c11.own), 'c11.contention.separate-lines'],
    ['C11 CAS, 2 threads, one word', fmtOps(c.c11.hot), 'c11.contention.same-word'],
    [
      'waitAsync → notify round trip (p50)',
      fmtNs(floors.wake.ns),
      `${floors.wake.from}: the floor of acquire()`,
    ],
  ];
  return [
    `== Floor from native-bench (${nativeSource})`,
    table(
      [
        { title: 'floor', align: 'left' },
        { title: 'median', align: 'right' },
        { title: 'native-bench figure', align: 'left' },
      ],
      rows,
    ),
  ].join('\n');
}

function latencySection(latency) {
  const ours = latency.rows.filter((r) => r.kind === 'ours');
  const cols = [
    { title: 'workload (ours)', align: 'left' },
    { title: 'mean', align: 'right' },
    { title: 'p50', align: 'right' },
    { title: 'p99', align: 'right' },
    { title: '×floor', align: 'right' },
    { title: '×native', align: 'right' },
    ...PEERS.map((p) => ({ title: `${SHORT[p]}÷ours`, align: 'right' })),
  ];
  const rows = ours.map((r) => [
    r.name,
    fmtNs(r.meanNs),
    fmtNs(r.p50Ns),
    fmtNs(r.p99Ns),
    fmtRatio(r.ratioToFloor),
    fmtRatio(r.ratioToNativeFloor),
    ...PEERS.map((p) => fmtRatio(r.peerOverOurs[p])),
  ]);
  const peers = latency.rows.filter((r) => r.kind === 'peer');
  const peerRows = peers.map((r) => [
    r.name,
    fmtNs(r.meanNs),
    fmtNs(r.p50Ns),
    fmtNs(r.p99Ns),
    fmtRatio(r.ratioToFloor),
    fmtRatio(r.ratioToNativeFloor),
    r.primary ? 'yes' : '-',
  ]);
  const fp = latency.floorsByProcess;
  return [
    '== Per decision, one thread',
    'p50 / p99 over tinybench samples of 1000 calls (bottleneck: 1 call); ×floor = p50 ÷ the',
    'floor measured in the same process; ×native = p50 ÷ the native-bench floor above;',
    'peer÷ours = the peer p50 ÷ our p50 on the same workload (above 1: ours is faster).',
    'Conditions: plain rows in a process where only that class has run; "after all six',
    'classes": the same loops again once all six classes have done work in that process (as',
    'in an application that combines them), beside floors measured again in the same passes.',
    '',
    table(cols, rows),
    '',
    '== Peers, same run (each in a process of its own, beside the same floors)',
    table(
      [
        { title: 'workload (peer)', align: 'left' },
        { title: 'mean', align: 'right' },
        { title: 'p50', align: 'right' },
        { title: 'p99', align: 'right' },
        { title: '×floor', align: 'right' },
        { title: '×native', align: 'right' },
        { title: 'in peer÷ours', align: 'left' },
      ],
      peerRows,
    ),
    '',
    `== In-process floors (p50; spread across processes: 1 key ${fmtNs(Math.min(...fp.map((x) => x.oneKeyP50Ns)))}–${fmtNs(Math.max(...fp.map((x) => x.oneKeyP50Ns)))}, 100k keys ${fmtNs(Math.min(...fp.map((x) => x.manyKeysP50Ns)))}–${fmtNs(Math.max(...fp.map((x) => x.manyKeysP50Ns)))})`,
    table(
      [
        { title: 'process', align: 'left' },
        { title: 'clock + CAS, 1 key', align: 'right' },
        { title: 'Map.get + clock + CAS, 100k keys', align: 'right' },
      ],
      fp.map((x) => [x.process, fmtNs(x.oneKeyP50Ns), fmtNs(x.manyKeysP50Ns)]),
    ),
  ].join('\n');
}

function coarseSection(c) {
  const us = (x) => `${(x / 1000).toFixed(2)} ms`;
  const lag = (x) => `p50 ${us(x.p50Us)}, p99 ${us(x.p99Us)}, max ${us(x.maxUs)}`;
  return [
    `== CoarseClock (resolutionMs ${c.resolutionMs}): our TokenBucket on it, beside limiter's TokenBucket in one process`,
    table(
      [
        { title: 'workload (allowed)', align: 'left' },
        { title: 'ours on CoarseClock', align: 'right' },
        { title: 'limiter', align: 'right' },
        { title: 'limiter÷ours', align: 'right' },
        { title: 'ours, precise clock (own process)', align: 'right' },
      ],
      c.perKeys.map((k) => [
        k.keys === 1 ? '1 key' : `${k.keys / 1000}k keys`,
        fmtNs(k.oursNs),
        fmtNs(k.limiterNs),
        fmtRatio(k.limiterOverOurs),
        `${fmtNs(k.preciseNs)} (${fmtRatio(k.preciseOverCoarse)}×)`,
      ]),
    ),
    `clock read p50: CoarseClock.nowUs() ${fmtNs(c.readNs.coarse)}, MonotonicClock.nowUs() ${fmtNs(c.readNs.precise)}`,
    `staleness (precise − coarse, sampled while reading; machine load average ${c.loadAverage1m.toFixed(1)}): idle ${lag(c.idle)}; ${c.loaded.busyThreads} threads spinning on every core ${lag(c.loaded)}`,
  ].join('\n');
}

function threadsSection(threads) {
  const rows = threads.entries.map((e) => [
    e.subject,
    e.workload,
    String(e.threads),
    fmtOps(e.opsPerSec),
    fmtRatio(e.vsOneThread),
    fmtNs((1e9 * e.threads) / e.opsPerSec),
    e.subject === 'floor' ? '-' : `${(e.admittedFraction * 100).toFixed(1)}%`,
    fmtRatio(e.ratioToFloor),
    fmtRatio(e.ratioToCasFloor),
    fmtRatio(e.ratioToC11Floor),
    `${e.cpuShare.toFixed(2)}${e.busy ? ' BUSY' : ''}`,
    `${e.validRounds}/${e.totalRounds}`,
  ]);
  return [
    '== Throughput over threads (one shared limiter; piscina pool, shared-buffer barrier)',
    `median of ${threads.rounds} rounds of ${threads.durationMs} ms; own key = each thread its own key, hot key = all`,
    'threads one key. ×1 thread = aggregate ÷ the same workload on one thread. ×floor = the',
    'in-run floor (clock + GCRA CAS, own word / one shared word) ÷ ours; ×CAS / ×C11 = the',
    'native-bench CAS-contention figure for that thread count ÷ ours (native-bench measures 1',
    'and 2 threads). cpu share = process CPU time ÷ (wall × threads); a round below 0.9 (the',
    'threads did not all have a core) is retried, and rounds ok counts those kept; BUSY: none',
    'cleared, the figure uses them all.',
    '',
    table(
      [
        { title: 'subject', align: 'left' },
        { title: 'workload', align: 'left' },
        { title: 'threads', align: 'right' },
        { title: 'decisions/s', align: 'right' },
        { title: '×1 thread', align: 'right' },
        { title: 'ns/decision/thread', align: 'right' },
        { title: 'admitted', align: 'right' },
        { title: '×floor', align: 'right' },
        { title: '×CAS', align: 'right' },
        { title: '×C11', align: 'right' },
        { title: 'cpu share', align: 'right' },
        { title: 'rounds ok', align: 'right' },
      ],
      rows,
    ),
  ].join('\n');
}

function effectiveSection(effective) {
  const subjects = Object.keys(effective.entries[0].admitted);
  const rows = effective.entries.map((e) => [
    String(e.threads),
    ...subjects.map((s) => {
      const n = e.admitted[s];
      return `${n} (${fmtRatio(n / e.limit)}×L)`;
    }),
  ]);
  return [
    `== Effective limit: limit L = ${effective.limit} per window on one key, each thread tries ${effective.attemptsPerThread} times`,
    'Ours: one limiter shared by handle + attach, clock frozen (ManualClock). Peers: a limiter',
    'per thread, as each worker builds its own; windows of one hour. Admitted in total:',
    '',
    table(
      [
        { title: 'threads', align: 'right' },
        ...subjects.map((s) => ({ title: s, align: 'right' })),
      ],
      rows,
    ),
  ].join('\n');
}

/** The whole console report. */
export function formatReport(result) {
  const out = [];
  const m = result.machine;
  out.push(
    `atomic-limiter bench (${result.quick ? 'quick' : 'full'}): Node ${m.node}, ${m.cpus} CPUs (${m.model}), threads 1…${result.maxThreads}, ${result.date}`,
  );
  if (result.floors) out.push('', nativeSection(result.floors, result.nativeSource));
  if (result.latency) out.push('', latencySection(result.latency));
  if (result.latency?.coarse) out.push('', coarseSection(result.latency.coarse));
  if (result.threads) out.push('', threadsSection(result.threads));
  if (result.effective) out.push('', effectiveSection(result.effective));
  if (result.acquire) out.push('', acquireSection(result.acquire, result.floors?.wake));
  if (result.cluster) out.push('', clusterSection(result.cluster, result.nativeFigures));
  if (result.http) out.push('', httpSection(result.http));
  if (result.redis) out.push('', redisSection(result.redis));
  if (result.fleet) out.push('', fleetSection(result.fleet));
  return out.join('\n');
}

/** Median in-process floor over every child, per key count (for the chart). */
export function medianFloors(latency) {
  return {
    oneKey: median(latency.floorsByProcess.map((x) => x.oneKeyP50Ns)),
    manyKeys: median(latency.floorsByProcess.map((x) => x.manyKeysP50Ns)),
  };
}

function acquireSection(a, wake) {
  const floor =
    wake?.ns === undefined
      ? 'floor not measured'
      : `floor: waitAsync → notify round trip ${fmtNs(wake.ns)} p50 / ${fmtNs(wake.p99Ns)} p99`;
  const us = (x) => `${x.toFixed(1)} µs`;
  return [
    '== acquire()',
    `free permit: await acquire() ${fmtNs(a.free.acquireNs)} vs tryAcquire ${fmtNs(a.free.tryNs)} + await resolved promise ${fmtNs(a.free.resolvedNs)}: ${a.free.ratio.toFixed(2)}×`,
    `release → queued waiter resumed, one thread:    p50 ${us(a.wake.sameThread.p50Us)}  p99 ${us(a.wake.sameThread.p99Us)}`,
    `release → queued waiter resumed, across threads: p50 ${us(a.wake.crossThread.p50Us)}  p99 ${us(a.wake.crossThread.p99Us)}  (${floor}; ${a.wake.samples} samples)`,
  ].join('\n');
}

function clusterSection(c, nativeFigures = {}) {
  const us = (x) => fmtNs(x * 1000);
  const row = (name, x) => [
    name,
    us(x.oneAtATime.p50Us),
    us(x.oneAtATime.p99Us),
    us(x.inFlight64.perCallUs),
    us(x.inFlight64.workerCpuUs),
    us(x.inFlight64.primaryCpuUs),
  ];
  const f = c.floors;
  const r = c.ratios;
  const native = nativeFigures['ipc.roundtrip.process-send'];
  return [
    `== Cluster: a worker process asking the primary's limiter over IPC (node:cluster; plain calls, the peer and the floors in one worker, permit blocks in another; every call allowed)`,
    `one at a time: each call awaited before the next, p50 / p99 per call. ${c.inFlight} in flight: ${c.inFlight} loops each`,
    'awaiting its own calls; per call = wall ÷ calls, and the CPU time the worker and the primary',
    `spent per call meanwhile. Both libraries in one cluster, every subject measured in turn, ${c.rounds} rounds per run, ${c.runs} run(s), samples pooled;`,
    `rlf ÷ ours with ${c.inFlight} in flight: the median of the rounds' own ratios.`,
    '',
    table(
      [
        { title: 'subject', align: 'left' },
        { title: 'p50', align: 'right' },
        { title: 'p99', align: 'right' },
        { title: `${c.inFlight} in flight`, align: 'right' },
        { title: 'worker CPU', align: 'right' },
        { title: 'primary CPU', align: 'right' },
      ],
      [
        row('atomic-limiter/cluster tryAcquire (batched)', c.ours.tryAcquire),
        row('atomic-limiter/cluster consume (a Decision)', c.ours.consume),
        row(
          `atomic-limiter/cluster tryAcquire, blocks of ${c.permitBlocks.block}`,
          c.ours.tryAcquireBlocks,
        ),
        ...(c.ours.consumeBlocks
          ? [
              row(
                `atomic-limiter/cluster consume, blocks of ${c.permitBlocks.block}`,
                c.ours.consumeBlocks,
              ),
              row(
                `atomic-limiter/cluster acquire, blocks of ${c.permitBlocks.block}`,
                c.ours.acquireBlocks,
              ),
            ]
          : []),
        row('rate-limiter-flexible RateLimiterCluster consume', c.rlf.consume),
        row('floor: process.send echo', f.echo),
        row('floor: batched echo (one message per tick)', f.batchedEcho),
      ],
    ),
    '',
    `rlf ÷ ours, tryAcquire: one at a time ${fmtRatio(r.oneAtATimeP50)}×, ${c.inFlight} in flight ${fmtRatio(r.inFlight64)}× (consume: ${fmtRatio(r.consumeOneAtATimeP50)}× / ${fmtRatio(r.consumeInFlight64)}×)`,
    `ours ÷ floor: one at a time ${fmtRatio(c.overFloor.oneAtATimeP50)}× the echo, ${c.inFlight} in flight ${fmtRatio(c.overFloor.inFlight64)}× the batched echo${native ? `; native-bench process.send round trip ${fmtNs(native.medianNs)} p50` : ''}`,
    `permit blocks of ${c.permitBlocks.block}: mean ${fmtNs(c.ours.tryAcquireBlocks.oneAtATime.meanUs * 1000)} per decision one at a time, ${fmtNs(c.ours.tryAcquireBlocks.inFlight64.perCallUs * 1000)} with ${c.inFlight} in flight. The trade: up to ${c.permitBlocks.block} permits per worker and key sit in a block, unavailable to other workers until spent or given back (after blockTtlMs, or on close()).`,
    ...(r.blocksInFlight64
      ? [
          `rlf ÷ ours with blocks (a worker of their own: median ÷ median), ${c.inFlight} in flight: tryAcquire ${fmtRatio(r.blocksInFlight64.tryAcquire)}×, consume ${fmtRatio(r.blocksInFlight64.consume)}×, acquire ${fmtRatio(r.blocksInFlight64.acquire)}×; one at a time (mean): ${fmtRatio(r.blocksOneAtATimeMean.tryAcquire)}× / ${fmtRatio(r.blocksOneAtATimeMean.consume)}× / ${fmtRatio(r.blocksOneAtATimeMean.acquire)}×`,
        ]
      : []),
  ].join('\n');
}

function httpSection(h) {
  const us = (x) => (x === undefined ? '-' : `${x.toFixed(1)} µs`);
  const verdict = (j) =>
    j.withinNoise ? `within the noise (${fmtRatio(j.ratio ?? 0)})` : fmtRatio(j.ratio);
  return [
    `== HTTP middleware: "hello world", every subject keyed by an x-key header (1 key, or 10 000 in turn); medians of ${h.rounds} round(s)`,
    `Under load: autocannon, ${h.connections} connections, pipelining ${h.pipelining}, ${h.durationS} s per load; ${h.pinned ? 'servers pinned to CPU 0, load generator to CPU 1' : 'not pinned (no taskset or one CPU)'};`,
    'rounds of none / ours / peer / none; each limiter with its default fields. Per request, against the',
    "no-limiter loads of the same round: wall = 1/rps − 1/rps(none); CPU = server CPU time − none's;",
    'in situ = median time from just before the limiter to the handler − none\'s. "busy" = server CPU ÷ wall.',
    '',
    table(
      [
        { title: 'framework', align: 'left' },
        { title: 'limiter', align: 'left' },
        { title: 'keys', align: 'right' },
        { title: 'requests/s', align: 'right' },
        { title: 'busy', align: 'right' },
        { title: 'wall overhead', align: 'right' },
        { title: 'server CPU', align: 'right' },
        { title: 'CPU overhead', align: 'right' },
        { title: 'in situ', align: 'right' },
        { title: 'in situ overhead', align: 'right' },
      ],
      h.rows.map((r) => [
        r.framework,
        r.subject,
        String(r.keys),
        String(Math.round(r.rps)),
        fmtRatio(r.serverBusy),
        us(r.overheadUs),
        us(r.serverCpuUs),
        us(r.cpuOverheadUs),
        us(r.inSituUs),
        us(r.inSituOverheadUs),
      ]),
    ),
    '',
    'In process (no network; the subjects take turns in batches in one process): Express, the middleware',
    "alone on real req/res objects made Express's own; Fastify, the app's request handler on real ones.",
    '',
    table(
      [
        { title: 'framework', align: 'left' },
        { title: 'limiter', align: 'left' },
        { title: 'keys', align: 'right' },
        { title: 'CPU per request', align: 'right' },
        { title: 'overhead', align: 'right' },
      ],
      h.inProcessRows.map((r) => [
        r.framework,
        r.subject,
        String(r.keys),
        us(r.cpuUs),
        r.subject === 'no limiter' ? '-' : us(r.overheadUs),
      ]),
    ),
    '',
    "our overhead ÷ the peer's (noise = median change between the two no-limiter loads of a round):",
    ...h.ratios.map(
      (g) =>
        `  ${g.framework}, ${g.keys} key(s), vs ${g.peer}: in situ ${verdict(g.inSitu)} [noise ${us(g.inSitu.noiseUs)}], mean ${verdict(g.inSituMean)}; CPU ${verdict(g.cpu)} [noise ${us(g.cpu.noiseUs)}]; wall ${verdict(g.wall)} [noise ${us(g.wall.noiseUs)}]; in process ${verdict(g.inProcess)}${g.inProcessDraft6 ? `, same draft-6 fields ${verdict(g.inProcessDraft6)}` : ''}`,
    ),
    ...(h.ratios.some((g) => g.least)
      ? [
          "in process, the least a limiter writing draft 8's two fields adds: our two fields (ours − ours with",
          "no fields) + a bare consume() of the same limiter, ÷ the peer's overhead:",
          ...h.ratios
            .filter((g) => g.least)
            .map(
              (g) =>
                `  ${g.framework}, ${g.keys} key(s): ${us(g.least.fieldsUs)} + ${us(g.least.decisionUs)} = ${us(g.least.ours)} ÷ ${us(g.least.peer)} = ${g.least.ratio === undefined ? '-' : g.least.ratio.toFixed(2)}`,
            ),
        ]
      : []),
  ].join('\n');
}

function redisSection(r) {
  if (r.skipped) return `== Redis: skipped (${r.skipped})`;
  const us = (x) => fmtNs(x * 1000);
  const row = (name, x) => redisRow(name, x, us);
  const rows = (w) => {
    const s = r.workloads[w].subjects;
    return [
      row('  atomic-limiter/redis TokenBucket tryAcquire', s.tryAcquire),
      row('  atomic-limiter/redis TokenBucket consume (a Decision)', s.consume),
      row('  rate-limiter-flexible RateLimiterRedis consume', s.rlf),
      row('  floor: EVALSHA return 1', s.floor),
      row('  state floor: TIME, GET, SET … KEEPTTL', s.stateFloor),
    ];
  };
  const h = r.workloads.hotKey.ratios;
  const m = r.workloads.manyKeys.ratios;
  const ratio = (name, k) => redisRatioRow(r, name, k);
  const c = r.commands;
  const d = r.down;
  const ms = (x) => (x === null || x === undefined ? '-' : fmtNs(x * 1e6));
  return [
    '== Redis: one redis-server on loopback, one ioredis client per subject, every call allowed',
    `one at a time: each call awaited before the next, p50 / p99. ${r.inFlight} in flight: ${r.inFlight} loops each awaiting`,
    `its own calls; per call = wall ÷ calls. ${r.keys} keys: each call the next key of a fixed pseudo-random sequence.`,
    `Medians of ${r.rounds} shuffled rounds (in flight: ${r.inFlightRounds}); time ratios: medians of the rounds' own.`,
    "Floor: EVALSHA of 'return 1'. State floor: a script of TIME, GET, SET … KEEPTTL alone (a constant value).",
    `Redis CPU per decision: INFO commandstats usec of the commands the subject sends (ours: ${c.tryAcquire.join(', ')};`,
    `rlf: ${c.rlf.join(', ')}) ÷ decisions, after CONFIG RESETSTAT; CPU ratios: of the totals.`,
    '',
    table(
      [
        { title: 'subject', align: 'left' },
        { title: 'p50', align: 'right' },
        { title: 'p99', align: 'right' },
        { title: `${r.inFlight} in flight`, align: 'right' },
        { title: 'Redis CPU: one at a time', align: 'right' },
        { title: 'in flight', align: 'right' },
      ],
      ['one hot key', ...rows('hotKey'), `${r.keys} keys`, ...rows('manyKeys')],
    ),
    '',
    table(
      [
        { title: 'ours ÷ …', align: 'left' },
        { title: 'hot key: tryAcquire', align: 'right' },
        { title: 'consume', align: 'right' },
        { title: `${r.keys} keys: tryAcquire`, align: 'right' },
        { title: 'consume', align: 'right' },
      ],
      [
        ratio(`rlf, ${r.inFlight} in flight (per call)`, 'InFlightOverRlf'),
        ratio('rlf, one at a time (p50)', 'OverRlf'),
        ratio('state floor, one at a time (p50)', 'OverStateFloor'),
        ratio('floor, one at a time (p50)', 'OverFloor'),
        ratio('rlf, Redis CPU one at a time', 'CpuOverRlf'),
        ratio(`rlf, Redis CPU ${r.inFlight} in flight`, 'CpuInFlightOverRlf'),
      ],
    ),
    `state floor ÷ floor, one at a time: hot key ${fmtRatio(h.stateFloorOverFloor)}×, ${r.keys} keys ${fmtRatio(m.stateFloorOverFloor)}× (the least any stored decision costs)`,
    '',
    ...(d
      ? [
          `Redis down (a redis-server of its own, SIGKILLed; TokenBucket whenUnavailable 'allow', timeoutMs ${d.timeoutMs}; ioredis defaults):`,
          `  first decision ${ms(d.firstMs)}; the ${d.decisionsWhileDown - 1} after it in ${d.downMs / 1000} s down: median ${ms(d.medianAfterFirstMs)}, p99 ${ms(d.p99AfterFirstMs)}`,
          `  back on Redis ${ms(d.backAfterRestartMs)} after the restarted server's first PONG (${d.decisionsUntilBack} decisions, 1 ms apart, after the restart)`,
        ]
      : []),
  ].join('\n');
}

function fleetSection(r) {
  if (r.skipped) return `== Fleet mode: skipped (${r.skipped})`;
  const s = r.subjects;
  const us = (x) => (x === undefined ? '—' : fmtNs(x * 1000));
  const row = (name, x) => [
    name,
    String(x.decisionsPerSecond),
    us(x.p50Us),
    us(x.p99Us),
    x.redisCallsPer1000.toFixed(1),
  ];
  return [
    `== Fleet mode: ${r.threads} threads of one process on one hot key, each awaiting its calls one at a time`,
    '',
    table(
      [
        { title: 'subject', align: 'left' },
        { title: 'decisions/s', align: 'right' },
        { title: 'p50', align: 'right' },
        { title: 'p99', align: 'right' },
        { title: 'Redis calls / 1000', align: 'right' },
      ],
      [
        row(`TokenBucket, block ${r.block} (threads attach())`, s.fleet),
        ...(s.fleetGrown
          ? [row(`  same, maxBlock: ${8 * r.block} (leases grow)`, s.fleetGrown)]
          : []),
        ...(s.fleetAhead
          ? [row('  same, leaseAhead: true (up to 2 × block + block / 4 held)', s.fleetAhead)]
          : []),
        ...(s.fleetTurns
          ? [row(`  same, an event-loop turn every 16 decisions`, s.fleetTurns)]
          : []),
        row('TokenBucket, no block', s.plain),
        row('rate-limiter-flexible RateLimiterRedis', s.rlf),
      ],
    ),
    '',
    ...(r.rounds
      ? [
          `block ${r.block} and no block: medians of ${r.rounds} rounds each, taking turns (decisions/s, p50, p99); Redis calls over all rounds`,
        ]
      : []),
    `fleet ÷ plain: ${fmtRatio(r.ratios.fleetOverPlain)}×${r.ratios.fleetOverPlainRounds ? ` (median of the rounds' ${r.ratios.fleetOverPlainRounds.map((x) => fmtRatio(x)).join(', ')})` : ''}; fleet ÷ rlf: ${fmtRatio(r.ratios.fleetOverRlf)}×${r.ratios.fleetGrownOverPlain ? `; with maxBlock ${8 * r.block}: ${fmtRatio(r.ratios.fleetGrownOverPlain)}× plain` : ''}${r.ratios.fleetAheadOverPlain ? `; leaseAhead: true: ${fmtRatio(r.ratios.fleetAheadOverPlain)}× plain` : ''}`,
    `refused hot key: ${s.refused.redisCalls} Redis calls in ${Math.round(s.refused.wallMs)} ms for ${s.refused.decisions} decisions (${r.ratios.refusedCallsPerRetryAfter.toFixed(2)} refusals asked per retryAfterMs of 1 s)`,
  ].join('\n');
}
