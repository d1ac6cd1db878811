import { Redis } from 'ioredis';
import * as nodeRedis from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BackendUnavailableError } from '../../src/index.js';
import { TokenBucket } from '../../src/redis/index.js';
import { decisionOf, decisionOfReply, parseReply } from '../../src/redis/replies.js';
import { RedisProxy, RedisServer } from '../helpers/redis.js';

// A call takes only its own reply as its decision. node-redis 5, its connection cut every
// 40 ms, matches replies to the wrong commands (commands written to a dying socket stay in
// its reply queue): another key's grant, or an error of its own handshake, reaches a call.
// Each command carries a token its script echoes; any other reply is "unavailable".

describe("a call's own reply, and no other", () => {
  let server: RedisServer;
  let admin: Redis;
  beforeAll(async () => {
    server = await RedisServer.start();
    admin = new Redis(server.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
  });
  afterAll(async () => {
    admin?.disconnect();
    await server?.close();
  });

  const clients: [string, (port: number) => Promise<{ client: unknown; close(): void }>][] = [
    [
      'ioredis',
      async (port) => {
        const c = new Redis(port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
        return { client: c, close: () => c.disconnect() };
      },
    ],
    [
      'node-redis',
      async (port) => {
        const c = nodeRedis.createClient({ url: `redis://127.0.0.1:${port}` });
        await c.connect();
        return { client: c, close: () => void c.destroy() };
      },
    ],
  ];

  for (const [name, connect] of clients) {
    it(`${name}: a grant, a decision or an error reply that is another command's is "unavailable", never a decision`, async () => {
      const px = await RedisProxy.start(server.port);
      const { client, close } = await connect(px.port);
      try {
        const prefix = `foreign-${name}`;
        const spent = new TokenBucket({
          redis: client,
          capacity: 1,
          refillPerSecond: 1e-6,
          prefix,
          whenUnavailable: 'deny',
        });
        const view = new TokenBucket({ redis: admin, capacity: 1, refillPerSecond: 1e-6, prefix });
        await view.consume('k');
        // Loaded: each call below is one EVALSHA, alone in flight.
        expect(await spent.consume('k')).toMatchObject({ allowed: false, reason: 'limited' });
        const foreign = [
          ':1\r\n', // a tryAcquire() grant of another key
          '*5\r\n:1\r\n:9\r\n:0\r\n:0\r\n:0\r\n', // a consume() grant of another key
          "-ERR unknown subcommand 'SETINFO'. Try CLIENT HELP.\r\n", // a handshake's error
          '+OK\r\n',
        ];
        // A call that met a foreign reply counts Redis unavailable: the calls after it fail
        // fast until a probe finds it answering. Each injection waits for that.
        const back = async () => {
          for (let i = 0; i < 200; i++) {
            if ((await spent.consume('k')).reason === 'limited') return;
            await new Promise((r) => setTimeout(r, 10));
          }
        };
        const answers: unknown[] = [];
        for (const reply of foreign) {
          await back();
          px.replaceReplyOf('{k}', reply);
          answers.push(await spent.tryAcquire('k').catch((e) => e));
          await back();
          px.replaceReplyOf('{k}', reply);
          answers.push(await spent.consume('k').catch((e) => e));
        }
        await back();
        expect(answers).toEqual(
          Array(4)
            .fill(0)
            .flatMap(() => [
              false,
              expect.objectContaining({ allowed: false, reason: 'unavailable' }),
            ]),
        );
        // Every call ran on Redis, refused: nothing was admitted.
        expect((await view.stats('k')).admitted).toBe(1);
        expect(await spent.consume('k')).toMatchObject({ allowed: false, reason: 'limited' });
      } finally {
        close();
        px.close();
      }
    });
  }

  it("a script's own error still names the script, whatever the policy; it is never unavailable", async () => {
    const l = new TokenBucket({
      redis: admin,
      capacity: 3,
      refillPerSecond: 1,
      prefix: 'own-error',
      whenUnavailable: 'allow',
    });
    const [key] = l.redisKeys('k');
    await admin.set(key!, 'not a bucket');
    const error = await l.consume('k').then(
      () => undefined,
      (e) => e,
    );
    expect(error).not.toBeInstanceOf(BackendUnavailableError);
    expect(error.message).toMatch(
      /script atomic-limiter:gcra(-consume)? failed: ERR atomic-limiter: /,
    );
    expect(error.message).not.toMatch(/\[[0-9a-z]+\]$/);
  });
});

describe('a consume() reply read in place', () => {
  const read = (reply: unknown) => {
    try {
      return decisionOfReply('s', reply, 10);
    } catch (error) {
      return (error as Error).message;
    }
  };
  const long = (reply: unknown) => {
    try {
      return decisionOf(parseReply('s', reply), 10);
    } catch (error) {
      return (error as Error).message;
    }
  };

  it('gives the Decision the Reply gives, field for field and in order, for every form a script sends', () => {
    const replies: unknown[] = [
      [1, 9, 0, 250_000, 1_000_000],
      [0, 0, 1500, 2_000_000, 1_000_000, 0],
      [0, 0, 1500, 2_000_000, 1_000_000, -1, 7],
      [1, 3, 0, '0.5', 1_000_000],
      [0, 0, 'inf', '12.25', '1e+20'],
      [0, 0, '333.33333333333331', 0, 5, '0'],
      [1, 2, 0, 0, 0, 'x'],
      [2, 9, 0, 0, 0],
      [1, 9, 0, 0],
      [1, 9, 0, 0, 0, 0, 0, 0],
      [1, null, 0, 0, 0],
      [[1], 9, 0, 0, 0],
      ['1', 9, 0, 0, 0],
      1,
      'OK',
    ];
    for (const reply of replies) {
      const got = read(reply);
      expect({ reply, got }).toEqual({ reply, got: long(reply) });
      if (typeof got === 'object') expect(Object.keys(got)).toEqual(Object.keys(long(reply)));
    }
  });
});
