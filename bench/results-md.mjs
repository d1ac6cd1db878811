// bench/RESULTS.md: the run's figures as Markdown tables, with the date, the machine, the Node
// version and the commit they were measured on. Tables only: what each figure means is in
// bench/README.md. A run of every part writes bench/RESULTS.md and the summary table of the
// top-level README (between its `bench:summary` markers); a quick or partial run writes
// bench/results/RESULTS.md, which is not committed.
import { execFileSync } from 'node:child_process';
import { fmtNs, fmtOps, fmtRatio, redisRatioRow, redisRow } from './lib.mjs';

const PEERS = ['limiter', 'rate-limiter-flexible', 'bottleneck'];

/** `abc1234`, `abc1234 (with uncommitted changes)`, or `unknown` outside a git checkout. */
export function commitOf(cwd) {
  try {
    const git = (...args) => execFileSync('git', args, { cwd, encoding: 'utf8' }).trim();
    const hash = git('rev-parse', '--short', 'HEAD');
    const dirty = git('status', '--porcelain', '--untracked-files=no') !== '';
    return dirty ? `${hash} (with uncommitted changes)` : hash;
  } catch {
    return 'unknown';
  }
}

const cell = (x) => String(x ?? '-').replaceAll('|', '\\|');

/** A Markdown table: `columns` of `{ title, align }`, `rows` of cells. */
function md(columns, rows) {
  const head = `| ${columns.map((c) => cell(c.title)).join(' | ')} |`;
  const rule = `|${columns.map((c) => (c.align === 'right' ? '---:' : '---')).join('|')}|`;
  return [head, rule, ...rows.map((r) => `| ${r.map(cell).join(' | ')} |`)].join('\n');
}
const L = (title) => ({ title, align: 'left' });
const R = (title) => ({ title, align: 'right' });
const us = (x) => (x === undefined || x === null ? '-' : fmtNs(x * 1000));
const keysOf = (k) => (k === 1 ? '1 key' : `${k / 1000}k keys`);

