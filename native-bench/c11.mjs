// Group f: the C11 <stdatomic.h> baseline. Compiles c11_atomics.c with the system compiler
// into native-bench/build/, runs it and reads the one JSON line it prints. Without a C
// compiler the group is skipped (not an error).
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { figure, isMain, runStandalone, sizes } from './lib.mjs';

const SRC = fileURLToPath(new URL('./c11_atomics.c', import.meta.url));
const BUILD = fileURLToPath(new URL('./build/', import.meta.url));
const BIN = `${BUILD}c11_atomics`;

function skip(reporter, why) {
  const msg = `c11 baseline skipped: ${why}`;
  if (reporter.print) console.log(msg);
  else console.warn(msg);
}

export async function run({ quick = false, reporter }) {
  const cc = spawnSync('cc', ['--version'], { encoding: 'utf8' });
  if (cc.error || cc.status !== 0) {
    skip(reporter, 'no C compiler');
    return;
  }
  mkdirSync(BUILD, { recursive: true });
  const build = spawnSync('cc', ['-O2', '-pthread', '-std=c11', '-o', BIN, SRC], {
    encoding: 'utf8',
  });
  if (build.error || build.status !== 0) {
    skip(reporter, `compile failed: ${(build.stderr || String(build.error)).trim()}`);
    return;
  }

  const { durationMs, contReps, reps } = sizes(quick);
  const batch = quick ? 1_000_000 : 10_000_000;
  const args = [batch, reps, durationMs, contReps].map(String);
  const out = spawnSync(BIN, args, { encoding: 'utf8', timeout: 120_000 });
  if (out.error || out.status !== 0) {
    throw new Error(`c11_atomics failed: ${(out.stderr || String(out.error)).trim()}`);
  }
  const line = out.stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .pop();
  const r = JSON.parse(line);

  reporter.add(
    'c11.cas.u32',
    figure(r.cas32.medianNs, { p99Ns: r.cas32.p99Ns, note: 'one thread, seq_cst CAS' }),
  );
  reporter.add(
    'c11.cas.u64',
    figure(r.cas64.medianNs, { p99Ns: r.cas64.p99Ns, note: 'one thread, 64-bit word' }),
  );
  reporter.add(
    'c11.fetch-add.u32',
    figure(r.fetchAdd32.medianNs, { p99Ns: r.fetchAdd32.p99Ns, note: 'one thread' }),
  );
  const sep = r.separateLines.opsPerSec;
  const cases = [
    ['c11.contention.1-thread', r.oneThread, 'one thread alone (baseline)'],
    ['c11.contention.same-word', r.sameWord, '2 threads, one word'],
    ['c11.contention.same-line', r.sameLine, '2 threads, adjacent words of one cache line'],
    ['c11.contention.separate-lines', r.separateLines, '2 threads, words 256 bytes apart'],
  ];
  for (const [name, c, note] of cases) {
    reporter.add(
      name,
      figure(1e9 / c.opsPerSec, {
        opsPerSec: c.opsPerSec,
        note:
          `${note}; range ${(c.min / 1e6).toFixed(1)}-${(c.max / 1e6).toFixed(1)} M; ` +
          `×${(c.opsPerSec / sep).toFixed(2)} of separate lines; ${c.valid}/${c.rounds} rounds valid` +
          `${c.valid === 0 ? ', MACHINE BUSY: no round had both cores' : ''}`,
      }),
    );
  }
}

if (isMain(import.meta.url)) await runStandalone('c11', run);
