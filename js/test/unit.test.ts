// What needs no server: the wire arguments and limits, the lease's margin, the
// bundled library and constants against the repository's sources, both builds.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { describe, it } from "node:test";

import type { Connection } from "../src/connection.js";
import { guardError, sameSlotExample } from "../src/guard.js";
import { now } from "../src/lease.js";
import { type Holder, Lock } from "../src/lock.js";
import { checkVersion, command, guardCommand, integer, modeArgs, span, ttlArg, blpopSeconds } from "../src/protocol.js";
import * as esm from "../src/index.js";
import { LibraryVersionError, UnexpectedReplyError } from "../src/index.js";
import { LIBRARY_FILE, ROOT } from "./helpers.js";

describe("the bundle", () => {
  it("carries lua/redislock.lua as it is now, and its script's SHA1", async () => {
    const source = readFileSync(LIBRARY_FILE, "utf8");
    const require = createRequire(import.meta.url);
    const cjs = require(join(ROOT, "js/dist/cjs/index.js")) as typeof esm;
    const built = (await import(join(ROOT, "js/dist/esm/index.js"))) as typeof esm;
    for (const [name, library] of [["src", esm], ["dist/cjs", cjs], ["dist/esm", built]] as const) {
      assert.equal(library.LIBRARY_SOURCE, source, `${name}: the bundle differs from lua/redislock.lua; rebuild (npm run build)`);
      const script = source.slice(source.indexOf("\n") + 1);
      assert.equal(library.LIBRARY_SCRIPT, script, name);
      assert.equal(library.SCRIPT_SHA, createHash("sha1").update(script).digest("hex"), name);
    }
  });

  it("carries core's protocol constants", async () => {
    const { generate } = (await import(join(ROOT, "js/scripts/bundle.mjs"))) as { generate: () => string };
    const now = generate();
    assert.equal(readFileSync(join(ROOT, "js/src/generated.ts"), "utf8"), now, "rebuild: npm run build");
    const protocol = readFileSync(join(ROOT, "core/src/protocol.rs"), "utf8");
    const version = /pub const LIBRARY_VERSION: i64 = (\d+);/.exec(protocol)?.[1];
    assert.equal(String(esm.LIBRARY_VERSION), version);
    assert.equal(esm.MAX_MILLIS, (1n << 62n) - 1n);
    assert.equal(esm.MAX_PERMITS, 2 ** 31);
  });
});

describe("the wire", () => {
  it("builds each backend's command with the same arguments after the key", () => {
    assert.deepEqual(command("module", "lock_extend", "job", ["me", "500"]), ["LOCK.EXTEND", "job", "me", "500"]);
    assert.deepEqual(command("functions", "lock_extend", "job", ["me", "500"]), ["FCALL", "lock_extend", "1", "job", "me", "500"]);
    assert.deepEqual(command("functions", "lock_version", undefined), ["FCALL_RO", "lock_version", "0"]);
    assert.deepEqual(command("scripts", "lock_info", "job"), ["EVALSHA", esm.SCRIPT_SHA, "1", "job", "lock_info"]);
    assert.throws(() => command("module", "lock_wait", "job"), /no lock_wait/);
  });

  it("refuses what the server would refuse, before sending", () => {
    assert.equal(ttlArg(1.2), "2");
    assert.equal(ttlArg(2 ** 62 - 1024), String(2n ** 62n - 1024n));
    for (const bad of [0, -1, NaN, Infinity, 2 ** 63]) assert.throws(() => ttlArg(bad), RangeError, String(bad));
    assert.deepEqual(modeArgs({}), []);
    assert.deepEqual(modeArgs({ shared: true }), ["SHARED"]);
    assert.deepEqual(modeArgs({ limit: 3 }), ["LIMIT", "3"]);
    for (const bad of [0, 2 ** 31 + 1, 1.5]) assert.throws(() => modeArgs({ limit: bad }), RangeError);
  });

  it("never asks BLPOP for a timeout Redis 6.2 reads as forever", () => {
    assert.equal(blpopSeconds(1), "0.002");
    assert.equal(blpopSeconds(40), "0.040");
    assert.equal(blpopSeconds(2000), "2.000");
    assert.equal(blpopSeconds(1500.2), "1.501");
  });

  it("reads integers exactly, and refuses a number that is no longer exact", () => {
    assert.equal(integer("4611686018427387903", "t"), (1n << 62n) - 1n);
    assert.equal(integer(42, "t"), 42n);
    assert.equal(integer(7n, "t"), 7n);
    assert.throws(() => integer(2 ** 62, "token"), UnexpectedReplyError);
    assert.throws(() => integer("x", "token"), UnexpectedReplyError);
  });

  it("accepts the library versions in its range, naming the range otherwise", () => {
    checkVersion(esm.LIBRARY_VERSION);
    checkVersion(esm.MIN_LIBRARY_VERSION);
    for (const bad of [esm.MIN_LIBRARY_VERSION - 1, esm.LIBRARY_VERSION + 1]) {
      assert.throws(() => checkVersion(bad), (error: unknown) => {
        assert.ok(error instanceof LibraryVersionError);
        assert.match(error.message, new RegExp(`version ${bad};.*versions ${esm.MIN_LIBRARY_VERSION} to ${esm.LIBRARY_VERSION}`));
        return true;
      });
    }
  });

  it("ends a lease a tenth of the TTL early, at least 50 ms, at most the TTL", () => {
    assert.equal(esm.margin(30_000), 3000);
    assert.equal(esm.margin(200), 50);
    assert.equal(esm.margin(20), 20);
  });
});

