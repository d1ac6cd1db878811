import { spawn } from 'node:child_process';

/** The built package, for scripts that run in a child `node`. */
export const DIST = new URL('../../dist/index.js', import.meta.url).href;

export interface ChildOutcome {
  code: number | null;
  /** True when the child was still alive after `killAfterMs` and had to be killed. */
  killed: boolean;
  stdout: string;
  stderr: string;
}

/**
 * Runs `script` as an ES module in a child `node` and reports how it ended. A child that
 * has not exited by itself after `killAfterMs` is killed and reported as such.
 */
export function runChild(script: string, killAfterMs: number): Promise<ChildOutcome> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let killed = false;
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const timer = setTimeout(() => {
      killed = true;
      child.kill('SIGKILL');
    }, killAfterMs);
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, killed, stdout, stderr });
    });
  });
}

/**
 * Runs a cluster scenario: `script` (a primary that forks workers of the same script and
 * prints its outcome as JSON on its last line of output) with `scenario` as its argument.
 * Rejects when it exits otherwise than with 0, with what it wrote to stderr. Killing the
 * primary disconnects its workers, which then exit too (node:cluster).
 */
export function runScenario(
  script: string,
  scenario: string,
  killAfterMs = 30_000,
): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, scenario], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (err += c));
    const timer = setTimeout(() => child.kill('SIGKILL'), killAfterMs);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (code !== 0) reject(new Error(`scenario ${scenario} exited ${code ?? signal}: ${err}`));
      else resolve(JSON.parse(out.trim().split('\n').pop() as string));
    });
  });
}
