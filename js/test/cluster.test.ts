// A 3-master Cluster, with the module on every node and then with the library
// loaded on every master: locks on keys served by each node, waits on the node of
// their key, a semaphore, with ioredis and node-redis (current and previous majors).
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { type Backend, Locks } from "../src/index.js";
import { keySlot } from "../src/slot.js";
import { CLIENTS, type Client, Cluster, clusterClient, eventually, raw } from "./helpers.js";

const KEYS = ["jobs:1", "jobs:2", "jobs:3", "{jobs}:4", "a{b}c", "x"];

for (const backend of ["module", "functions"] as Backend[]) {
  describe(`a 3-master Cluster on the ${backend} backend`, () => {
    let cluster: Cluster;
    before(async () => {
      cluster = await Cluster.start(3, { module: backend === "module", library: backend === "functions" });
    });
    after(async () => cluster.stop());

    it("computes each key's slot as the server does", async () => {
      const port = cluster.nodes[0]?.port ?? 0;
      for (const key of [...KEYS, "", "{}x", "a}b{", "{a}{b}", "ключ"]) {
        const reply = await raw(port, ["CLUSTER", "KEYSLOT", key]);
        assert.equal(keySlot(key), Number(reply.slice(1)), key);
      }
    });

    for (const name of CLIENTS) {
      describe(`with ${name}`, () => {
        let redis: Client;
        let locks: Locks;
        before(async () => {
          redis = await clusterClient(name, cluster.nodes.map((n) => n.port));
          locks = new Locks(redis.redis);
        });
        after(async () => {
          locks.close();
          await redis.close();
        });

        it("locks keys on every node, and waits on the node of the key", async () => {
          assert.equal(await locks.backend(), backend);
          for (const key of KEYS) {
            const full = `${name}:${key}`;
            const holder = await locks.tryAcquire(full, { ttl: 10_000 });
            assert.ok(holder, full);
            assert.equal(await locks.tryAcquire(full, { ttl: 10_000 }), null);
            const waiting = locks.acquire(full, { ttl: 10_000, wait: 5000 });
            await eventually(async () => (await locks.info(full))?.waiters === 1, 5000, `a waiter on ${full}`);
            await holder.release();
            const next = await waiting;
            assert.ok(next && next.token > holder.token, full);
            assert.equal(await next.release(), true);
          }
        });

        it("renews, and runs a semaphore", async () => {
          const key = `${name}:{sem}:1`;
          const a = await locks.tryAcquire(key, { ttl: 300, limit: 2 });
          const b = await locks.tryAcquire(key, { ttl: 300, limit: 2 });
          assert.ok(a && b);
          assert.equal(await locks.tryAcquire(key, { ttl: 300, limit: 2 }), null);
          await new Promise((ok) => setTimeout(ok, 700));
          assert.equal(a.signal.aborted || b.signal.aborted, false);
          assert.equal((await locks.info(key))?.holders.length, 2);
          await a.release();
          await b.release();
        });
      });
    }
  });
}
