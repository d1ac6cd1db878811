// The two charts, written by hand as SVG strings (no chart dependency):
//   latency.svg     per-decision p50 of every algorithm beside the floors and the peers,
//                   horizontal bars on a log scale, one group per workload;
//   throughput.svg  aggregate decisions/s against threads (own key, hot key), and the
//                   effective-limit demonstration.
import { fmtNs, KEYS } from './lib.mjs';
import { medianFloors } from './report.mjs';

const FONT = 'font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif"';
const COLORS = {
  ours: '#1f6fb4',
  floor: '#9a9a9a',
  native: '#5c5c5c',
  limiter: '#f28e2b',
  'rate-limiter-flexible': '#3a9e4f',
  bottleneck: '#d1453b',
  TokenBucket: '#1f6fb4',
  FixedWindow: '#7b4fb8',
};

const esc = (s) =>
  String(s).replace(
    /[&<>"]/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c],
  );

const text = (x, y, s, attrs = '') => `<text x="${x}" y="${y}" ${attrs}>${esc(s)}</text>`;

function svgDoc(width, height, body) {
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" ${FONT} font-size="12">
<rect width="100%" height="100%" fill="#ffffff"/>
${body}
</svg>
`;
}

// ---- latency --------------------------------------------------------------------------------

export function latencySvg(result) {
  const { rows } = result.latency;
  const floors = medianFloors(result.latency);
  const groups = [
    { outcome: 'allowed', keys: 1, title: 'allowed, 1 key' },
    { outcome: 'refused', keys: 1, title: 'refused, 1 key' },
    { outcome: 'allowed', keys: KEYS, title: 'allowed, 100k keys' },
    { outcome: 'refused', keys: KEYS, title: 'refused, 100k keys' },
  ];
  const bars = [];
  for (const g of groups) {
    const items = [];
    const native = g.keys === 1 ? result.floors?.oneKey.ns : result.floors?.manyKeys.ns;
    items.push({
      label: 'floor (in-process, median)',
      ns: g.keys === 1 ? floors.oneKey : floors.manyKeys,
      color: COLORS.floor,
    });
    if (native !== undefined) {
      items.push({ label: 'floor (native-bench)', ns: native, color: COLORS.native });
    }
    for (const r of rows) {
      if (r.keys !== g.keys) continue;
      const same =
        r.outcome === g.outcome || (g.outcome === 'allowed' && r.outcome === 'acquire+release');
      if (!same) continue;
      if (r.kind === 'ours') {
        const label =
          r.outcome === 'acquire+release' ? `${r.subject} (acquire+release)` : r.subject;
        items.push({ label, ns: r.p50Ns, color: COLORS.ours });
      } else if (r.primary) {
        const call = r.subject === 'bottleneck' ? ' schedule()' : '';
        items.push({ label: `${r.subject}${call}`, ns: r.p50Ns, color: COLORS[r.subject] });
      }
    }
    bars.push({ title: g.title, items });
  }

  const left = 250;
  const plotW = 560;
  const right = 90;
  const width = left + plotW + right;
  const barH = 15;
  const gap = 4;
  const top = 70;
  const lo = 10; // ns, left edge
  const hi = 1e7; // 10 ms, right edge
  const x = (ns) => left + (Math.log10(Math.max(ns, lo) / lo) / Math.log10(hi / lo)) * plotW;
  let y = top;
  const body = [];
  for (const g of bars) {
    body.push(text(10, y + 12, g.title, 'font-weight="600" font-size="13"'));
    y += 20;
    for (const it of g.items) {
      const w = Math.max(1, x(it.ns) - left);
      body.push(
        text(left - 8, y + barH - 3, it.label, 'text-anchor="end" fill="#222"'),
        `<rect x="${left}" y="${y}" width="${w.toFixed(1)}" height="${barH}" fill="${it.color}" rx="2"/>`,
        text((left + w + 5).toFixed(1), y + barH - 3, fmtNs(it.ns), 'fill="#222"'),
      );
      y += barH + gap;
    }
    y += 12;
  }
  const bottom = y;
  // Decade grid lines and labels, drawn under the bars.
  const grid = [];
  const ticks = [10, 100, 1e3, 1e4, 1e5, 1e6, 1e7];
  const tickLabel = {
    10: '10 ns',
    100: '100 ns',
    1e3: '1 µs',
    1e4: '10 µs',
    1e5: '100 µs',
    1e6: '1 ms',
    1e7: '10 ms',
  };
  for (const t of ticks) {
    const gx = x(t).toFixed(1);
    grid.push(
      `<line x1="${gx}" y1="${top - 6}" x2="${gx}" y2="${bottom}" stroke="#e3e3e3"/>`,
      text(gx, top - 10, tickLabel[t], 'text-anchor="middle" fill="#666" font-size="11"'),
      text(gx, bottom + 14, tickLabel[t], 'text-anchor="middle" fill="#666" font-size="11"'),
    );
  }
  const legend = [
    ['atomic-limiter', COLORS.ours],
    ['floor in-process', COLORS.floor],
    ['floor native-bench', COLORS.native],
    ['limiter', COLORS.limiter],
    ['rate-limiter-flexible', COLORS['rate-limiter-flexible']],
    ['bottleneck', COLORS.bottleneck],
  ];
  const leg = [];
  let lx = 10;
  for (const [name, color] of legend) {
    leg.push(
      `<rect x="${lx}" y="${bottom + 30}" width="12" height="12" fill="${color}" rx="2"/>`,
      text(lx + 17, bottom + 40, name, 'fill="#222"'),
    );
    lx += 30 + name.length * 6.6;
  }
  const title = [
    text(
      10,
      22,
      'Time per decision, one thread (p50, log scale)',
      'font-size="16" font-weight="600"',
    ),
    text(
      10,
      40,
      `${result.machine.cpus} CPUs, Node ${result.machine.node}, ${result.quick ? 'quick run' : 'full run'}, ${result.date.slice(0, 10)}; peers await each call`,
      'fill="#555"',
    ),
  ];
  const height = bottom + 56;
  return svgDoc(width, height, [...title, ...grid, ...body, ...leg].join('\n'));
}

// ---- throughput -----------------------------------------------------------------------------

/** Spreads label y positions at least `gap` apart, keeping their order. */
function spread(ys, gap, lo, hi) {
  const idx = ys.map((y, i) => [y, i]).sort((a, b) => a[0] - b[0]);
  const out = new Array(ys.length);
  let prev = Number.NEGATIVE_INFINITY;
  for (const [y, i] of idx) {
    out[i] = Math.max(y, prev + gap);
    prev = out[i];
  }
  const over = prev - hi;
  if (over > 0) for (let i = 0; i < out.length; i++) out[i] = Math.max(lo, out[i] - over);
  return out;
}

function linePanel(entries, workload, ox, oy, w, h, yMax, maxThreads, cpus) {
  const series = ['TokenBucket', 'FixedWindow', 'floor'];
  const padL = 60; // room for the one-thread labels
  const padR = 100; // room for the N-thread labels
  const px = (t) =>
    ox + padL + (maxThreads === 1 ? 0 : ((t - 1) / (maxThreads - 1)) * (w - padL - padR));
  const py = (ops) => oy + h - (ops / yMax) * h;
  const title = workload === 'own key' ? 'Own key per thread' : 'One hot key, all threads';
  const out = [text(ox, oy - 12, title, 'font-weight="600" font-size="13"')];
  const step = niceStep(yMax / 5);
  for (let v = 0; v <= yMax + 1e-9; v += step) {
    const gy = py(v).toFixed(1);
    out.push(
      `<line x1="${ox}" y1="${gy}" x2="${ox + w}" y2="${gy}" stroke="#e6e6e6"/>`,
      text(
        ox - 6,
        Number(gy) + 4,
        `${(v / 1e6).toFixed(0)} M`,
        'text-anchor="end" fill="#666" font-size="11"',
      ),
    );
  }
  for (let t = 1; t <= maxThreads; t++) {
    const tx = px(t).toFixed(1);
    out.push(
      `<line x1="${tx}" y1="${oy}" x2="${tx}" y2="${oy + h}" stroke="#f0f0f0"/>`,
      text(tx, oy + h + 16, String(t), 'text-anchor="middle" fill="#666" font-size="11"'),
    );
  }
  out.push(
    text(ox + w / 2, oy + h + 32, 'threads', 'text-anchor="middle" fill="#444"'),
    `<line x1="${ox}" y1="${oy + h}" x2="${ox + w}" y2="${oy + h}" stroke="#999"/>`,
  );
  // Ideal scaling from TokenBucket's one-thread figure: × threads, up to one per CPU.
  const tb1 = entries.find(
    (e) => e.subject === 'TokenBucket' && e.workload === workload && e.threads === 1,
  );
  if (tb1 && maxThreads > 1) {
    const pts = [];
    for (let t = 1; t <= maxThreads; t++) {
      pts.push(`${px(t).toFixed(1)},${py(tb1.opsPerSec * Math.min(t, cpus)).toFixed(1)}`);
    }
    out.push(
      `<polyline points="${pts.join(' ')}" fill="none" stroke="${COLORS.TokenBucket}" stroke-dasharray="3 4" stroke-opacity="0.6"/>`,
    );
  }
  const ends = [];
  for (const s of series) {
    const pts = entries
      .filter((e) => e.subject === s && e.workload === workload)
      .sort((a, b) => a.threads - b.threads);
    if (pts.length === 0) continue;
    const d = pts.map((e) => `${px(e.threads).toFixed(1)},${py(e.opsPerSec).toFixed(1)}`).join(' ');
    const dash = s === 'floor' ? ' stroke-dasharray="6 4"' : '';
    out.push(
      `<polyline points="${d}" fill="none" stroke="${COLORS[s]}" stroke-width="2.5"${dash}/>`,
    );
    for (const e of pts) {
      out.push(
        `<circle cx="${px(e.threads).toFixed(1)}" cy="${py(e.opsPerSec).toFixed(1)}" r="4" fill="${COLORS[s]}"/>`,
      );
    }
    ends.push({ s, first: pts[0], last: pts[pts.length - 1] });
  }
  // Value labels beside the first and the last point, spread so they never overlap.
  const firstY = spread(
    ends.map((e) => py(e.first.opsPerSec) + 4),
    13,
    oy,
    oy + h,
  );
  const lastY = spread(
    ends.map((e) => py(e.last.opsPerSec) + 4),
    13,
    oy,
    oy + h,
  );
  ends.forEach((e, i) => {
    out.push(
      text(
        px(1) - 9,
        firstY[i].toFixed(1),
        `${e.first.busy ? 'busy ' : ''}${(e.first.opsPerSec / 1e6).toFixed(1)} M`,
        `text-anchor="end" fill="${COLORS[e.s]}" font-size="11"`,
      ),
    );
    if (maxThreads > 1) {
      out.push(
        text(
          px(maxThreads) + 9,
          lastY[i].toFixed(1),
          `${(e.last.opsPerSec / 1e6).toFixed(1)} M (×${e.last.vsOneThread.toFixed(2)})${e.last.busy ? ' busy' : ''}`,
          `fill="${COLORS[e.s]}" font-size="11"`,
        ),
      );
    }
  });
  return out.join('\n');
}

function niceStep(raw) {
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

const TWO_LINES = {
  TokenBucket: ['Token', 'Bucket'],
  FixedWindow: ['Fixed', 'Window'],
  'rate-limiter-flexible': ['rate-limiter-', 'flexible'],
};

function effectivePanel(effective, ox, oy, w, h) {
  const last = effective.entries[effective.entries.length - 1];
  const subjects = Object.keys(last.admitted);
  const max = Math.max(...subjects.map((s) => last.admitted[s]), effective.limit) * 1.15;
  const bw = w / subjects.length;
  const py = (v) => oy + h - (v / max) * h;
  const n = last.threads;
  const out = [
    text(
      ox,
      oy - 12,
      `Effective limit: L = ${effective.limit}, ${n} thread${n > 1 ? 's' : ''}`,
      'font-weight="600" font-size="13"',
    ),
    `<line x1="${ox}" y1="${oy + h}" x2="${ox + w}" y2="${oy + h}" stroke="#999"/>`,
  ];
  subjects.forEach((s, i) => {
    const v = last.admitted[s];
    const ours = s === 'TokenBucket' || s === 'FixedWindow';
    const c = ours ? COLORS.ours : COLORS[s];
    const cx = ox + (i + 0.5) * bw;
    const y = py(v);
    out.push(
      `<rect x="${(cx - bw * 0.32).toFixed(1)}" y="${y.toFixed(1)}" width="${(bw * 0.64).toFixed(1)}" height="${(oy + h - y).toFixed(1)}" fill="${c}" rx="2"/>`,
      text(
        cx.toFixed(1),
        (y - 5).toFixed(1),
        String(v),
        'text-anchor="middle" fill="#222" font-weight="600"',
      ),
    );
    (TWO_LINES[s] ?? [s]).forEach((line, j) => {
      out.push(
        text(
          cx.toFixed(1),
          oy + h + 15 + 12 * j,
          line,
          'text-anchor="middle" fill="#444" font-size="11"',
        ),
      );
    });
  });
  const ly = py(effective.limit);
  out.push(
    `<line x1="${ox}" y1="${ly.toFixed(1)}" x2="${ox + w}" y2="${ly.toFixed(1)}" stroke="#222" stroke-dasharray="5 4"/>`,
    text(
      ox - 4,
      (ly + 4).toFixed(1),
      `L = ${effective.limit}`,
      'text-anchor="end" fill="#222" font-size="11"',
    ),
    text(
      ox,
      oy + h + 50,
      'Admitted in total. Blue: one atomic-limiter shared',
      'fill="#555" font-size="11"',
    ),
    text(
      ox,
      oy + h + 63,
      'by all threads; peers: one limiter per thread.',
      'fill="#555" font-size="11"',
    ),
  );
  return out.join('\n');
}

export function throughputSvg(result) {
  const entries = result.threads?.entries ?? [];
  const maxThreads = Math.max(1, ...entries.map((e) => e.threads));
  const cpus = result.machine.cpus;
  // Room for every point and for the ideal-scaling line.
  const ideal = entries
    .filter((e) => e.subject === 'TokenBucket' && e.threads === 1)
    .map((e) => e.opsPerSec * Math.min(maxThreads, cpus));
  const yMax = niceCeil(Math.max(1, ...entries.map((e) => e.opsPerSec), ...ideal) * 1.12);
  const panelW = 360;
  const panelH = 260;
  const top = 90;
  const parts = [
    text(
      10,
      22,
      'Throughput against threads: aggregate decisions/s on one shared limiter',
      'font-size="16" font-weight="600"',
    ),
    text(
      10,
      40,
      `median of ${result.threads?.rounds} rounds of ${result.threads?.durationMs} ms; ${result.machine.cpus} CPUs, Node ${result.machine.node}; (×n) = ratio to one thread; busy = no round had a core per thread`,
      'fill="#555"',
    ),
  ];
  let ox = 70;
  if (entries.length > 0) {
    parts.push(linePanel(entries, 'own key', ox, top, panelW, panelH, yMax, maxThreads, cpus));
    ox += panelW + 80;
    parts.push(linePanel(entries, 'hot key', ox, top, panelW, panelH, yMax, maxThreads, cpus));
    ox += panelW + 60;
  }
  if (result.effective) parts.push(effectivePanel(result.effective, ox, top, 290, panelH));
  const width = ox + (result.effective ? 310 : 0);
  // Legend
  const legend = [
    ['TokenBucket', COLORS.TokenBucket, ''],
    ['FixedWindow', COLORS.FixedWindow, ''],
    ['floor: clock + GCRA CAS', COLORS.floor, ' stroke-dasharray="6 4"'],
    [
      'ideal: TokenBucket 1-thread × min(threads, CPUs)',
      COLORS.TokenBucket,
      ' stroke-dasharray="3 4" stroke-opacity="0.6"',
    ],
  ];
  let lx = 70;
  const ly = top + panelH + 90;
  for (const [name, color, dash] of legend) {
    parts.push(
      `<line x1="${lx}" y1="${ly - 4}" x2="${lx + 24}" y2="${ly - 4}" stroke="${color}" stroke-width="2.5"${dash}/>`,
      text(lx + 30, ly, name, 'fill="#222"'),
    );
    lx += 48 + name.length * 6.6;
  }
  return svgDoc(width, ly + 20, parts.join('\n'));
}

function niceCeil(v) {
  const step = niceStep(v / 5);
  return Math.ceil(v / step) * step;
}
