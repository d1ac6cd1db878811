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
