// Fenced writes in Redis (`lock.guard`) against real servers: on the module
// (LOCK.GUARD), the library by FCALL and by EVALSHA (lock_guard, the data keys
// declared), with ioredis 6 and 5 and node-redis 6 and 4; a 3-master Cluster on the
// module and the library. The write lands while the token holds, with the reply as the user's
// client reads a raw command's; FENCED is a FencedError that aborts the lock's
// signal at once; a lock known lost is refused before sending; the library's
// refusals and a library without lock_guard; a reply lost is not asked for again.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";

import { Redis } from "ioredis";
import { createClient } from "redis";

import {
  type Backend,
  CommandTimeoutError,
  FencedError,
  LibraryVersionError,
  LockError,
  LockLostError,
  Locks,
} from "../src/index.js";
import { keySlot } from "../src/slot.js";
import {
  BlackHole,
  CLIENTS,
  type Client,
  type ClientName,
  Cluster,
  LIBRARY_FILE,
  Server,
  client,
  clusterClient,
} from "./helpers.js";

const DRIVERS: ClientName[] = ["ioredis", "node-redis"];
let counter = 0;
/** A lock key with a hash tag of its own, and data keys in its slot. */
const fresh = (name: string): { key: string; out: string; tag: string } => {
  const tag = `{${name}:${process.pid}:${counter++}}`;
  return { key: tag, out: `${tag}:out`, tag };
};

/** The command sent the raw way of the user's client: ioredis' `call`, node-redis'
 * `sendCommand`. */
function rawCall(c: Client, args: string[]): Promise<unknown> {
  if (c.name.startsWith("ioredis")) return (c.redis as Redis).call(args[0] ?? "", ...args.slice(1));
  return (c.redis as ReturnType<typeof createClient>).sendCommand(args);
}