describe("guarded writes, without a server", () => {
  it("sends LOCK.GUARD on the module, lock_guard with the data keys declared on the library", () => {
    const words = ["SET", "{j}:out", Buffer.from("v")];
    assert.deepEqual(guardCommand("module", "{j}", ["{j}:out"], 17n, words), ["LOCK.GUARD", "{j}", "17", ...words]);
    assert.deepEqual(guardCommand("functions", "{j}", ["{j}:out", "{j}:n"], 17n, words), [
      "FCALL", "lock_guard", "3", "{j}", "{j}:out", "{j}:n", "17", ...words,
    ]);
    assert.deepEqual(guardCommand("scripts", "{j}", [], 2n ** 62n, words), [
      "EVALSHA", esm.SCRIPT_SHA, "1", "{j}", "lock_guard", String(2n ** 62n), ...words,
    ]);
  });

  it("names the server's refusals", () => {
    const reply = (message: string): Error => Object.assign(new Error(message), { name: "ReplyError" });
    const fenced = guardError(reply("FENCED token 17 does not hold {j}: the lock is free"), "module", "{j}", 17n);
    assert.ok(fenced instanceof esm.FencedError && fenced.token === 17n && fenced.key === "{j}");
    assert.equal(fenced.refusal, "FENCED token 17 does not hold {j}: the lock is free");
    const noGuard = guardError(reply("ERR unknown command 'LOCK.GUARD', with args beginning with: '{j}'"), "module", "{j}", 1n);
    assert.ok(noGuard instanceof esm.LockError);
    assert.match(noGuard.message, /no LOCK.GUARD: load the module of this release/);
    const cross = guardError(reply("CROSSSLOT Keys in request don't hash to the same slot"), "functions", "jobs:1", 1n);
    assert.match((cross as Error).message, /^CROSSSLOT .*as in \{jobs:1\}:out beside the lock jobs:1\)$/);
    const own = reply("ERR value is not an integer or out of range");
    assert.equal(guardError(own, "module", "{j}", 1n), own);
    const timeout = guardError(new esm.CommandTimeoutError("LOCK.GUARD", 2000), "module", "{j}", 1n);
    assert.match((timeout as Error).message, /under lock \{j\} \(LOCK.GUARD\): no reply within 2000 ms: it may have run/);
    assert.equal(sameSlotExample("{report:daily}:lock"), "{report:daily}:out beside the lock {report:daily}:lock");
    assert.equal(sameSlotExample("a}b"), "{job:1}:out beside a lock {job:1}");
  });

  it("names a scripts path without lock_guard, and a module without LOCK.GUARD, keeping the lock", async () => {
    const sent: string[] = [];
    const connection: Connection = {
      closed: false,
      node: "fake",
      send: (args) => {
        const words = args.map(String);
        sent.push(words.join(" "));
        if (words.includes("lock_version")) return Promise.resolve("3");
        if (words[0] === "LOCK.GUARD") return Promise.reject(new Error("ERR unknown command 'LOCK.GUARD', with args beginning with: "));
        return Promise.reject(new Error("ERR unknown function 'lock_guard': expected lock_acquire, lock_release"));
      },
      close: () => undefined,
    };
    const holder: Holder = {
      command: () => Promise.resolve(connection),
      guarded: () => Promise.resolve(connection),
      dedicated: () => Promise.resolve(connection),
      forgetBackend: () => undefined,
      event: () => undefined,
    };
    for (const backend of ["scripts", "module"] as const) {
      const fields = { key: "{j}", owner: "me", token: 17n, mode: {}, backend, ttl: span(60_000), sent: now() };
      const lock = new Lock(holder, fields, false);
      const error = await lock.guard(["{j}:out"], "SET", "{j}:out", "v").catch((e: unknown) => e);
      if (backend === "scripts") {
        assert.ok(error instanceof LibraryVersionError, String(error));
        assert.equal(error.lacks, "lock_guard");
        assert.match(error.message, /version 3\) has no lock_guard: it was loaded before lock_guard existed; load the library of this release/);
        assert.match(sent.at(-1) ?? "", /^EVALSHA \w+ 0 lock_version$/);
      } else {
        assert.ok(error instanceof esm.LockError && !(error instanceof LibraryVersionError), String(error));
        assert.match(error.message, /no LOCK.GUARD: load the module of this release/);
      }
      assert.equal(lock.lost, false);
    }
  });

  it("carries the PostgreSQL fence's statements as fence/postgresql/ has them", () => {
    for (const [name, sql] of [["table.sql", esm.FENCE_TABLE_SQL], ["fence.sql", esm.FENCE_SQL]] as const) {
      assert.equal(sql, readFileSync(join(ROOT, "fence/postgresql", name), "utf8").trim(), `${name}: rebuild (npm run build)`);
    }
  });
});

describe("the Redis client given", () => {
  it("is refused, saying what to give, when it is none the client supports", () => {
    assert.throws(() => new esm.Locks({}), /ioredis client .* or a node-redis client/);
    const sentinel = { sendCommand: () => undefined, duplicate: () => undefined, getSentinelNode: () => undefined };
    assert.throws(() => new esm.Locks(sentinel), /Sentinel client \(createSentinel\) is not supported yet/);
    const redis = { call: () => undefined, duplicate: () => undefined, on: () => undefined };
    assert.throws(() => new esm.Locks(redis, { backend: "redis" as esm.Backend }), /backend must be/);
  });
});