/** The few rows the README shows: ratios to the floor measured in the same process. */
export function summaryTable(result) {
  const rows = [];
  const lat = result.latency?.rows ?? [];
  const ours = (name) => lat.find((r) => r.kind === 'ours' && r.name === name);
  for (const name of [
    'TokenBucket allowed, 1 key',
    'TokenBucket refused, 1 key',
    'TokenBucket allowed, 100k keys',
    'FixedWindow allowed, 1 key',
    'SlidingLog allowed, 1 key',
    'Concurrency acquire+release, 1 key',
  ]) {
    const r = ours(name);
    if (!r) continue;
    rows.push([
      `in memory: ${name}`,
      fmtNs(r.p50Ns),
      `${fmtRatio(r.ratioToFloor)}× the floor`,
      r.peerOverOurs?.limiter === undefined
        ? '-'
        : `limiter ${fmtRatio(r.peerOverOurs.limiter)}×, rate-limiter-flexible ${fmtRatio(r.peerOverOurs['rate-limiter-flexible'])}×`,
    ]);
  }
  const hot = result.threads?.entries?.find(
    (e) => e.subject === 'TokenBucket' && e.workload === 'own key' && e.threads === 2,
  );
  if (hot) {
    rows.push([
      'in memory: TokenBucket, 2 threads, a key each',
      `${fmtOps(hot.opsPerSec)} in all`,
      `${fmtRatio(hot.vsOneThread)}× one thread`,
      '-',
    ]);
  }
  const host = result.host;
  if (host?.decision) {
    rows.push([
      'host mode: TokenBucket allowed, 1 key',
      fmtNs(host.decision.hostNs),
      `${fmtRatio(host.decision.ratio)}× between threads`,
      '-',
    ]);
  }
  const c = result.cluster;
  if (c?.ours) {
    rows.push([
      `cluster: tryAcquire, ${c.inFlight} in flight`,
      `${us(c.ours.tryAcquire.inFlight64.perCallUs)} per call`,
      `${fmtRatio(c.overFloor?.inFlight64)}× a batched IPC echo`,
      `rate-limiter-flexible ${fmtRatio(c.ratios.inFlight64)}×`,
    ]);
  }
  const q = result.redis;
  if (q?.workloads) {
    const hot = q.workloads.hotKey;
    const many = q.workloads.manyKeys;
    rows.push([
      'Redis: tryAcquire, one at a time, hot key',
      us(hot.subjects.tryAcquire.p50Us),
      `${fmtRatio(hot.ratios.tryAcquireOverStateFloor)}× the state floor`,
      `rate-limiter-flexible ${fmtRatio(1 / hot.ratios.tryAcquireOverRlf)}×`,
    ]);
    for (const [w, label] of [
      [hot, 'hot key'],
      [many, `${q.keys} keys`],
    ]) {
      rows.push([
        `Redis: tryAcquire, ${q.inFlight} in flight, ${label}`,
        `${us(w.subjects.tryAcquire.inFlightPerCallUs)} per call`,
        '-',
        `rate-limiter-flexible ${fmtRatio(1 / w.ratios.tryAcquireInFlightOverRlf)}×`,
      ]);
    }
    rows.push([
      `Redis CPU per decision: tryAcquire, ${q.inFlight} in flight, ${q.keys} keys`,
      us(many.subjects.tryAcquire.cpuUsPerDecisionInFlight),
      '-',
      `rate-limiter-flexible ${fmtRatio(1 / many.ratios.tryAcquireCpuInFlightOverRlf)}×`,
    ]);
  }
  const f = result.fleet;
  if (f?.subjects) {
    rows.push([
      `fleet mode: block ${f.block}, ${f.threads} threads, one hot key`,
      `${Math.round(f.subjects.fleet.decisionsPerSecond).toLocaleString('en-US')} decisions/s`,
      `${fmtRatio(f.ratios.fleetOverPlain)}× plain Redis`,
      `rate-limiter-flexible ${fmtRatio(f.ratios.fleetOverRlf)}×`,
    ]);
  }
  const h = result.http?.ratios;
  for (const g of h ?? []) {
    if (g.keys !== 1) continue;
    rows.push([
      `HTTP: ${g.framework} middleware, in situ`,
      `${us(g.inSitu.ours)} per request`,
      '-',
      `${g.peer} ${g.inSitu.ours > 0 ? fmtRatio(g.inSitu.peer / g.inSitu.ours) : '-'}×`,
    ]);
  }
  return md(
    [L('workload'), R('ours, p50'), R('ratio'), L('peer ÷ ours (above 1: ours is faster)')],
    rows,
  );
}

function header(result, commit) {
  const m = result.machine;
  return [
    '# Benchmark results',
    '',
    `Generated by \`npm run bench${result.quick ? ' -- --quick' : ''}\`${result.quick ? ' (a quick run: fewer rounds, noisier figures)' : ''}; do not edit. What each figure means: [README.md](README.md).`,
    '',
    md(
      [L(''), L('')],
      [
        ['date', result.date],
        ['machine', `${m.cpus} CPUs, ${m.model}, ${m.platform}`],
        ['Node', m.node],
        ['commit', commit],
        ['run', `${result.quick ? 'quick' : 'full'}, ${result.wallSeconds} s`],
      ],
    ),
  ].join('\n');
}

function latencySection(latency) {
  const ours = latency.rows.filter((r) => r.kind === 'ours');
  const peers = latency.rows.filter((r) => r.kind === 'peer');
  return [
    '## Per decision, one thread',
    '',
    md(
      [L('workload'), R('p50'), R('p99'), R('×floor'), ...PEERS.map((p) => R(`${p} ÷ ours`))],
      ours.map((r) => [
        r.name,
        fmtNs(r.p50Ns),
        fmtNs(r.p99Ns),
        fmtRatio(r.ratioToFloor),
        ...PEERS.map((p) => fmtRatio(r.peerOverOurs?.[p])),
      ]),
    ),
    '',
    '### Peers',
    '',
    md(
      [L('workload'), R('p50'), R('p99'), R('×floor')],
      peers.map((r) => [r.name, fmtNs(r.p50Ns), fmtNs(r.p99Ns), fmtRatio(r.ratioToFloor)]),
    ),
    '',
    '### Floors measured in each process',
    '',
    md(
      [L('process'), R('clock + CAS, 1 key'), R('Map.get + clock + CAS, 100k keys')],
      latency.floorsByProcess.map((x) => [x.process, fmtNs(x.oneKeyP50Ns), fmtNs(x.manyKeysP50Ns)]),
    ),
  ].join('\n');
}

