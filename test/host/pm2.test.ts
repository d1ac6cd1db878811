import { execFile } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { removeHostMemory } from '../../src/host/index.js';
import { regionName } from '../helpers/host.js';

// PM2 cluster mode, for real: `pm2 start app -i 2` with a PM2_HOME of its own. PM2's daemon
// is the cluster primary, so the cluster bridge has no primary of ours to talk to; host
// memory needs none. The app is test/host/pm2-app.cjs (the built package).

const run = promisify(execFile);
const PM2 = new URL('../../node_modules/pm2/bin/pm2', import.meta.url).pathname;
const APP = new URL('../fixtures/host/pm2-app.cjs', import.meta.url).pathname;
const home = mkdtempSync(join(tmpdir(), 'atomic-limiter-pm2-'));
const out = join(home, 'out');
const region = regionName('pm2');
const env = {
  ...process.env,
  PM2_HOME: join(home, 'pm2'),
  REGION: region,
  OUT_DIR: out,
  CAPACITY: '100000',
  TRIES: '200000',
};

afterAll(async () => {
  await run(process.execPath, [PM2, 'kill'], { env }).catch(() => {});
  removeHostMemory(region);
  rmSync(home, { recursive: true, force: true });
}, 30_000);

describe('host memory under PM2 cluster mode', () => {
  it('two instances started by `pm2 start -i 2` admit one limit between them, exactly', async () => {
    mkdirSync(out);
    await run(process.execPath, [PM2, 'start', APP, '-i', '2', '--name', 'host-test'], { env });
    // Both instances have opened the limiter (their app waits for the go file).
    const list = async () =>
      JSON.parse((await run(process.execPath, [PM2, 'jlist'], { env })).stdout) as {
        pid: number;
        pm2_env: { status: string; exec_mode: string };
      }[];
    let apps = await list();
    for (let i = 0; i < 200 && apps.filter((a) => a.pm2_env.status === 'online').length < 2; i++) {
      await new Promise((r) => setTimeout(r, 50));
      apps = await list();
    }
    expect(apps.map((a) => a.pm2_env.exec_mode)).toEqual(['cluster_mode', 'cluster_mode']);
    writeFileSync(join(out, 'go'), '');
    const results = () => readdirSync(out).filter((f) => f.endsWith('.json'));
    for (let i = 0; i < 400 && results().length < 2; i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    const files = results();
    expect(files).toHaveLength(2);
    const granted = files.map((f) => JSON.parse(readFileSync(join(out, f), 'utf8')).granted);
    expect(granted[0] + granted[1]).toBe(100_000);
    // Each instance is one of PM2's workers, not the daemon.
    expect(files.map((f) => Number.parseInt(f, 10)).sort()).toEqual(apps.map((a) => a.pid).sort());
    expect(existsSync(`/dev/shm/atomic-limiter.${region}`)).toBe(true);
  }, 60_000);
});
