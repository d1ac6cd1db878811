import { defineConfig } from 'tsup';

export default defineConfig({
  entry: {
    index: 'src/index.ts',
    cluster: 'src/cluster/index.ts',
    redis: 'src/redis/index.ts',
    http: 'src/http/index.ts',
    'fastify-config': 'src/http/fastify-config.ts',
    host: 'src/host/index.ts',
    metrics: 'src/metrics/index.ts',
  },
  format: ['esm', 'cjs'],
  dts: true,
  clean: true,
  sourcemap: true,
  target: 'node20',
  // import.meta.url in the CommonJS build (the host addon's loader finds its folder by it).
  shims: true,
  splitting: false,
  // Class names appear in messages and in inspection; keep them as written.
  keepNames: true,
  // Folds the layout's constants (S_STATE, REJECT, …) into the code that uses them: read
  // from the module's scope, each would be a memory load on every decision. Names and the
  // code's layout stay as written (no renaming, no mangling).
  minifySyntax: true,
});
