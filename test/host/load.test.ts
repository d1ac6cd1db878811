import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

// Where the native addon is missing (no prebuilt binary for the platform, no build),
// importing atomic-limiter/host throws at once, naming the platform and the alternatives;
// the core package never loads the addon.

const ROOT = new URL('../..', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'atomic-limiter-noaddon-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function importIn(file: string): { status: number | null; stderr: string; stdout: string } {
  const r = spawnSync(
    process.execPath,
    ['--input-type=module', '-e', `await import(${JSON.stringify(file)}); console.log('loaded');`],
    { encoding: 'utf8' },
  );
  return { status: r.status, stderr: r.stderr, stdout: r.stdout };
}

describe('loading host mode', () => {
  it('throws at import, naming the platform and the alternatives, when the addon has no binary', () => {
    // A copy of the built package whose host-addon folder holds sources but no binary.
    mkdirSync(join(dir, 'dist'));
    mkdirSync(join(dir, 'host-addon'));
    copyFileSync(join(ROOT, 'dist/host.js'), join(dir, 'dist/host.js'));
    copyFileSync(join(ROOT, 'dist/index.js'), join(dir, 'dist/index.js'));
    writeFileSync(join(dir, 'host-addon/binding.gyp'), '{}');
    symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
    const r = importIn(join(dir, 'dist/host.js'));
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(
      new RegExp(
        `could not be loaded for ${process.platform}-${process.arch}, Node ${process.versions.node}`,
      ),
    );
    expect(r.stderr).toMatch(/a C\+\+ compiler, python3 and make/);
    expect(r.stderr).toMatch(/atomic-limiter\/cluster/);
    expect(r.stderr).toMatch(/atomic-limiter\/redis/);
    // The core package loads without it.
    expect(importIn(join(dir, 'dist/index.js')).stdout.trim()).toBe('loaded');
  });

  it('loads with the binary built at install', () => {
    expect(importIn(join(ROOT, 'dist/host.js')).stdout.trim()).toBe('loaded');
  });
});
