import { defineConfig } from 'tsup';

export default defineConfig({
  entry: {
    index: 'src/index.ts',
    cluster: 'src/cluster/index.ts',
    redis: 'src/redis/index.ts',
    http: 'src/http/index.ts',
  },
  format: ['esm', 'cjs'],
  dts: true,
  clean: true,
  sourcemap: true,
  target: 'node20',
  splitting: false,
  // Class names appear in messages and in inspection; keep them as written.
  keepNames: true,
});
