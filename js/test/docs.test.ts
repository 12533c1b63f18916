// The examples of docs/node-client.md and the README are the files in js/examples,
// word for word (tsc type-checks those); the worker, the cron job and the fenced
// Redis write also run here, against a server with the module (the fenced
// PostgreSQL write runs in postgres.test.ts).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { Redis } from "ioredis";
import { createClient } from "redis";

import { FencedError, Locks } from "redis-lock-client";

import { nightlyExport } from "../examples/cron.js";
import { saveResult } from "../examples/fencing.js";
import { type Job, work } from "../examples/worker.js";
import { ROOT, Server } from "./helpers.js";

const example = (name: string): string => readFileSync(join(ROOT, "js/examples", name), "utf8");

describe("the documentation", () => {
  it("shows the examples as they are in js/examples", () => {
    const guide = readFileSync(join(ROOT, "docs/node-client.md"), "utf8");
    for (const name of ["worker.ts", "cron.ts", "fencing.ts"]) {
      assert.ok(guide.includes("```ts\n" + example(name) + "```"), `docs/node-client.md shows examples/${name}`);
    }
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    assert.ok(readme.includes("```ts\n" + example("readme.ts") + "```"), "README.md shows examples/readme.ts");
  });
});

describe("the examples", () => {
  let server: Server;
  before(async () => {
    server = await Server.start();
  });
  after(async () => server.stop());

  it("the worker applies every job once, one at a time per account", async () => {
    const redis = new Redis(server.port);
    try {
      const jobs: Job[] = Array.from({ length: 20 }, (_, i) => ({ id: String(i), account: `a${i % 2}`, amount: 1 }));
      await redis.lpush("payments", ...jobs.map((job) => JSON.stringify(job)));
      const stop = new AbortController();
      const working = work(redis, "payments", 4, stop.signal);
      while ((await redis.llen("payments")) > 0) await new Promise((ok) => setTimeout(ok, 20));
      await new Promise((ok) => setTimeout(ok, 300));
      stop.abort();
      assert.equal((await working).length, 20);
      assert.equal(await redis.hget("{account:a0}:balance", "amount"), "10");
      assert.equal(await redis.hget("{account:a1}:balance", "amount"), "10");
    } finally {
      redis.disconnect();
    }
  });

  it("the fenced write lands while the lock holds, and not after another took it", async () => {
    const redis = new Redis(server.port);
    const locks = new Locks(redis);
    try {
      const lock = await locks.tryAcquire("{job:docs}", { ttl: 30_000 });
      assert.ok(lock);
      await saveResult(lock, "docs", "42 rows");
      assert.equal(await redis.get("{job:docs}:result"), "42 rows");
      await redis.del("{job:docs}");
      const rival = await locks.tryAcquire("{job:docs}", { ttl: 30_000 });
      assert.ok(rival);
      await saveResult(rival, "docs", "43 rows");
      await assert.rejects(saveResult(lock, "docs", "stale"), FencedError);
      assert.equal(await redis.get("{job:docs}:result"), "43 rows");
      await rival.release();
    } finally {
      locks.close();
      redis.disconnect();
    }
  });

  it("the cron job runs on one replica of three", async () => {
    const clients = Array.from({ length: 3 }, () => createClient({ url: server.url }));
    await Promise.all(clients.map((c) => c.connect()));
    try {
      const slow = async (): Promise<number> => new Promise((ok) => setTimeout(() => ok(7), 200));
      const results = await Promise.all(clients.map((c) => nightlyExport(new Locks(c), slow)));
      assert.equal(results.filter((r) => r.startsWith("exported 7 rows")).length, 1, results.join("; "));
      assert.equal(results.filter((r) => r.startsWith("skipped")).length, 2);
    } finally {
      await Promise.all(clients.map((c) => c.close()));
    }
  });
});
