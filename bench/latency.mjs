// Per-decision latency of one subject (one of our limiters, or one peer), beside the floors
// measured in the same process, with tinybench. run.mjs starts one process per subject.
// Each of our limiters is measured under two conditions, each beside its own floors:
//   - 'one class': in a fresh process where only this class has run;
//   - 'six classes': the same loops again after every one of the six classes has done work
//     in this process (warmAllClasses), as in an application that combines several: the
//     condition under which a decision path shared by the classes would go megamorphic.
//
//   node bench/latency.mjs --subject=TokenBucket [--quick]   (prints one JSON line)
//
// One tinybench sample is a batch of `batch` calls (1000; a single call, ~100 ns, is below
// what a timer read resolves), so mean / p50 / p99 are of batch means. Asynchronous peers
// await every call inside the batch.
import { pathToFileURL } from 'node:url';
import { Bench } from 'tinybench';
import { BATCH, fmtNs, keySet, progress } from './lib.mjs';
import { floorTasks, getRefusedAllowed, getSink, SUBJECTS, warmAllClasses } from './subjects.mjs';

export function latencyRowName(subject, t) {
  const keys = t.keys === 1 ? '1 key' : `${t.keys / 1000}k keys`;
  const call = subject.kind === 'peer' ? ` ${t.call}` : '';
  return `${subject.name}${call} ${t.outcome}, ${keys}`;
}

export async function measureSubject(name, { quick }) {
  const subject = SUBJECTS.find((s) => s.name === name);
  if (!subject) throw new RangeError(`latency: unknown subject ${name}`);
  const ctx = keySet();
  const floors = floorTasks(ctx);
  const tasks = await subject.tasks(ctx);
  const all = [
    ...floors.map((f) => ({ ...f, batch: BATCH, kind: 'floor' })),
    // A task may name itself and say what it is (rows measured beside the subject).
    ...tasks.map((t) => ({
      ...t,
      name: t.name ?? latencyRowName(subject, t),
      kind: t.kind ?? subject.kind,
    })),
  ];
  const rows = await measureTasks(subject, all, { quick, condition: 'one class' });
  if (subject.kind === 'ours') {
    await warmAllClasses(ctx);
    const again = all.map((t) => ({
      ...t,
      name: t.kind === 'floor' ? t.name : `${t.name}, after all six classes`,
    }));
    rows.push(...(await measureTasks(subject, again, { quick, condition: 'six classes' })));
  }
  const refused = getRefusedAllowed();
  if (refused > BATCH) {
    throw new Error(
      `latency: ${subject.name}: ${refused} calls refused in loops measured as allowed (a limit too small for the loop)`,
    );
  }
  const notes = subject.notes ? await subject.notes(tasks, { quick }) : undefined;
  return { subject: subject.name, kind: subject.kind, rows, notes, sink: getSink() };
}

/** Times every task of `all` (floors first) in interleaved passes; one row per task. */
async function measureTasks(subject, all, { quick, condition }) {
  // Several passes over every task, floors first in each: a burst of noise from another
  // process then lands on the floors and the subject alike, instead of on whichever task
  // tinybench happened to be running. Percentiles are over the samples of all passes.
  const passes = quick ? 2 : 5;
  const time = (quick ? 150 : 1000) / passes;
  const samples = new Map(all.map((t) => [t.name, []]));
  for (let pass = 0; pass < passes; pass++) {
    const bench = new Bench({
      time,
      warmup: pass === 0,
      warmupTime: quick ? 50 : 200,
      retainSamples: true,
      throws: true,
      // A bottleneck call takes 1-5 ms: fewer samples suffice, and keep --quick quick.
      ...(subject.slow
        ? { iterations: quick ? 8 : 16, warmupIterations: quick ? 4 : 16 }
        : { iterations: 16 }),
    });
    for (const t of all) bench.add(t.name, t.fn);
    await bench.run();
    for (const task of bench.tasks) samples.get(task.name).push(...task.result.latency.samples);
  }
  return all.map((t) => {
    const perCall = Float64Array.from(samples.get(t.name), (ms) => (ms * 1e6) / t.batch).sort();
    const at = (q) => perCall[Math.min(perCall.length - 1, Math.ceil(q * perCall.length) - 1)];
    const row = {
      name: t.name,
      subject:
        t.kind === 'floor'
          ? 'floor'
          : condition === 'six classes'
            ? `${t.subject ?? subject.name} (six classes)`
            : (t.subject ?? subject.name),
      kind: t.kind,
      condition,
      outcome: t.outcome ?? 'allowed',
      keys: t.keys ?? t.floor,
      call: t.call,
      primary: t.primary ?? false,
      batch: t.batch,
      samples: perCall.length,
      meanNs: perCall.reduce((a, b) => a + b, 0) / perCall.length,
      p50Ns: at(0.5),
      p99Ns: at(0.99),
    };
    progress(`    ${t.name}${t.kind === 'floor' ? ` (${condition})` : ''}: ${fmtNs(row.p50Ns)}`);
    return row;
  });
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const name = process.argv.find((a) => a.startsWith('--subject='))?.slice('--subject='.length);
  const result = await measureSubject(name, { quick: process.argv.includes('--quick') });
  process.stdout.write(`${JSON.stringify(result)}\n`);
  // Peers leave timers behind (rate-limiter-flexible: one per key; bottleneck: cleanup).
  process.exit(0);
}