for (const backend of ["module", "functions", "scripts"] as Backend[]) {
  describe(`guarded writes on the ${backend} backend`, () => {
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
        const lost: LockLostError[] = [];
        before(async () => {
          redis = await client(name, server.port);
          locks = new Locks(redis.redis);
          locks.on("lost", (_, error) => lost.push(error));
          assert.equal(await locks.backend(), backend);
        });
        after(async () => {
          locks.close();
          await redis.close();
        });

        it("lands while the token holds, and replies as the client reads a raw command's", async () => {
          const { key, out, tag } = fresh("lands");
          const lock = await locks.tryAcquire(key, { ttl: 10_000 });
          assert.ok(lock);
          assert.equal(await lock.guard([out], "SET", out, "first"), "OK");
          assert.equal(await checker.get(out), "first");
          assert.equal(await lock.guard([out], "SET", out, "second"), "OK");
          assert.equal(await checker.get(out), "second");
          const counted = `${tag}:n`;
          assert.deepEqual(await lock.guard([counted], "INCRBY", counted, 5), await rawCall(redis, ["INCRBY", counted, "0"]));
          const list = `${tag}:list`;
          await lock.guard([list], "RPUSH", list, "a", Buffer.from("b"), 3, 4n);
          assert.deepEqual(await lock.guard([list], "LRANGE", list, 0, -1), await rawCall(redis, ["LRANGE", list, "0", "-1"]));
          assert.deepEqual(await lock.guard([`${tag}:none`], "GET", `${tag}:none`), await rawCall(redis, ["GET", `${tag}:none`]));
          const bytes = Buffer.from([0, 255, 13, 10, 0x80]);
          await lock.guard([`${tag}:bin`], "SET", `${tag}:bin`, bytes);
          assert.deepEqual(await checker.getBuffer(`${tag}:bin`), bytes);
          assert.equal(lock.signal.aborted, false);
          assert.equal(await lock.release(), true);
        });

        it("guards with a shared holding's token too", async () => {
          const { key, out } = fresh("shared");
          const reader = await locks.tryAcquire(key, { ttl: 10_000, shared: true });
          const other = await locks.tryAcquire(key, { ttl: 10_000, shared: true });
          assert.ok(reader && other);
          assert.equal(await reader.guard([out], "SET", out, "read"), "OK");
          await other.release();
          assert.equal(await reader.guard([out], "GET", out), "read");
          await reader.release();
        });

        it("is a FencedError once the key is deleted, writes nothing, and aborts the signal at once", async () => {
          const { key, out } = fresh("deleted");
          const lock = await locks.tryAcquire(key, { ttl: 60_000 });
          assert.ok(lock);
          const signal = lock.signal;
          await checker.del(key);
          const refused = await lock.guard([out], "SET", out, "stale").then(
            () => assert.fail("the write was not refused"),
            (error: unknown) => error,
          );
          assert.ok(refused instanceof FencedError, String(refused));
          assert.ok(refused instanceof LockError);
          assert.equal(refused.key, key);
          assert.equal(refused.token, lock.token);
          assert.equal(refused.store, "redis");
          assert.match(String((refused.cause as Error).message), /^FENCED token \d+ does not hold .*: the lock is free/);
          assert.match(refused.message, /the lock is free.*stop the work/);
          assert.equal(await checker.exists(out), 0);
          // At once: the signal handed out before, and the lock's own, with the reason.
          assert.equal(signal.aborted, true);
          const reason = lock.signal.reason as LockLostError;
          assert.ok(reason instanceof LockLostError);
          assert.equal(reason.why, "fenced");
          assert.equal(reason.cause, refused);
          assert.match(reason.message, /a write fenced with its token was refused: FENCED/);
          assert.ok(lost.includes(reason), "the lost event");
          // Known lost now: refused before sending.
          await assert.rejects(lock.guard([out], "SET", out, "again"), (e: unknown) => e instanceof LockLostError && e.why === "fenced");
          assert.equal(await lock.release(), false);
        });

        it("is refused with a stale token while another holder has the lock, which keeps its write", async () => {
          const { key, out } = fresh("stale");
          const old = await locks.tryAcquire(key, { ttl: 60_000, renew: false });
          assert.ok(old);
          await checker.del(key); // as if its TTL ran out while it was stopped
          const rival = await locks.tryAcquire(key, { ttl: 60_000 });
          assert.ok(rival && rival.token > old.token);
          assert.equal(await rival.guard([out], "SET", out, "rival"), "OK");
          const refused = await old.guard([out], "SET", out, "stale").catch((error: unknown) => error);
          assert.ok(refused instanceof FencedError, String(refused));
          assert.match(refused.message, new RegExp(`it is held with token ${rival.token}`));
          assert.equal(await checker.get(out), "rival");
          assert.equal(old.lost, true);
          assert.equal(rival.lost, false);
          await rival.release();
        });

        it("is refused before sending once the lock is released", async () => {
          const { key, out } = fresh("released");
          const lock = await locks.tryAcquire(key, { ttl: 10_000 });
          assert.ok(lock);
          assert.equal(await lock.guard([out], "SET", out, "held"), "OK");
          await lock.release();
          await assert.rejects(lock.guard([out], "SET", out, "late"), (e: unknown) => e instanceof LockLostError && e.why === "released");
          assert.equal(await checker.get(out), "held");
        });

        it("gives the command's own error reply as the client's error, and the lock holds", async () => {
          const { key, out } = fresh("own-error");
          const lock = await locks.tryAcquire(key, { ttl: 10_000 });
          assert.ok(lock);
          await lock.guard([out], "SET", out, "text");
          const error = await lock.guard([out], "INCR", out).catch((e: unknown) => e);
          assert.ok(error instanceof Error && !(error instanceof LockError), String(error));
          assert.match(error.message, /^ERR value is not an integer/);
          const locked = await lock.guard([key], "SET", key, "x").catch((e: unknown) => e);
          assert.match(String((locked as Error).message), /^ERR LOCK.GUARD does not run a command on its lock key/);
          assert.equal(lock.signal.aborted, false);
          await lock.release();
        });

        it(
          backend === "module"
            ? "finds the command's keys itself (the module)"
            : "refuses a command that touches a key not declared (the library)",
          async () => {
            const { key, out } = fresh("undeclared");
            const lock = await locks.tryAcquire(key, { ttl: 10_000 });
            assert.ok(lock);
            const written = lock.guard([], "SET", out, "v");
            if (backend === "module") {
              assert.equal(await written, "OK");
            } else {
              await assert.rejects(written, /ERR lock_guard: the command touches the key .*, which is not declared/);
              assert.equal(await checker.exists(out), 0);
            }
            assert.equal(lock.signal.aborted, false);
            await lock.release();
          },
        );

        it("passes hostile commands to the server, which refuses them or answers at once; the lock holds", async () => {
          const { key, tag } = fresh("hostile");
          const lock = await locks.tryAcquire(key, { ttl: 10_000 });
          assert.ok(lock);
          const list = `${tag}:list`;
          const started = Date.now();
          // A blocking command does not block: answered as a script's would be
          // (refused on Redis 7: "not allowed from script"; null where a script runs it).
          const blocking = await lock.guard([list], "BLPOP", list, 0).catch((e: unknown) => e);
          assert.ok(blocking === null || (blocking instanceof Error && /^ERR /.test(blocking.message)), String(blocking));
          for (const [keys, words] of [
            [[], ["MULTI"]],
            [[], ["EVAL", "return 1", "0"]],
            [[], ["FUNCTION", "FLUSH"]],
            [[], ["SHUTDOWN", "NOSAVE"]],
            [[], ["DEBUG", "SLEEP", "0"]],
            [[], ["LOCK.RELEASE", key, lock.owner]],
            [[key], ["DEL", key]],
          ] as [string[], string[]][]) {
            const [name = "", ...rest] = words;
            const error = await lock.guard(keys, name, ...rest).then(() => undefined, (e: unknown) => e);
            assert.ok(error instanceof Error && !(error instanceof LockError), `${words.join(" ")}: ${String(error)}`);
            assert.match(error.message, /^(ERR|NOPERM) /, words.join(" "));
          }
          assert.equal(await lock.guard([], "PING"), "PONG", "a command without keys");
          assert.ok(Date.now() - started < 2000);
          assert.equal(lock.lost, false);
          assert.equal(await checker.exists(key), 1);
          assert.equal(await lock.release(), true);
        });

        it("refuses arguments it cannot send with a TypeError, before sending", async () => {
          const { key, out } = fresh("arguments");
          const lock = await locks.tryAcquire(key, { ttl: 10_000 });
          assert.ok(lock);
          const call = lock.guard.bind(lock) as (...args: unknown[]) => Promise<unknown>;
          await assert.rejects(call(out, "SET", out, "v"), /keys must be an array of the keys the command touches, not one string/);
          await assert.rejects(call([out]), TypeError);
          await assert.rejects(call([out], ""), /needs a command/);
          await assert.rejects(call([7], "SET", out, "v"), /keys\[0\] must be a string or a Buffer, not 7/);
          for (const [shown, bad] of Object.entries({ null: null, undefined, true: true, NaN, Infinity, object: { a: 1 }, array: [1], symbol: Symbol("s") })) {
            await assert.rejects(call([out], "SET", out, bad), TypeError, shown);
          }
          assert.equal(await checker.exists(out), 0);
          assert.equal(lock.signal.aborted, false);
          await lock.release();
        });

        if (backend === "functions") {
          it("names a library loaded before lock_guard existed, and the lock holds", async () => {
            const { key, out } = fresh("old-library");
            const lock = await locks.tryAcquire(key, { ttl: 10_000 });
            assert.ok(lock);
            const source = readFileSync(LIBRARY_FILE, "utf8");
            const old = source.replace(/^\s*\{ name = 'lock_guard'.*$/m, "");
            assert.notEqual(old, source);
            await checker.call("FUNCTION", "LOAD", "REPLACE", old);
            try {
              const error = await lock.guard([out], "SET", out, "v").catch((e: unknown) => e);
              assert.ok(error instanceof LibraryVersionError, String(error));
              assert.equal(error.lacks, "lock_guard");
              assert.match(error.message, /has no lock_guard.*load the library of this release/);
              assert.equal(lock.signal.aborted, false);
            } finally {
              await checker.call("FUNCTION", "LOAD", "REPLACE", source);
            }
            assert.equal(await lock.guard([out], "SET", out, "v"), "OK");
            await lock.release();
          });

          it("goes on through the scripts path when the library is gone", async () => {
            const { key, out } = fresh("no-library");
            const mine = new Locks(redis.redis);
            const lock = await mine.tryAcquire(key, { ttl: 10_000, renew: false });
            assert.ok(lock);
            await checker.call("FUNCTION", "FLUSH");
            try {
              assert.equal(await lock.guard([out], "SET", out, "v"), "OK");
              assert.equal(lock.backend, "scripts");
              assert.equal(await checker.get(out), "v");
              await lock.release();
            } finally {
              mine.close();
              await server.loadLibrary();
            }
          });
        }
      });
    }
  });
}