function coarseSection(c) {
  const ms = (x) => `${(x / 1000).toFixed(2)} ms`;
  return [
    `## CoarseClock (resolutionMs ${c.resolutionMs})`,
    '',
    md(
      [
        L('workload (allowed)'),
        R('ours on CoarseClock'),
        R('limiter'),
        R('limiter ÷ ours'),
        R('ours, precise clock'),
      ],
      c.perKeys.map((k) => [
        keysOf(k.keys),
        fmtNs(k.oursNs),
        fmtNs(k.limiterNs),
        fmtRatio(k.limiterOverOurs),
        fmtNs(k.preciseNs),
      ]),
    ),
    '',
    md(
      [L('figure'), R('value')],
      [
        ['CoarseClock.nowUs(), p50', fmtNs(c.readNs.coarse)],
        ['MonotonicClock.nowUs(), p50', fmtNs(c.readNs.precise)],
        ['lag behind the precise clock, p50 / p99', `${ms(c.idle.p50Us)} / ${ms(c.idle.p99Us)}`],
        [
          `lag, ${c.loaded.busyThreads} threads spinning, p50 / p99`,
          `${ms(c.loaded.p50Us)} / ${ms(c.loaded.p99Us)}`,
        ],
      ],
    ),
  ].join('\n');
}

function threadsSection(t) {
  return [
    '## Throughput over threads',
    '',
    md(
      [
        L('subject'),
        L('workload'),
        R('threads'),
        R('decisions/s'),
        R('×1 thread'),
        R('×floor'),
        R('cpu share'),
      ],
      t.entries.map((e) => [
        e.subject,
        e.workload,
        e.threads,
        fmtOps(e.opsPerSec),
        fmtRatio(e.vsOneThread),
        fmtRatio(e.ratioToFloor),
        `${e.cpuShare.toFixed(2)}${e.busy ? ' (busy)' : ''}`,
      ]),
    ),
  ].join('\n');
}

function effectiveSection(e) {
  const subjects = Object.keys(e.entries[0].admitted);
  return [
    `## Effective limit (limit ${e.limit}, each thread tries ${e.attemptsPerThread} times)`,
    '',
    md(
      [R('threads'), ...subjects.map(R)],
      e.entries.map((x) => [x.threads, ...subjects.map((s) => x.admitted[s])]),
    ),
  ].join('\n');
}

function acquireSection(a, wake) {
  return [
    '## acquire()',
    '',
    md(
      [L('figure'), R('value')],
      [
        ['await acquire(), a permit free', fmtNs(a.free.acquireNs)],
        ['tryAcquire() + await of a resolved promise', fmtNs(a.free.tryNs + a.free.resolvedNs)],
        [
          'release → waiter resumed, one thread, p50 / p99',
          `${us(a.wake.sameThread.p50Us)} / ${us(a.wake.sameThread.p99Us)}`,
        ],
        [
          'release → waiter resumed, across threads, p50 / p99',
          `${us(a.wake.crossThread.p50Us)} / ${us(a.wake.crossThread.p99Us)}`,
        ],
        ['floor: waitAsync → notify round trip, p50', fmtNs(wake?.ns)],
      ],
    ),
  ].join('\n');
}

function growthSection(g) {
  return [
    `## Growing key table (${g.keys} keys)`,
    '',
    md(
      [L('table'), R('per decision'), R('per new key'), R('memory')],
      [
        [
          'created at full size',
          `${g.decisionNs.created.toFixed(0)} ns`,
          us(g.insertUs.created),
          `${(g.bytes.created / 2 ** 20).toFixed(1)} MiB`,
        ],
        [
          `grown from 1024 (${g.segments} segments)`,
          `${g.decisionNs.grown.toFixed(0)} ns`,
          us(g.insertUs.grown),
          `${(g.bytes.grown / 2 ** 20).toFixed(1)} MiB`,
        ],
      ],
    ),
  ].join('\n');
}

