// The package's install step: loads a prebuilt binary of host mode's addon, or builds it from
// source with node-gyp. The headers come from beside the running Node when they are there
// (official tarballs, nvm and distribution packages install include/node), so the build
// needs no download. A failed build only warns: nothing but atomic-limiter/host needs it.
'use strict';
const { existsSync } = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const env = { ...process.env };
const prefix = path.resolve(path.dirname(process.execPath), '..');
if (!env.npm_config_nodedir && existsSync(path.join(prefix, 'include', 'node', 'node.h'))) {
  env.npm_config_nodedir = prefix;
}
let built = false;
try {
  const bin = require.resolve('node-gyp-build/bin.js');
  const r = spawnSync(process.execPath, [bin], { cwd: __dirname, env, stdio: 'inherit' });
  built = r.status === 0;
} catch {}
if (!built) {
  console.warn(
    'atomic-limiter: the host-mode addon was not built (it needs a C++ compiler, python3 and make); ' +
      'atomic-limiter/host will not load, everything else works. See docs/host.md.',
  );
}
