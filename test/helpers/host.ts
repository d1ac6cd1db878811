import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';

/** The fixture that decides in a child process on a limiter in host memory. */
const DECIDE = new URL('../fixtures/host/decide.mjs', import.meta.url).pathname;

/** What a decide.mjs process is told (see test/fixtures/host/decide.mjs). */
export interface DecideSpec {
  cls: string;
  options: Record<string, unknown>;
  region: string;
  clockRegion?: string;
  key?: string;
  tries: number;
  permits?: number;
  hold?: boolean;
}

/** A child process that has opened its limiter and waits for go(). */
export interface Decider {
  child: ChildProcess;
  /** Starts its decisions; resolves with the permits it was granted. */
  go(): Promise<{ granted: number; pid: number }>;
}

const children = new Set<ChildProcess>();

/** Starts a decide.mjs process; resolves once its limiter is open (it printed "ready"). */
export function startDecider(spec: DecideSpec): Promise<Decider> {
  const child = spawn(process.execPath, [DECIDE, JSON.stringify({ ...spec, gate: true })], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  children.add(child);
  child.once('exit', () => children.delete(child));
  let stderr = '';
  child.stderr!.on('data', (chunk) => (stderr += chunk));
  const lines = createInterface({ input: child.stdout! });
  const next = (): Promise<string> =>
    new Promise((resolve, reject) => {
      const onLine = (line: string) => {
        child.off('exit', onExit);
        resolve(line);
      };
      const onExit = (code: number | null) => {
        lines.off('line', onLine);
        reject(new Error(`decide.mjs exited (${code}): ${stderr}`));
      };
      lines.once('line', onLine);
      child.once('exit', onExit);
    });
  return next().then((line) => {
    if (line !== 'ready') throw new Error(`decide.mjs said ${line}: ${stderr}`);
    return {
      child,
      go: () => {
        const result = next().then((l) => JSON.parse(l));
        child.stdin!.write('go\n');
        return result;
      },
    };
  });
}

/** Kills every child still running (teardown). */
export function killDeciders(): void {
  for (const child of children) child.kill('SIGKILL');
}

/** A region name no other test run uses (unique, not random input: no seed wanted). */
export function regionName(what: string): string {
  return `test-${what}-${process.pid}-${randomBytes(4).toString('hex')}`;
}