function clusterSection(c) {
  const row = (name, x) =>
    x && [
      name,
      us(x.oneAtATime.p50Us),
      us(x.oneAtATime.p99Us),
      us(x.inFlight64.perCallUs),
      us(x.inFlight64.workerCpuUs),
      us(x.inFlight64.primaryCpuUs),
    ];
  const r = c.ratios;
  const b = c.permitBlocks.block;
  return [
    '## Cluster (a worker process asking the primary)',
    '',
    md(
      [
        L('subject'),
        R('p50'),
        R('p99'),
        R(`per call, ${c.inFlight} in flight`),
        R('worker CPU'),
        R('primary CPU'),
      ],
      [
        row('tryAcquire', c.ours.tryAcquire),
        row('consume', c.ours.consume),
        row(`tryAcquire, blocks of ${b}`, c.ours.tryAcquireBlocks),
        row(`consume, blocks of ${b}`, c.ours.consumeBlocks),
        row(`acquire, blocks of ${b}`, c.ours.acquireBlocks),
        row('rate-limiter-flexible RateLimiterCluster', c.rlf.consume),
        row('floor: process.send echo', c.floors.echo),
        row('floor: batched echo', c.floors.batchedEcho),
      ].filter(Boolean),
    ),
    '',
    md(
      [L('rate-limiter-flexible ÷ ours'), R('one at a time'), R(`${c.inFlight} in flight`)],
      [
        ['tryAcquire', fmtRatio(r.oneAtATimeP50), fmtRatio(r.inFlight64)],
        ['consume', fmtRatio(r.consumeOneAtATimeP50), fmtRatio(r.consumeInFlight64)],
        ...(r.blocksInFlight64
          ? ['tryAcquire', 'consume', 'acquire'].map((k) => [
              `${k}, blocks of ${b} (one at a time: means)`,
              fmtRatio(r.blocksOneAtATimeMean[k]),
              fmtRatio(r.blocksInFlight64[k]),
            ])
          : []),
      ],
    ),
  ].join('\n');
}

function httpSection(h) {
  const u = (x) => (x === undefined ? '-' : `${x.toFixed(1)} µs`);
  const ratio = (j) =>
    j ? `${fmtRatio(j.ratio)}${j.withinNoise ? ' (within the noise)' : ''}` : '-';
  return [
    '## HTTP middleware',
    '',
    md(
      [
        L('framework'),
        L('limiter'),
        R('keys'),
        R('requests/s'),
        R('wall overhead'),
        R('CPU overhead'),
        R('in situ overhead'),
      ],
      h.rows.map((r) => [
        r.framework,
        r.subject,
        r.keys,
        Math.round(r.rps),
        u(r.overheadUs),
        u(r.cpuOverheadUs),
        u(r.inSituOverheadUs),
      ]),
    ),
    '',
    '### In process',
    '',
    md(
      [L('framework'), L('limiter'), R('keys'), R('CPU per request'), R('overhead')],
      h.inProcessRows.map((r) => [
        r.framework,
        r.subject,
        r.keys,
        u(r.cpuUs),
        r.subject === 'no limiter' ? '-' : u(r.overheadUs),
      ]),
    ),
    '',
    "### Our overhead ÷ the peer's",
    '',
    md(
      [
        L('framework'),
        R('keys'),
        R('in situ'),
        R('CPU'),
        R('wall'),
        R('in process'),
        R('in process, draft-6'),
      ],
      (h.ratios ?? []).map((g) => [
        `${g.framework} (vs ${g.peer})`,
        g.keys,
        ratio(g.inSitu),
        ratio(g.cpu),
        ratio(g.wall),
        ratio(g.inProcess),
        ratio(g.inProcessDraft6),
      ]),
    ),
  ].join('\n');
}

