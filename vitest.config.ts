import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Worker-thread tests spawn real threads; keep files in separate forks so one
    // file's threads never compete with another's on this 2-core machine.
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
