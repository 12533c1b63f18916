// The client on each backend (the module; the library by FCALL; the library sent as
// a script, found by detection on a server without it loaded) and with each Redis
// client: locks, waits in FIFO order, semaphores, read-write locks, renewal, the
// loss signal, using(), events.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { type Backend, LockBusyError, type LockLostError, Locks } from "../src/index.js";
import { CLIENTS, type Client, Server, client, eventually } from "./helpers.js";

const BACKENDS: Backend[] = ["module", "functions", "scripts"];
let counter = 0;
const fresh = (name: string): string => `${name}:${process.pid}:${counter++}`;

for (const backend of BACKENDS) {
  describe(`on the ${backend} backend`, () => {
    let server: Server;
    before(async () => {
      server = await Server.start({ module: backend === "module", library: backend === "functions" });
    });
    after(async () => server.stop());

    for (const name of CLIENTS) {
      describe(`with ${name}`, () => {
        let redis: Client;
        let locks: Locks;
        before(async () => {
          redis = await client(name, server.port);
          locks = new Locks(redis.redis);
        });
        after(async () => {
          locks.close();
          await redis.close();
        });

        it("detects the backend", async () => {
          assert.equal(await locks.backend(), backend);
        });

        it("hands out increasing bigint tokens, refuses a second holder, releases", async () => {
          const key = fresh("basic");
          const first = await locks.tryAcquire(key, { ttl: 10_000 });
          assert.ok(first);
          assert.equal(typeof first.token, "bigint");
          assert.ok(first.token > 0n);
          assert.equal(first.key, key);
          assert.match(first.owner, /^.+:\d+:[0-9a-f]{16}$/);
          assert.equal(await locks.tryAcquire(key, { ttl: 10_000 }), null);
          const info = await locks.info(key);
          assert.equal(info?.holders[0]?.owner, first.owner);
          assert.equal(info?.holders[0]?.token, first.token);
          assert.equal(await first.release(), true);
          assert.equal(first.signal.aborted, true);
          assert.equal((first.signal.reason as LockLostError).why, "released");
          assert.equal(await locks.info(key), null);
          const second = await locks.tryAcquire(key, { ttl: 10_000 });
          assert.ok(second && second.token > first.token);
          await second.release();
        });

        it("gives the same owner the same token back", async () => {
          const key = fresh("same");
          const owner = "worker-7";
          const first = await locks.tryAcquire(key, { ttl: 10_000, owner, renew: false });
          const again = await locks.tryAcquire(key, { ttl: 10_000, owner, renew: false });
          assert.ok(first && again);
          assert.equal(again.token, first.token);
          await again.release();
        });

        it("grants waiters in the order they came when the holder releases", async () => {
          const key = fresh("fifo");
          const holder = await locks.tryAcquire(key, { ttl: 10_000 });
          assert.ok(holder);
          const order: number[] = [];
          const waits = [];
          for (let i = 0; i < 3; i++) {
            waits.push(
              locks.acquire(key, { ttl: 10_000, wait: 10_000 }).then(async (lock) => {
                assert.ok(lock);
                order.push(i);
                await sleep(5);
                await lock.release();
              }),
            );
            await eventually(async () => (await locks.info(key))?.waiters === i + 1, 5000, `waiter ${i} queued`);
          }
          await holder.release();
          await Promise.all(waits);
          assert.deepEqual(order, [0, 1, 2]);
        });

        it("resolves null when a timed wait runs out, leaving nothing behind", async () => {
          const key = fresh("timeout");
          const holder = await locks.tryAcquire(key, { ttl: 10_000 });
          assert.ok(holder);
          const started = Date.now();
          assert.equal(await locks.acquire(key, { ttl: 10_000, wait: 200 }), null);
          assert.ok(Date.now() - started >= 190);
          const info = await locks.info(key);
          assert.equal(info?.waiters, 0);
          assert.equal(info?.holders.length, 1);
          await holder.release();
        });

        it("withdraws from the queue when the caller's signal aborts mid-wait", async () => {
          const key = fresh("abort");
          const holder = await locks.tryAcquire(key, { ttl: 10_000 });
          assert.ok(holder);
          const controller = new AbortController();
          const waiting = locks.acquire(key, { ttl: 10_000, signal: controller.signal });
          await eventually(async () => (await locks.info(key))?.waiters === 1, 5000, "queued");
          controller.abort(new Error("shutting down"));
          await assert.rejects(waiting, /shutting down/);
          assert.equal((await locks.info(key))?.waiters, 0);
          await holder.release();
          await sleep(50);
          assert.equal(await locks.info(key), null, "nobody was granted after the abort");
        });

        it("runs a semaphore of LIMIT n", async () => {
          const key = fresh("semaphore");
          const a = await locks.tryAcquire(key, { ttl: 10_000, limit: 2 });
          const b = await locks.tryAcquire(key, { ttl: 10_000, limit: 2 });
          assert.ok(a && b);
          assert.notEqual(a.token, b.token);
          assert.equal(await locks.tryAcquire(key, { ttl: 10_000, limit: 2 }), null);
          const third = locks.acquire(key, { ttl: 10_000, limit: 2, wait: 5000 });
          await eventually(async () => (await locks.info(key))?.waiters === 1);
          await a.release();
          const got = await third;
          assert.ok(got && got.token > b.token);
          assert.equal((await locks.info(key))?.holders.length, 2);
          await b.release();
          await got.release();
        });

        it("shares a read lock and queues a writer behind the readers", async () => {
          const key = fresh("rw");
          const r1 = await locks.tryAcquire(key, { ttl: 10_000, shared: true });
          const r2 = await locks.tryAcquire(key, { ttl: 10_000, shared: true });
          assert.ok(r1 && r2);
          assert.equal(await locks.tryAcquire(key, { ttl: 10_000 }), null);
          const writer = locks.acquire(key, { ttl: 10_000, wait: 5000 });
          await eventually(async () => (await locks.info(key))?.waiters === 1);
          assert.equal(await locks.tryAcquire(key, { ttl: 10_000, shared: true }), null, "a reader does not pass a queued writer");
          await r1.release();
          await r2.release();
          const w = await writer;
          assert.ok(w);
          assert.equal((await locks.info(key))?.mode, "exclusive");
          await w.release();
        });

        it("renews a held lock past its TTL", async () => {
          const key = fresh("renew");
          const lock = await locks.tryAcquire(key, { ttl: 300 });
          assert.ok(lock);
          await sleep(800);
          assert.equal(lock.signal.aborted, false);
          assert.equal((await locks.info(key))?.holders[0]?.owner, lock.owner);
          await lock.release();
        });

        it("aborts the signal with 'refused' at the next renewal after a DEL", async () => {
          const key = fresh("deleted");
          const lost: string[] = [];
          const onLost = (lock: { key: string }): void => void lost.push(lock.key);
          locks.on("lost", onLost);
          try {
            const lock = await locks.tryAcquire(key, { ttl: 900 });
            assert.ok(lock);
            await server.call(["DEL", key]);
            await eventually(() => lock.signal.aborted, 900, "the loss signal");
            assert.equal((lock.signal.reason as LockLostError).why, "refused");
            assert.deepEqual(lost, [key]);
            assert.throws(() => lock.check(), /lost/);
            assert.equal(await lock.release(), false);
          } finally {
            locks.off("lost", onLost);
          }
        });

        it("using() releases after the routine, also when it throws, and rejects when busy", async () => {
          const key = fresh("using");
          const value = await locks.using(key, { ttl: 10_000 }, async (lock, signal) => {
            assert.equal(signal.aborted, false);
            assert.ok((await locks.info(key))?.holders[0]?.owner === lock.owner);
            return 42;
          });
          assert.equal(value, 42);
          assert.equal(await locks.info(key), null);
          await assert.rejects(
            locks.using(key, { ttl: 10_000 }, () => {
              throw new Error("routine failed");
            }),
            /routine failed/,
          );
          assert.equal(await locks.info(key), null);
          const holder = await locks.tryAcquire(key, { ttl: 10_000 });
          await assert.rejects(locks.using(key, { ttl: 10_000, wait: 50 }, () => 1), LockBusyError);
          await holder?.release();
        });

        it("releases at the end of an `await using` block", async () => {
          const key = fresh("dispose");
          {
            await using lock = await locks.tryAcquire(key, { ttl: 10_000 });
            assert.ok(lock);
            assert.ok(await locks.info(key));
          }
          assert.equal(await locks.info(key), null);
        });

        it("emits acquired and released", async () => {
          const key = fresh("events");
          const seen: string[] = [];
          const acquired = (): void => void seen.push("acquired");
          const released = (_: unknown, held: boolean): void => void seen.push(`released ${held}`);
          locks.on("acquired", acquired).on("released", released);
          const lock = await locks.tryAcquire(key, { ttl: 10_000 });
          await lock?.release();
          locks.off("acquired", acquired).off("released", released);
          assert.deepEqual(seen, ["acquired", "released true"]);
        });
      });
    }
  });
}

describe("a client with a keyPrefix", () => {
  for (const backend of ["module", "functions"] as const) {
    it(`uses lock keys as given on the ${backend} backend (the prefix is not applied)`, async () => {
      const server = await Server.start({ module: backend === "module", library: backend === "functions" });
      const { Redis } = await import("ioredis");
      const redis = new Redis(server.port, "127.0.0.1", { keyPrefix: "app:" });
      const locks = new Locks(redis);
      try {
        const holder = await locks.tryAcquire("prefixed", { ttl: 10_000 });
        assert.ok(holder);
        assert.equal(await server.call(["EXISTS", "prefixed"]), ":1\r\n");
        const waiting = locks.acquire("prefixed", { ttl: 10_000, wait: 5000 });
        await eventually(async () => (await locks.info("prefixed"))?.waiters === 1);
        await holder.release();
        const next = await waiting;
        assert.ok(next);
        await next.release();
      } finally {
        locks.close();
        redis.disconnect();
        await server.stop();
      }
    });
  }
});