describe("the replies of guarded writes, as the user's client reads them", () => {
  let server: Server;
  before(async () => {
    server = await Server.start();
  });
  after(async () => server.stop());

  it("ioredis with stringNumbers: integers as strings; without: as numbers", async () => {
    for (const stringNumbers of [true, false]) {
      const redis = new Redis(server.port, "127.0.0.1", { stringNumbers });
      const locks = new Locks(redis);
      try {
        const { key, out } = fresh(`numbers-${stringNumbers}`);
        const lock = await locks.tryAcquire(key, { ttl: 10_000 });
        assert.ok(lock);
        assert.equal(typeof lock.token, "bigint");
        assert.equal(await lock.guard([out], "INCR", out), stringNumbers ? "1" : 1);
        assert.deepEqual(await lock.guard([out], "INCR", out), await redis.call("INCRBY", out, "0"));
        await lock.release();
      } finally {
        locks.close();
        redis.disconnect();
      }
    }
  });

  it("node-redis on RESP3: a map as node-redis reads it", async () => {
    const redis = createClient({ url: server.url, RESP: 3 });
    redis.on("error", () => undefined);
    await redis.connect();
    const locks = new Locks(redis);
    try {
      const { key, out } = fresh("resp3");
      const lock = await locks.tryAcquire(key, { ttl: 10_000 });
      assert.ok(lock);
      await lock.guard([out], "HSET", out, "a", "1", "b", "2");
      assert.deepEqual(await lock.guard([out], "HGETALL", out), await redis.sendCommand(["HGETALL", out]));
      assert.deepEqual(await lock.guard([out], "HINCRBY", out, "a", 1), 2);
      await lock.release();
    } finally {
      locks.close();
      await redis.close();
    }
  });
});

