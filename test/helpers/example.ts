import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * Runs an example as its users run it (`node examples/<file>` from the repository's root,
 * importing the package from dist/: npm run build first) and resolves with its last line,
 * which is JSON. Rejects on a non-zero exit (with its output), or after `timeoutMs`.
 */
export function runExample(
  file: string,
  env: Record<string, string> = {},
  timeoutMs = 30_000,
): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [`examples/${file}`], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (err += c));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      if (code !== 0) return reject(new Error(`exited ${code}:\n${out}\n${err}`));
      resolve(JSON.parse(out.trim().split('\n').pop() as string));
    });
  });
}