function redisSection(r) {
  if (r.skipped) return `## Redis\n\nSkipped: ${r.skipped}.`;
  const row = (name, x) => redisRow(name, x, us);
  const rows = (w, label) => {
    const s = r.workloads[w].subjects;
    return [
      row(`${label}: TokenBucket tryAcquire`, s.tryAcquire),
      row(`${label}: TokenBucket consume`, s.consume),
      row(`${label}: rate-limiter-flexible RateLimiterRedis`, s.rlf),
      row(`${label}: floor, EVALSHA return 1`, s.floor),
      row(`${label}: state floor, TIME, GET, SET … KEEPTTL`, s.stateFloor),
    ];
  };
  const ratio = (name, k) => redisRatioRow(r, name, k);
  const d = r.down;
  const ms = (x) => (x === undefined || x === null ? '-' : fmtNs(x * 1e6));
  return [
    '## Redis',
    '',
    md(
      [
        L('workload: subject'),
        R('p50'),
        R('p99'),
        R(`per call, ${r.inFlight} in flight`),
        R('Redis CPU per decision, one at a time'),
        R(`Redis CPU per decision, ${r.inFlight} in flight`),
      ],
      [...rows('hotKey', 'hot key'), ...rows('manyKeys', `${r.keys} keys`)],
    ),
    '',
    md(
      [
        L('ours ÷'),
        R('hot key: tryAcquire'),
        R('hot key: consume'),
        R(`${r.keys} keys: tryAcquire`),
        R(`${r.keys} keys: consume`),
      ],
      [
        ratio(`rate-limiter-flexible, ${r.inFlight} in flight`, 'InFlightOverRlf'),
        ratio('rate-limiter-flexible, one at a time', 'OverRlf'),
        ratio('state floor, one at a time', 'OverStateFloor'),
        ratio('floor, one at a time', 'OverFloor'),
        ratio('rate-limiter-flexible, Redis CPU, one at a time', 'CpuOverRlf'),
        ratio(`rate-limiter-flexible, Redis CPU, ${r.inFlight} in flight`, 'CpuInFlightOverRlf'),
      ],
    ),
    ...(d
      ? [
          '',
          md(
            [L(`Redis down: whenUnavailable 'allow', timeoutMs ${d.timeoutMs}`), R('')],
            [
              ['first decision', ms(d.firstMs)],
              [
                `median decision after the first (${d.decisionsWhileDown - 1} in ${d.downMs / 1000} s)`,
                ms(d.medianAfterFirstMs),
              ],
              ['p99 decision after the first', ms(d.p99AfterFirstMs)],
              ['back on Redis after the restarted server answers', ms(d.backAfterRestartMs)],
            ],
          ),
        ]
      : []),
  ].join('\n');
}

function fleetSection(f) {
  if (f.skipped) return `## Fleet mode\n\nSkipped: ${f.skipped}.`;
  const s = f.subjects;
  const row = (name, x) =>
    x && [
      name,
      Math.round(x.decisionsPerSecond),
      us(x.p50Us),
      us(x.p99Us),
      x.redisCallsPer1000.toFixed(1),
    ];
  return [
    `## Fleet mode (${f.threads} threads of one process, one hot key)`,
    '',
    md(
      [L('subject'), R('decisions/s'), R('p50'), R('p99'), R('Redis calls per 1000')],
      [
        row(`TokenBucket, block ${f.block}`, s.fleet),
        row(`  maxBlock ${8 * f.block}`, s.fleetGrown),
        row('  leaseAhead: true', s.fleetAhead),
        row('  an event-loop turn every 16 decisions', s.fleetTurns),
        row('TokenBucket, no block', s.plain),
        row('rate-limiter-flexible RateLimiterRedis', s.rlf),
      ].filter(Boolean),
    ),
    '',
    md(
      [L('ratio'), R('value')],
      [
        [`block ${f.block} ÷ no block`, fmtRatio(f.ratios.fleetOverPlain)],
        [`block ${f.block} ÷ rate-limiter-flexible`, fmtRatio(f.ratios.fleetOverRlf)],
        [`maxBlock ${8 * f.block} ÷ no block`, fmtRatio(f.ratios.fleetGrownOverPlain)],
        ['leaseAhead ÷ no block', fmtRatio(f.ratios.fleetAheadOverPlain)],
        [
          'refused hot key: Redis calls per retryAfterMs',
          fmtRatio(f.ratios.refusedCallsPerRetryAfter),
        ],
      ],
    ),
  ].join('\n');
}