describe("a guarded write whose reply is lost", () => {
  let server: Server;
  let proxy: BlackHole;
  before(async () => {
    server = await Server.start();
    proxy = await BlackHole.start(server.port);
  });
  after(async () => {
    await proxy.stop();
    await server.stop();
  });

  for (const name of DRIVERS) {
    it(`is not sent again (${name}): a timeout that says it may have run`, async () => {
      const redis = await client(name, proxy.port);
      const locks = new Locks(redis.redis);
      try {
        const { key, out } = fresh(`lost-reply-${name}`);
        const lock = await locks.tryAcquire(key, { ttl: 60_000, renew: false });
        assert.ok(lock);
        assert.equal(await lock.guard([out], "INCR", out), 1);
        proxy.dropReplies();
        const started = Date.now();
        const error = await lock.guard([out], "INCR", out).catch((e: unknown) => e);
        assert.ok(error instanceof CommandTimeoutError, String(error));
        assert.match(error.message, /the guarded write under lock .* no reply within 2000 ms: it may have run; it was not sent again/);
        assert.ok(Date.now() - started < 4000);
        proxy.heal();
        assert.equal(await server.call(["GET", out]), "$1\r\n2\r\n");
        assert.equal(lock.signal.aborted, false);
        // The next one goes on a new connection, and the one given up was not re-sent.
        assert.equal(await lock.guard([out], "INCR", out), 3);
        await new Promise((ok) => setTimeout(ok, 200));
        assert.equal(await server.call(["GET", out]), "$1\r\n3\r\n");
        await lock.release();
      } finally {
        locks.close();
        await redis.close();
      }
    });
  }
});

for (const backend of ["module", "functions"] as Backend[]) {
  describe(`guarded writes in a 3-master Cluster on the ${backend} backend`, () => {
    let cluster: Cluster;
    before(async () => {
      cluster = await Cluster.start(3, { module: backend === "module", library: backend === "functions" });
    });
    after(async () => cluster.stop());

    for (const name of DRIVERS) {
      it(`lands on the node of the lock's slot, refuses another slot and a lost token (${name})`, async () => {
        const redis = await clusterClient(name, cluster.nodes.map((n) => n.port));
        const locks = new Locks(redis.redis);
        try {
          assert.equal(await locks.backend(), backend);
          for (const key of ["jobs:1", "jobs:2", "jobs:3", "{jobs}:4", "x"].map((k) => `${name}:${k}`)) {
            const tag = sameSlot(key);
            const lock = await locks.tryAcquire(key, { ttl: 10_000 });
            assert.ok(lock, key);
            assert.equal(await lock.guard([tag], "SET", tag, "v"), "OK", key);
            assert.equal(await lock.guard([tag], "GET", tag), "v");
            const elsewhere = keySlot(key) === keySlot("{a}") ? "{b}" : "{a}";
            const error = await lock.guard([elsewhere], "SET", elsewhere, "v").catch((e: unknown) => e);
            assert.ok(error instanceof LockError && !(error instanceof FencedError), String(error));
            assert.match(error.message, /^CROSSSLOT .*the keys of a guarded write must be in the hash slot of the lock's key: give them its hash tag, as in \{/);
            assert.match(String((error.cause as Error).message), /^CROSSSLOT/);
            assert.equal(lock.signal.aborted, false);
            await Promise.all(cluster.nodes.map((n) => n.call(["DEL", key]).catch(() => "")));
            await assert.rejects(lock.guard([tag], "SET", tag, "stale"), FencedError);
            assert.equal(lock.signal.aborted, true);
            assert.equal(await lock.guard([tag], "GET", tag).catch((e: unknown) => e instanceof LockLostError), true);
          }
        } finally {
          locks.close();
          await redis.close();
        }
      });
    }
  });
}

/** A data key in the slot of lock `key` (its hash tag, or the key itself as one). */
function sameSlot(key: string): string {
  const open = key.indexOf("{");
  const close = key.indexOf("}", open + 1);
  return open >= 0 && close > open + 1 ? `${key.slice(open, close + 1)}:out` : `{${key}}:out`;
}
