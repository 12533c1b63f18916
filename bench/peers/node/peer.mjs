// The Node sides of `make bench-peers` (bench/peers/): one client per process, each
// library used as its documentation shows, with its default settings, on a
// connection of its own. The packages come from js/node_modules (pinned in
// js/package-lock.json: ioredis, redis, redlock, redis-semaphore) and our client from
// js/dist (make js-build).
//
// It speaks the protocol of bench/peers/clients.py: prints `ready`, reads
// `go <t0> <t1> [first]`, loops acquire (waiting until it holds the lock) -> hold H
// ms -> release from t0, and at t1 (or, with `first`, at its first grant) prints one
// JSON line and exits, wherever the loop is.
//
//   node peer.mjs <side> <port> <key> <hold_ms>
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const js = join(dirname(fileURLToPath(import.meta.url)), "../../../js");
const require = createRequire(join(js, "package.json"));
const [side, port, key, holdArg] = process.argv.slice(2);
const holdMs = Number(holdArg);
// Our lock's TTL (as clients.py's); the libraries keep their own defaults.
const TTL_MS = 10_000;

// Wall-clock seconds with sub-millisecond resolution (the orchestrator sends t0 and t1
// as Unix times).
const now = () => (performance.timeOrigin + performance.now()) / 1000;
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/** Each side: connect, and return { acquire, release }. acquire() resolves true once
 * this client holds the lock, false if the library gave up waiting (the client then
 * asks again and the wait goes on). */
const SIDES = {
  /** Our client on ioredis, the module: LOCK.ACQUIRE … WAIT on a dedicated connection. */
  async "ours-node"() {
    return ours(await ioredis(), {});
  },
  /** LOCK.ACQUIRE … WAIT 0 from plain ioredis on a connection of its own, without
   * the client: what the client's own work costs is the difference. */
  async "ours-ioredis"() {
    const { randomBytes } = await import("node:crypto");
    const redis = await ioredis();
    let owner = "";
    return {
      async acquire() {
        owner = randomBytes(8).toString("hex");
        return (await redis.call("LOCK.ACQUIRE", key, owner, TTL_MS, "WAIT", 0)) !== null;
      },
      release: () => redis.call("LOCK.RELEASE", key, owner),
    };
  },
  /** Our client on node-redis, the module. */
  async "ours-node-redis"() {
    const { createClient } = require("redis");
    const redis = createClient({ url: `redis://127.0.0.1:${port}` });
    await redis.connect();
    return ours(redis, {});
  },
  /** Our client on ioredis and the function library (its waiting protocol). */
  async "ours-node-functions"() {
    return ours(await ioredis(), { backend: "functions" });
  },
  /** node-redlock 5 with one ioredis client: SET NX PX, and while busy a retry every
   * 200 ms (± 200 ms jitter), 10 times, before it gives up. */
  async "node-redlock"() {
    const Redlock = require("redlock").default;
    const redlock = new Redlock([await ioredis()]);
    let lock;
    return {
      async acquire() {
        try {
          lock = await redlock.acquire([key], TTL_MS);
          return true;
        } catch (error) {
          if (error?.name === "ExecutionError") return false; // gave up after its retries
          throw error;
        }
      },
      release: () => lock.release(),
    };
  },
  /** redis-semaphore's Mutex on ioredis: SET NX PX, and while busy a retry every
   * 10 ms, giving up after 10 s. */
  async "node-redis-semaphore"() {
    const { Mutex, TimeoutError } = require("redis-semaphore");
    const mutex = new Mutex(await ioredis(), key, { lockTimeout: TTL_MS });
    return {
      async acquire() {
        try {
          await mutex.acquire();
          return true;
        } catch (error) {
          if (error instanceof TimeoutError) return false; // gave up after 10 s
          throw error;
        }
      },
      release: () => mutex.release(),
    };
  },
};

async function ioredis() {
  const { Redis } = require("ioredis");
  const redis = new Redis(Number(port), "127.0.0.1", { lazyConnect: true });
  await redis.connect();
  return redis;
}

async function ours(redis, options) {
  const { Locks } = require("redis-lock-client");
  const locks = new Locks(redis, options);
  await locks.backend();
  let lock;
  return {
    async acquire() {
      lock = await locks.acquire(key, { ttl: TTL_MS });
      return lock !== null;
    },
    release: () => lock.release(),
  };
}

const record = { waits_us: [], held_s: 0, waitingSince: null, holdingSince: null, errors: 0 };

function report(t1) {
  let held = record.held_s;
  if (record.holdingSince !== null) held += Math.max(0, t1 - record.holdingSince);
  // A wait begun after t1 (the loop goes on until the report is out) is not in the run.
  const open = record.waitingSince !== null && record.waitingSince < t1;
  const pending = open ? Math.round((t1 - record.waitingSince) * 1e7) / 10 : null;
  return JSON.stringify({ waits_us: record.waits_us, pending_us: pending, held_s: held, errors: record.errors });
}

const client = await SIDES[side]();
process.stdout.write("ready\n");
const line = await new Promise((ok) => createInterface({ input: process.stdin }).once("line", ok));
const [, t0s, t1s, first] = line.split(" ");
const t0 = Number(t0s);
const t1 = Number(t1s);
setTimeout(() => {
  process.stdout.write(`${report(t1)}\n`, () => process.exit(0));
}, Math.max(0, (t1 - now()) * 1000));
await sleep(Math.max(0, (t0 - now()) * 1000));
for (;;) {
  if (record.waitingSince === null) record.waitingSince = now();
  try {
    if (!(await client.acquire())) continue;
  } catch {
    record.errors++; // a library error: count it and ask again, as a user would
    await sleep(10);
    continue;
  }
  const granted = now();
  if (granted <= t1) record.waits_us.push(Math.round((granted - record.waitingSince) * 1e7) / 10);
  record.waitingSince = null;
  record.holdingSince = granted;
  if (first === "first") {
    process.stdout.write(`${report(t1)}\n`, () => process.exit(0));
    await sleep(1e9);
  }
  if (holdMs > 0) await sleep(holdMs);
  record.held_s += now() - granted;
  record.holdingSince = null;
  try {
    await client.release();
  } catch {
    record.errors++;
  }
}
