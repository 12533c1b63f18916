// Leader election (`locks.election`) against real servers: the module, the library
// by FCALL and by EVALSHA, with ioredis and node-redis (6 and 4/5), and a Cluster. One
// leader at a time, the value published and read back, resign hands over through the
// queue, terms grow, an observer sees every leader once in term order, a deposed
// leader's writes are refused, and runWhileLeader campaigns again after a loss.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { Redis } from "ioredis";

import { type Backend, Election, type Leader, Locks } from "../src/index.js";
import { BlackHole, CLIENTS, type Client, Cluster, Server, client, clusterClient } from "./helpers.js";

let counter = 0;
const fresh = (name: string): string => `${name}:${process.pid}:${counter++}`;

for (const backend of ["module", "functions", "scripts"] as Backend[]) {
  describe(`elections on the ${backend} backend`, () => {
    let server: Server;
    let checker: Redis;
    before(async () => {
      server = await Server.start({ module: backend === "module", library: backend === "functions" });
      checker = new Redis(server.port, "127.0.0.1");
    });
    after(async () => {
      checker.disconnect();
      await server.stop();
    });

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

        it("publishes the value, hands over at resign, and observes every leader in order", { timeout: 30_000 }, async () => {
          const key = fresh("svc");
          const election = locks.election(key, { ttl: 10_000 });
          assert.equal(election.recordKey, `{${key}}:leader`);
          assert.equal(await election.leader(), null);
          const controller = new AbortController();
          const seen: Leader[] = [];
          const watching = (async () => {
            for await (const leader of election.observe({ signal: controller.signal })) {
              seen.push(leader);
              if (seen.length === 4) return;
            }
          })();
          const first = await election.campaign("node-a");
          assert.deepEqual(await election.leader(), { term: first.term, value: "node-a" });
          let second: Awaited<ReturnType<Election["campaign"]>> | undefined;
          let ledAt = 0;
          const rival = election.campaign("node-b").then((l) => {
            second = l;
            ledAt = Date.now();
            return l;
          });
          await new Promise((r) => setTimeout(r, 300));
          assert.equal(second, undefined, "one leader at a time");
          const resigned = Date.now();
          assert.equal(await first.resign(), true);
          const b = await rival;
          assert.ok(ledAt - resigned < 2000, `handed over after ${ledAt - resigned} ms`);
          assert.ok(b.term > first.term);
          assert.deepEqual(await election.leader(), { term: b.term, value: "node-b" });
          await b.resign();
          assert.equal(await election.leader(), null);
          const led = [first, b];
          for (const value of ["c", "d"]) {
            const l = await election.campaign(value);
            led.push(l);
            await l.resign();
          }
          await watching;
          controller.abort();
          assert.deepEqual(
            seen,
            led.map((l) => ({ term: l.term, value: l.value })),
          );
        });

        it("runWhileLeader aborts the routine on loss and campaigns again", { timeout: 30_000 }, async () => {
          const key = fresh("again");
          const election = locks.election(key, { ttl: 600 });
          const terms: bigint[] = [];
          const result = await election.runWhileLeader(
            "me",
            async (leadership, signal) => {
              terms.push(leadership.term);
              if (terms.length === 1) {
                await checker.del(key);
                await new Promise((_, reject) => signal.addEventListener("abort", () => reject(new Error("lost"))));
              }
              return leadership.term;
            },
            { again: true },
          );
          assert.equal(terms.length, 2);
          assert.ok((terms[1] ?? 0n) > (terms[0] ?? 0n));
          assert.equal(result, terms[1]);
          assert.equal(await election.leader(), null);
        });

        it("refuses keys that cannot share a slot with their record, and long values", { timeout: 30_000 }, async () => {
          assert.throws(() => locks.election("a}b", { ttl: 1000 }), /invalid election key/);
          await assert.rejects(locks.election(fresh("k"), { ttl: 1000 }).campaign("x".repeat(1025)), /at most 1024/);
        });
      });
    }

    it("tells a cut-off leader first, and the server refuses its term", { timeout: 30_000 }, async () => {
      const hole = await BlackHole.start(server.port);
      const cutClient = new Redis(hole.port, "127.0.0.1", { maxRetriesPerRequest: 0 });
      cutClient.on("error", () => {});
      const cut = new Locks(cutClient);
      const direct = new Locks(checker);
      try {
        const key = `{${fresh("cut")}}`;
        const old = await cut.election(key, { ttl: 1500 }).campaign("old");
        hole.cut();
        const nw = await direct.election(key, { ttl: 1500 }).campaign("new");
        assert.equal(old.signal.aborted, true, "told before the rival led");
        assert.ok(nw.term > old.term);
        const out = `${key}:out`;
        if (backend !== "scripts") {
          const guard =
            backend === "module"
              ? ["LOCK.GUARD", key, String(old.term)]
              : ["FCALL", "lock_guard", "2", key, out, String(old.term)];
          await assert.rejects(checker.call(guard[0] ?? "", ...guard.slice(1), "SET", out, "old"), /^ReplyError: FENCED/);
        }
        await nw.guard([out], "SET", out, "new");
        assert.equal(await checker.get(out), "new");
        await nw.resign();
      } finally {
        cut.close();
        cutClient.disconnect();
        await hole.stop();
      }
    });
  });
}

describe("an election through a Cluster", () => {
  let cluster: Cluster;
  before(async () => {
    cluster = await Cluster.start(3, { module: true });
  });
  after(async () => {
    await cluster.stop();
  });

  it("keeps its record in the key's slot and hands over", { timeout: 30_000 }, async () => {
    const redis = await clusterClient("ioredis", cluster.nodes.map((n) => n.port));
    const locks = new Locks(redis.redis);
    try {
      const election = locks.election("scheduler", { ttl: 10_000 });
      const controller = new AbortController();
      const seen = election.observe({ signal: controller.signal });
      const a = await election.campaign("a");
      assert.deepEqual((await seen.next()).value, { term: a.term, value: "a" });
      const waiting = election.campaign("b");
      await a.resign();
      const b = await waiting;
      assert.deepEqual((await seen.next()).value, { term: b.term, value: "b" });
      await b.resign();
      controller.abort();
      await seen.return();
    } finally {
      locks.close();
      await redis.close();
    }
  });
});