function hostSection(h) {
  if (h.skipped) return `## Host mode\n\nSkipped: ${h.skipped}.`;
  return [
    '## Host mode (processes of one host, beside worker threads)',
    '',
    md(
      [L('figure'), R('host mode'), R('worker threads'), R('host ÷ threads')],
      [
        [
          '1-key decision',
          fmtNs(h.decision.hostNs),
          fmtNs(h.decision.threadsNs),
          fmtRatio(h.decision.ratio),
        ],
        ...h.hot.map((x) => [
          `${x.n} on one hot key`,
          fmtOps(x.processesPerSec),
          fmtOps(x.threadsPerSec),
          fmtRatio(x.ratio),
        ]),
        [
          'acquire() wake-up, one way, p50 / p99',
          `${us(h.wake.processes.p50Us)} / ${us(h.wake.processes.p99Us)}`,
          `${us(h.wake.threads.p50Us)} / ${us(h.wake.threads.p99Us)}`,
          '-',
        ],
      ],
    ),
  ].join('\n');
}

/** The whole of bench/RESULTS.md. */
export function formatResultsMarkdown(result, { commit }) {
  const out = [header(result, commit)];
  const add = (title, f) => {
    try {
      out.push('', f());
    } catch (err) {
      // A part whose shape this file does not know yet: say so rather than lose the rest.
      out.push('', `## ${title}\n\nNot tabulated (${err.message}); the figures are in the JSON.`);
    }
  };
  add('Summary', () => `## Summary\n\n${summaryTable(result)}`);
  if (result.floors) {
    add('Floors', () =>
      [
        '## Floors (native-bench)',
        '',
        md(
          [L('floor'), R('median')],
          [
            ['clock + Int32 GCRA CAS (1 key)', fmtNs(result.floors.oneKey.ns)],
            ['Map.get + clock + GCRA CAS (100k keys)', fmtNs(result.floors.manyKeys.ns)],
            ['CAS loop, 1 thread', fmtOps(result.floors.contention.js[1])],
            ['CAS loop, 2 threads on one word', fmtOps(result.floors.contention.js.hot)],
            ['waitAsync → notify round trip', fmtNs(result.floors.wake.ns)],
          ],
        ),
      ].join('\n'),
    );
  }
  if (result.latency) add('Per decision', () => latencySection(result.latency));
  if (result.latency?.coarse) add('CoarseClock', () => coarseSection(result.latency.coarse));
  if (result.threads) add('Threads', () => threadsSection(result.threads));
  if (result.effective) add('Effective limit', () => effectiveSection(result.effective));
  if (result.acquire) add('acquire()', () => acquireSection(result.acquire, result.floors?.wake));
  if (result.growth) add('Growing key table', () => growthSection(result.growth));
  if (result.cluster) add('Cluster', () => clusterSection(result.cluster));
  if (result.http) add('HTTP', () => httpSection(result.http));
  if (result.redis) add('Redis', () => redisSection(result.redis));
  if (result.fleet) add('Fleet mode', () => fleetSection(result.fleet));
  if (result.host) add('Host mode', () => hostSection(result.host));
  return `${out.join('\n')}\n`;
}

const START = '<!-- bench:summary:start -->';
const END = '<!-- bench:summary:end -->';

/** The README with its summary block replaced; unchanged when it has no markers. */
export function withSummary(readme, result) {
  const a = readme.indexOf(START);
  const b = readme.indexOf(END);
  if (a < 0 || b < a) return readme;
  const block = [
    START,
    `<!-- generated from bench/RESULTS.md by npm run bench: do not edit by hand -->`,
    `${result.machine.cpus} CPUs (${result.machine.model}), Node ${result.machine.node.split('.')[0]}; ratios within one process, so they travel between machines better than times. Every table: [bench/RESULTS.md](bench/RESULTS.md).`,
    '',
    summaryTable(result),
    END,
  ].join('\n');
  return readme.slice(0, a) + block + readme.slice(b + END.length);
}
