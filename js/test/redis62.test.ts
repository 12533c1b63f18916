// The scripts path on Redis 6.2 (no FUNCTION): detection falls to EVALSHA of the
// bundled library, waits follow the library's protocol, guarded writes go through
// its lock_guard, and a SCRIPT FLUSH is survived by loading the script again. Skipped, saying so, where there is no 6.2
// build (REDIS62_SERVER, by default target/redis-6.2/redis-server, which `make deps`
// builds).
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { after, before, describe, it } from "node:test";

import { FencedError, type LockLostError, Locks } from "../src/index.js";
import { type Client, type ClientName, REDIS62, Server, client, eventually } from "./helpers.js";

const present = existsSync(REDIS62);
if (!present) {
  console.log(
    `# skipped: the scripts path on Redis 6.2 (${REDIS62} is missing; make deps builds it, or set REDIS62_SERVER)`,
  );
}

describe("Redis 6.2, the scripts path", { skip: present ? false : `${REDIS62} is missing` }, () => {
  let server: Server;
  before(async () => {
    server = await Server.start({ module: false, binary: REDIS62 });
  });
  after(async () => server?.stop());

  for (const name of ["ioredis", "node-redis", "ioredis5", "node-redis4"] as ClientName[]) {
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

      it("detects scripts, locks, waits, renews, and survives a SCRIPT FLUSH", async () => {
        assert.equal(await locks.backend(), "scripts");
        const key = `six:${name}`;
        const holder = await locks.tryAcquire(key, { ttl: 300 });
        assert.ok(holder);
        const waiting = locks.acquire(key, { ttl: 10_000, wait: 10_000 });
        await eventually(async () => (await locks.info(key))?.waiters === 1);
        await server.call(["SCRIPT", "FLUSH"]);
        await new Promise((ok) => setTimeout(ok, 500)); // renewals through a reload
        assert.equal(holder.signal.aborted, false);
        await holder.release();
        const next = await waiting;
        assert.ok(next && next.token > holder.token);
        await next.release();
      });

      it("guards a write through EVALSHA, and refuses it once the lock is deleted", async () => {
        const key = `{six-guard:${name}}`;
        const out = `${key}:out`;
        const lock = await locks.tryAcquire(key, { ttl: 10_000 });
        assert.ok(lock);
        await server.call(["SCRIPT", "FLUSH"]); // the guard loads the script again
        assert.equal(await lock.guard([out], "SET", out, "v"), "OK");
        assert.equal(await server.call(["GET", out]), "$1\r\nv\r\n");
        await server.call(["DEL", key]);
        await assert.rejects(lock.guard([out], "SET", out, "stale"), FencedError);
        assert.equal((lock.signal.reason as LockLostError).why, "fenced");
        assert.equal(await server.call(["GET", out]), "$1\r\nv\r\n");
      });
    });
  }
});
