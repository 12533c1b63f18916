// What a holder can trust (contract.md "Clients"), against real servers: huge and tiny TTLs and
// waits, an extend to a shorter TTL, a check from a timer that ran late, an acquire
// aborted on its way or as the holder releases, a release whose reply was lost, and
// a wait without limit on the library when the path dies. Each failed before its fix.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";

import { CONTROL_LIMIT_MS, Locks, WAIT_MARGIN_MS, WaitUnansweredError } from "../src/index.js";
import { BlackHole, type Client, type ClientName, Server, client, eventually } from "./helpers.js";

const CLIENTS: ClientName[] = ["ioredis", "node-redis"];
let counter = 0;
const fresh = (name: string): string => `${name}:${process.pid}:${counter++}`;

/** Blocks the event loop for `ms`, as a long synchronous stretch (or SIGSTOP) does. */
function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // spinning
  }
}

for (const backend of ["module", "functions"] as const) {
  for (const name of CLIENTS) {
    describe(`trust on the ${backend} backend with ${name}`, () => {
      let server: Server;
      let redis: Client;
      let locks: Locks;
      before(async () => {
        server = await Server.start({ module: backend === "module", library: backend === "functions" });
        redis = await client(name, server.port);
        locks = new Locks(redis.redis);
      });
      after(async () => {
        locks.close();
        await redis.close();
        await server.stop();
      });

      it("holds a TTL of 2^62 - 1 ms, waits 2^33 ms, and grants TTLs of 1 and 50 ms", async () => {
        const warnings: string[] = [];
        const warned = (warning: Error): void => void warnings.push(`${warning.name}: ${warning.message}`);
        process.on("warning", warned);
        try {
          const exact = await locks.tryAcquire(fresh("exact"), { ttl: 2n ** 62n - 1n });
          assert.ok(exact);
          assert.equal(exact.ttl, 2 ** 62);
          // The library ends a TTL past 2^53 ms after the epoch there: its lease counts 2^52.
          if (backend === "module") assert.ok(exact.remaining > 2 ** 61, String(exact.remaining));
          else assert.ok(exact.remaining < 2 ** 52 && exact.remaining > 2 ** 51, String(exact.remaining));
          assert.ok(((await locks.info(exact.key))?.holders[0]?.ttl ?? 0) > 2 ** 52);
          assert.equal(await exact.release(), true);
          const key = fresh("huge");
          const lock = await locks.tryAcquire(key, { ttl: 2 ** 50 });
          assert.ok(lock);
          const ttl = (await locks.info(key))?.holders[0]?.ttl ?? 0;
          assert.ok(ttl > 2 ** 49, `the server's TTL: ${ttl}`);
          const waiting = locks.acquire(key, { ttl: 5000, wait: 2 ** 33 });
          await eventually(async () => (await locks.info(key))?.waiters === 1, 3000, "queued");
          await sleep(300);
          assert.equal(lock.signal.aborted, false);
          assert.equal((await locks.info(key))?.waiters, 1, "still waiting");
          assert.equal(await lock.release(), true);
          const next = await waiting;
          assert.ok(next);
          assert.equal(await next.release(), true);
          for (const ttl of [1, 50]) {
            const short = await locks.tryAcquire(fresh("short"), { ttl });
            assert.ok(short, `TTL ${ttl}`);
            await eventually(() => short.signal.aborted, 1000, `the loss of a lease of ${ttl} ms`);
          }
        } finally {
          process.off("warning", warned);
        }
        assert.deepEqual(warnings, []);
      });

      it("renews at a third of a shorter TTL after an extend", async () => {
        const key = fresh("shorter");
        const lock = await locks.tryAcquire(key, { ttl: 30_000 });
        assert.ok(lock);
        assert.equal(await lock.extend(600), true);
        assert.equal(lock.ttl, 600);
        await sleep(1500);
        assert.equal(lock.signal.aborted, false);
        assert.equal((await locks.info(key))?.holders[0]?.owner, lock.owner);
        await lock.release();
      });

      it("says lost in a check whose timer ran before the lease's own", async () => {
        const key = fresh("late");
        const lock = await locks.tryAcquire(key, { ttl: 300 });
        assert.ok(lock);
        // A check due before the renewal and the lease's timer; the loop is then
        // blocked past the lease (a stopped process), so the check runs first.
        const checked = new Promise<boolean>((done) => setTimeout(() => done(lock.signal.aborted), 10));
        busy(500);
        assert.equal(await checked, true);
        assert.throws(() => lock.check(), /lost/);
        await lock.release();
      });

      it("refuses an owner id of more than 256 bytes before sending", async () => {
        await assert.rejects(locks.tryAcquire(fresh("owner"), { ttl: 1000, owner: "o".repeat(257) }), RangeError);
      });

      describe("through a proxy", () => {
        let proxy: BlackHole;
        let through: Client;
        let proxied: Locks;
        before(async () => {
          proxy = await BlackHole.start(server.port);
          through = await client(name, proxy.port);
          proxied = new Locks(through.redis);
          await proxied.backend();
        });
        after(async () => {
          proxied.close();
          await through.close().catch(() => undefined);
          await proxy.stop();
        });

        it("withdraws a tryAcquire aborted while its call is on the way", async () => {
          const key = fresh("try");
          proxy.delay(200);
          try {
            const controller = new AbortController();
            const trying = proxied.tryAcquire(key, { ttl: 60_000, signal: controller.signal });
            await sleep(50);
            controller.abort(new Error("given up"));
            const outcome = await trying.then(
              (lock) => ({ lock }),
              (error: unknown) => ({ error }),
            );
            await sleep(600);
            if ("error" in outcome) {
              assert.match(String(outcome.error), /given up/);
              assert.equal(await locks.info(key), null, "nothing left behind");
            } else {
              assert.ok(outcome.lock, "granted: the caller's");
              await outcome.lock.release();
            }
          } finally {
            proxy.heal();
          }
        });

        it("reports a release whose reply was lost as released (or the connection's error)", async () => {
          const key = fresh("reply");
          const lock = await proxied.tryAcquire(key, { ttl: 10_000 });
          assert.ok(lock);
          proxy.dropReplies();
          const releasing = lock.release().then((released) => released, (error: unknown) => error);
          // The proxy runs in this process: its reply is dropped once it came to it.
          await eventually(async () => proxy.dropped() && (await server.call(["EXISTS", key])) === ":0\r\n", 2000, "released");
          proxy.heal();
          const outcome = await releasing;
          assert.ok(outcome === true || outcome instanceof Error, `released: ${String(outcome)}`);
          if (outcome instanceof Error) assert.doesNotMatch(outcome.message, /not held/);
          assert.equal(await locks.info(key), null);
        });

        if (backend === "functions") {
          it("ends a wait without limit on a dead path within the bounds of its steps", async () => {
            const key = fresh("dead");
            const holder = await locks.tryAcquire(key, { ttl: 30_000 });
            assert.ok(holder);
            const waiting = proxied.acquire(key, { ttl: 5000 });
            await eventually(async () => (await locks.info(key))?.waiters === 1, 3000, "queued");
            await sleep(100);
            proxy.cut();
            const cut = performance.now();
            try {
              await assert.rejects(waiting, WaitUnansweredError);
              const took = performance.now() - cut;
              assert.ok(took <= 2000 + CONTROL_LIMIT_MS + WAIT_MARGIN_MS, `ended ${took.toFixed(0)} ms after the cut`);
            } finally {
              proxy.heal();
              await holder.release();
            }
          });
        }
      });

      if (backend === "module") {
        it("leaves nothing to a wait aborted as the holder releases (the socket is destroyed)", async () => {
          const other = await client(name, server.port);
          const holders = new Locks(other.redis);
          try {
            for (let round = 0; round < 30; round++) {
              const key = fresh("crossing");
              const holder = await holders.tryAcquire(key, { ttl: 30_000 });
              assert.ok(holder);
              const controller = new AbortController();
              const waiting = locks.acquire(key, { ttl: 30_000, signal: controller.signal }).then(
                (lock) => lock,
                () => null,
              );
              await eventually(async () => (await locks.info(key))?.waiters === 1, 3000, "queued");
              controller.abort(new Error("cancelled"));
              // The holder's release goes after the withdrawal's, before the loop
              // turns: a connection ended (not destroyed) has not sent its FIN yet.
              for (let turn = 0; turn < round * 2; turn++) await Promise.resolve();
              await holder.release();
              const outcome = await waiting;
              await sleep(50);
              const info = await locks.info(key);
              if (outcome === null) assert.equal(info, null, `round ${round}: the aborted waiter holds it`);
              else await outcome.release();
            }
          } finally {
            holders.close();
            await other.close();
          }
        });
      }
    });
  }
}
