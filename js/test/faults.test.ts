// Faults: a black-holed network, a stopped server (SIGSTOP), a restart that loses
// the library. In each, the holder's signal aborts before a rival can be granted,
// and a wait nobody answers gives up within its timeout and the margin.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";

import { type LockLostError, Locks, WAIT_MARGIN_MS, WaitUnansweredError, margin } from "../src/index.js";
import { BlackHole, type ClientName, Server, client, eventually, raw } from "./helpers.js";

const CLIENTS: ClientName[] = ["ioredis", "node-redis"];
let counter = 0;
const fresh = (name: string): string => `${name}:${process.pid}:${counter++}`;

/** When `signal` aborts (performance.now()), once it does. */
function abortedAt(signal: AbortSignal): Promise<number> {
  return new Promise((ok) => signal.addEventListener("abort", () => ok(performance.now()), { once: true }));
}

for (const backend of ["module", "functions"] as const) {
  for (const name of CLIENTS) {
    describe(`faults on the ${backend} backend with ${name}`, () => {
      let server: Server;
      before(async () => {
        server = await Server.start({ module: backend === "module", library: backend === "functions" });
      });
      after(async () => server.stop());

      it("aborts the signal before a rival is granted when the network is cut", async () => {
        const hole = await BlackHole.start(server.port);
        const redis = await client(name, hole.port);
        const locks = new Locks(redis.redis);
        try {
          const key = fresh("cut");
          const ttl = 1000;
          const lock = await locks.tryAcquire(key, { ttl });
          assert.ok(lock);
          const aborted = abortedAt(lock.signal);
          await sleep(400); // one renewal through
          hole.cut();
          // A rival on a path of its own waits in the server's queue.
          const rival = (async () => {
            const args = backend === "module"
              ? ["LOCK.ACQUIRE", key, "rival", "5000", "WAIT", "5000"]
              : ["FCALL", "lock_acquire", "1", key, "rival", "5000"];
            for (;;) {
              const reply = await raw(server.port, args, 8000);
              if (reply.startsWith(":")) return performance.now();
              await sleep(5);
            }
          })();
          const [lostAt, grantedAt] = await Promise.all([aborted, rival]);
          assert.equal((lock.signal.reason as LockLostError).why, "expired");
          assert.ok(
            grantedAt - lostAt >= margin(ttl) / 2,
            `lost at ${lostAt.toFixed(1)}, the rival granted at ${grantedAt.toFixed(1)}`,
          );
        } finally {
          locks.close();
          await hole.stop();
          await redis.close().catch(() => undefined);
        }
      });

      it("aborts the signal by the lease's deadline while the server is stopped", async () => {
        const redis = await client(name, server.port);
        const locks = new Locks(redis.redis);
        try {
          const key = fresh("stopped");
          const lock = await locks.tryAcquire(key, { ttl: 900 });
          assert.ok(lock);
          const aborted = abortedAt(lock.signal);
          server.pause();
          const pausedAt = performance.now();
          const left = lock.remaining;
          let lostAt: number;
          try {
            lostAt = await aborted;
          } finally {
            server.resume();
          }
          assert.equal((lock.signal.reason as LockLostError).why, "expired");
          assert.ok(lostAt <= pausedAt + left + 25, `lost ${(lostAt - pausedAt).toFixed(1)} ms after the pause, ${left.toFixed(1)} ms were left`);
          await lock.release(); // what is left of it on the server, if anything
        } finally {
          server.resume();
          locks.close();
          await redis.close();
        }
      });

      it("never re-sends a wait whose connection dropped: the acquire fails and leaves no place", async () => {
        const redis = await client(name, server.port);
        const locks = new Locks(redis.redis);
        try {
          const key = fresh("dropped");
          const holder = await locks.tryAcquire(key, { ttl: 10_000 });
          assert.ok(holder);
          const waiting = locks.acquire(key, { ttl: 10_000, wait: 20_000 });
          await eventually(async () => (await locks.info(key))?.waiters === 1, 5000, "queued");
          // The waiting connection: blocked in LOCK.ACQUIRE (module) or BLPOP (library).
          const list = await server.call(["CLIENT", "LIST"]);
          const blocked = list.split("\n").find((line) => /cmd=(lock\.acquire|blpop) /.test(line));
          const id = /id=(\d+)/.exec(blocked ?? "")?.[1];
          assert.ok(id, list);
          await server.call(["CLIENT", "KILL", "ID", id]);
          await assert.rejects(waiting);
          await sleep(300); // a driver that re-sent the wait would have queued it again by now
          assert.equal((await locks.info(key))?.waiters, 0);
          await holder.release();
          assert.equal(await locks.info(key), null);
        } finally {
          locks.close();
          await redis.close();
        }
      });

      it("gives up a wait on a stopped server within its timeout and the margin", async () => {
        const redis = await client(name, server.port);
        const locks = new Locks(redis.redis);
        try {
          const key = fresh("hung");
          const holder = await locks.tryAcquire(key, { ttl: 10_000 });
          assert.ok(holder);
          const waiting = locks.acquire(key, { ttl: 10_000, wait: 300 });
          await sleep(50);
          server.pause();
          const started = performance.now();
          try {
            await assert.rejects(waiting, WaitUnansweredError);
          } finally {
            server.resume();
          }
          const took = performance.now() - started;
          assert.ok(took <= 300 + WAIT_MARGIN_MS + 300, `gave up after ${took.toFixed(0)} ms`);
          await holder.release();
        } finally {
          server.resume();
          locks.close();
          await redis.close();
        }
      });
    });
  }
}

for (const name of CLIENTS) {
  describe(`a restart that loses the library, with ${name}`, () => {
    it("signals the loss at the next renewal through the scripts path, and detects anew", async () => {
      const server = await Server.start({ module: false, library: true });
      const redis = await client(name, server.port);
      const locks = new Locks(redis.redis);
      try {
        const key = fresh("restart");
        const ttl = 3000;
        const lock = await locks.tryAcquire(key, { ttl });
        assert.ok(lock);
        assert.equal(await locks.backend(), "functions");
        const aborted = abortedAt(lock.signal);
        await server.restart(); // no persistence: the lock and the library are gone
        const restartedAt = performance.now();
        const lostAt = await aborted;
        assert.equal((lock.signal.reason as LockLostError).why, "refused");
        assert.ok(lostAt - restartedAt < ttl / 3 + 500, `lost ${(lostAt - restartedAt).toFixed(0)} ms after the restart`);
        assert.equal(lock.backend, "scripts");
        await eventually(async () => (await locks.backend().catch(() => "none")) === "scripts", 3000, "detected anew");
        const again = await locks.tryAcquire(key, { ttl });
        assert.ok(again);
        await again.release();
      } finally {
        locks.close();
        await redis.close();
        await server.stop();
      }
    });
  });
}
