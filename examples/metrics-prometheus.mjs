// A limiter's metrics for Prometheus: OpenTelemetry's MeterProvider with the Prometheus
// exporter, and atomic-limiter/metrics observing two limiters. Some traffic, then one
// scrape of /metrics, printed.
//
//   npm install @opentelemetry/api @opentelemetry/sdk-metrics @opentelemetry/exporter-prometheus
//   node examples/metrics-prometheus.mjs
//
// The exporter usually serves its own endpoint (new PrometheusExporter({ port: 9464 })); here
// it answers on a server of ours on a free port, so that the example never collides with
// another. The last line is JSON.
import { createServer } from 'node:http';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { TokenBucket, WarmingBucket } from 'atomic-limiter';
import { observeLimiters } from 'atomic-limiter/metrics';

const exporter = new PrometheusExporter({ preventServerStart: true });
const provider = new MeterProvider({ readers: [exporter] });
const meter = provider.getMeter('my-service');

const perUser = new TokenBucket({ capacity: 10, refillPerSecond: 20, queueLimit: 20 });
const backend = new WarmingBucket({ ratePerSecond: 200, warmupMs: 500, queueLimit: 50 });
const stop = observeLimiters(meter, { 'per-user': perUser, backend });

// Traffic: 3 users try 20 times each (10 pass at once per user), then 5 acquire() calls
// that wait for the refill; the cold backend limiter takes 20 permits through acquire().
for (const user of ['alice', 'bob', 'carol']) {
  for (let i = 0; i < 20; i++) perUser.tryAcquire(user);
}
await Promise.all(Array.from({ length: 5 }, () => perUser.acquire('alice')));
for (let i = 0; i < 20; i++) await backend.acquire();

const server = createServer((req, res) => exporter.getMetricsRequestHandler(req, res));
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const { port } = server.address();
const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
server.close();
const lines = text.split('\n').filter((l) => l.startsWith('atomic_limiter'));
for (const line of lines) console.log(line);

stop();
await provider.shutdown();
// A sample's value by its name and first labels (the exporter adds otel_scope_name).
const value = (prefix) =>
  Number(
    lines
      .find((l) => l.startsWith(prefix))
      ?.split(' ')
      .pop(),
  );
console.log(
  JSON.stringify({
    admitted: value('atomic_limiter_decisions_total{limiter="per-user",result="admitted"'),
    refused: value('atomic_limiter_decisions_total{limiter="per-user",result="refused"'),
    backendAdmitted: value('atomic_limiter_decisions_total{limiter="backend",result="admitted"'),
    waits: value('atomic_limiter_wait_duration_count{limiter="per-user",result="admitted"'),
    backendWaits: value('atomic_limiter_wait_duration_count{limiter="backend",result="admitted"'),
  }),
);
