// A master behind redis-sentinel, with ioredis' Sentinel support: the lock's own
// connections (duplicated from the user's client) find the master through the
// sentinel too, waits and renewals included.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { Redis } from "ioredis";

import { Locks } from "../src/index.js";
import { Server, eventually, freePort, raw } from "./helpers.js";

describe("a master behind redis-sentinel, with ioredis", () => {
  let master: Server;
  let sentinel: ChildProcess;
  let port = 0;
  const dir = mkdtempSync(join(tmpdir(), "redis-lock-js-sentinel-"));
  before(async () => {
    master = await Server.start();
    port = await freePort();
    const conf = join(dir, "sentinel.conf");
    writeFileSync(conf, `port ${port}\nbind 127.0.0.1\nsentinel monitor jobs 127.0.0.1 ${master.port} 1\n`);
    sentinel = spawn("redis-sentinel", [conf], { stdio: "ignore" });
    await eventually(async () => (await raw(port, ["SENTINEL", "get-master-addr-by-name", "jobs"]).catch(() => "")).includes(String(master.port)), 10_000, "sentinel up");
  });
  after(async () => {
    sentinel.kill("SIGKILL");
    await master.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("locks, waits and renews through the sentinel", async () => {
    const redis = new Redis({ sentinels: [{ host: "127.0.0.1", port }], name: "jobs" });
    const locks = new Locks(redis);
    try {
      assert.equal(await locks.backend(), "module");
      const holder = await locks.tryAcquire("sentinel:1", { ttl: 300 });
      assert.ok(holder);
      const waiting = locks.acquire("sentinel:1", { ttl: 10_000, wait: 5000 });
      await sleep(700); // renewals through the sentinel's master
      assert.equal(holder.signal.aborted, false);
      await holder.release();
      const next = await waiting;
      assert.ok(next && next.token > holder.token);
      await next.release();
    } finally {
      locks.close();
      redis.disconnect();
    }
  });
});
