// native-bench: the floor the limiters are measured against. Runs every group in sequence,
// prints one line per figure and writes native-bench/results/latest.json.
//
//   node native-bench/run.mjs [--quick] [--only=atomics,clock,layout,wake,ipc,c11]
//
// import { runNativeBench } from './native-bench/run.mjs' returns the same object.
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import * as atomics from './atomics.mjs';
import * as c11 from './c11.mjs';
import * as clock from './clock.mjs';
import * as ipc from './ipc.mjs';
import * as layout from './layout.mjs';
import { createReporter, header, isMain, sink } from './lib.mjs';
import * as wake from './wake.mjs';

export const GROUPS = { atomics, clock, layout, wake, ipc, c11 };

export function machineInfo() {
  const cpus = os.cpus();
  return {
    node: process.version,
    cpus: os.availableParallelism?.() ?? cpus.length,
    model: cpus[0]?.model?.trim() || 'unknown',
  };
}

/**
 * Runs the groups (all by default) and resolves to
 * { machine: { node, cpus, model }, date, figures: { [name]: { medianNs, p99Ns?, opsPerSec?, note? } } }.
 * `print` writes the table to stdout as figures arrive.
 */
export async function runNativeBench({ quick = false, print = false, groups } = {}) {
  const names = groups ?? Object.keys(GROUPS);
  for (const g of names) if (!GROUPS[g]) throw new RangeError(`native-bench: unknown group ${g}`);
  const result = { machine: machineInfo(), date: new Date().toISOString(), figures: {} };
  const reporter = createReporter({ print });
  for (const g of names) {
    reporter.log(header(`${g}${quick ? ' (quick)' : ''}`));
    await GROUPS[g].run({ quick, reporter });
  }
  Object.assign(result.figures, reporter.figures);
  return result;
}

if (isMain(import.meta.url)) {
  const quick = process.argv.includes('--quick');
  const only = process.argv.find((a) => a.startsWith('--only='));
  const groups = only ? only.slice('--only='.length).split(',').filter(Boolean) : undefined;
  const t0 = performance.now();
  const machine = machineInfo();
  console.log(
    `native-bench${quick ? ' --quick' : ''}: node ${machine.node}, ${machine.cpus} cpus, ${machine.model}`,
  );
  const result = await runNativeBench({ quick, print: true, groups });
  const dir = fileURLToPath(new URL('./results/', import.meta.url));
  mkdirSync(dir, { recursive: true });
  const file = `${dir}latest.json`;
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  const secs = ((performance.now() - t0) / 1000).toFixed(1);
  console.log(`\n${Object.keys(result.figures).length} figures in ${secs} s -> ${file}`);
  console.log(`(checksum ${sink.value})`);
}
