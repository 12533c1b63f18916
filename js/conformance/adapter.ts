#!/usr/bin/env node
// The conformance adapter of the Node client (conformance/ADAPTER.md): one actor of a
// scenario, speaking JSON lines on stdin and stdout, driving the built package as its
// users would, on ioredis or node-redis (the first argument: `ioredis` or
// `node-redis`). Registered as conformance/adapters/node-ioredis.json and
// node-redis.json.
import { createInterface } from "node:readline";

import {
  type AcquireOptions,
  type Backend,
  CONTROL_LIMIT_MS,
  FencedError,
  LEASE_MARGIN_MIN_MS,
  LEASE_MARGIN_PERCENT,
  LIBRARY_VERSION,
  LibraryVersionError,
  type Leadership,
  type Lock,
  LockLostError,
  Locks,
  MIN_LIBRARY_VERSION,
  NoBackendError,
  RELEASE_LIMIT_MS,
  RENEWAL_DIVISOR,
  WAIT_MARGIN_MS,
  WITHDRAW_AFTER_TIMEOUT_MS,
  WaitUnansweredError,
  CommandTimeoutError,
} from "redis-lock-client";

type Json = Record<string, unknown>;
const driver = process.argv[2] === "node-redis" ? "node-redis" : "ioredis";
// Only the driver this actor drives is loaded: an actor starts in 0.16 s of CPU on
// ioredis and 0.25 s on node-redis, against 0.38 s and 0.42 s with both loaded, and
// the suite starts some 700 of them.
const ioredis = driver === "ioredis" ? await import("ioredis") : undefined;
const nodeRedis = driver === "node-redis" ? await import("redis") : undefined;

function write(line: Json): void {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

write({
  hello: {
    protocol: 1,
    client: `redis-lock-client (Node, ${driver})`,
    version: "0.1.0",
    capabilities: [
      "module", "functions", "scripts", "force_backend", "cluster", "auth", "owner", "shared", "limit",
      "wait", "wait_forever", "cancel", "extend", "info", "leader", "loss_events", "loss_cause", "check", "guard",
      "fence_postgres",
    ],
    constants: {
      renewal_divisor: RENEWAL_DIVISOR,
      lease_margin_percent: LEASE_MARGIN_PERCENT,
      lease_margin_min_ms: LEASE_MARGIN_MIN_MS,
      wait_margin_ms: WAIT_MARGIN_MS,
      withdraw_after_timeout_ms: WITHDRAW_AFTER_TIMEOUT_MS,
      release_limit_ms: RELEASE_LIMIT_MS,
      control_limit_ms: CONTROL_LIMIT_MS,
      library_version: LIBRARY_VERSION,
      min_library_version: MIN_LIBRARY_VERSION,
    },
  },
});

class Refused extends Error {
  constructor(
    readonly kind: string,
    message: string,
  ) {
    super(message);
  }
}

let locks: Locks | undefined;
let quit: (() => Promise<void>) | undefined;
/** The adapter's own PostgreSQL (open's `postgres`), for `fence_postgres`. */
let postgres: import("pg").Pool | undefined;
const held = new Map<string, Lock>();
/** The leaderships `campaign` won, by lock name (their locks are in `held`). */
const leading = new Map<string, Leadership>();
/** Elections made for a request: any TTL serves one that only reads. */
const READ_TTL = 1000;
const waits = new Map<number, { controller: AbortController; done: Promise<unknown> }>();

function field<T>(request: Json, name: string, type: string): T {
  const value = request[name];
  if (typeof value !== type) throw new Refused("bad_request", `${name} must be a ${type}`);
  return value as T;
}

function lockOf(request: Json): Lock {
  const name = field<string>(request, "lock", "string");
  const lock = held.get(name);
  if (lock === undefined) throw new Refused("bad_request", `no lock named ${name}`);
  return lock;
}

function client(): Locks {
  if (locks === undefined) throw new Refused("bad_request", "open first");
  return locks;
}

function cause(lock: Lock): string {
  const reason: unknown = lock.signal.reason;
  if (!(reason instanceof LockLostError)) return "unknown";
  if (reason.why === "fenced") return "fenced";
  return reason.why === "refused" ? "refused" : "lease_ran_out";
}

async function open(request: Json): Promise<Json> {
  const username = typeof request["username"] === "string" ? request["username"] : undefined;
  const password = typeof request["password"] === "string" ? request["password"] : undefined;
  const auth = { ...(username === undefined ? {} : { username }), ...(password === undefined ? {} : { password }) };
  const seeds = Array.isArray(request["cluster"]) ? (request["cluster"] as string[]) : undefined;
  const url = typeof request["url"] === "string" ? request["url"] : undefined;
  let redis: unknown;
  if (ioredis !== undefined) {
    const { Cluster: IoCluster, Redis: IoRedis } = ioredis;
    if (seeds !== undefined) {
      const nodes = seeds.map((seed) => ({ host: new URL(seed).hostname, port: Number(new URL(seed).port) }));
      const cluster = new IoCluster(nodes, { lazyConnect: true, redisOptions: auth });
      await cluster.connect();
      redis = cluster;
      quit = async () => void (await cluster.quit().catch(() => cluster.disconnect()));
    } else {
      const standalone = new IoRedis(url ?? "redis://127.0.0.1:6379/", { lazyConnect: true, ...auth });
      await standalone.connect();
      redis = standalone;
      quit = async () => void (await standalone.quit().catch(() => standalone.disconnect()));
    }
  } else if (nodeRedis === undefined) {
    throw new Error(`no driver loaded for ${driver}`);
  } else if (seeds !== undefined) {
    const cluster = nodeRedis.createCluster({ rootNodes: seeds.map((seed) => ({ url: seed })), defaults: auth });
    cluster.on("error", () => undefined);
    await cluster.connect();
    redis = cluster;
    quit = async () => void (await cluster.close().catch(() => cluster.destroy()));
  } else {
    const standalone = nodeRedis.createClient({ url: url ?? "redis://127.0.0.1:6379/", ...auth });
    standalone.on("error", () => undefined);
    await standalone.connect();
    redis = standalone;
    quit = async () => void (await standalone.close().catch(() => standalone.destroy()));
  }
  if (typeof request["postgres"] === "string") {
    const { default: pg } = await import("pg");
    postgres = new pg.Pool({ connectionString: request["postgres"], max: 4 });
    postgres.on("error", () => undefined); // an idle connection's error: the next use says it
  }
  const wanted = request["backend"];
  const backend = wanted === undefined || wanted === "auto" ? undefined : (wanted as Backend);
  locks = new Locks(redis, backend === undefined ? {} : { backend });
  return { backend: await locks.backend() };
}

async function acquire(request: Json, id: number): Promise<Json> {
  const name = field<string>(request, "lock", "string");
  const options: AcquireOptions & { wait: number } = { ttl: field<number>(request, "ttl_ms", "number"), wait: 0 };
  switch (request["kind"] ?? "exclusive") {
    case "exclusive":
      break;
    case "shared":
      options.shared = true;
      break;
    case "limit":
      options.limit = field<number>(request, "limit", "number");
      break;
    default:
      throw new Refused("bad_request", `unknown kind ${String(request["kind"])}`);
  }
  switch (request["wait"] ?? "none") {
    case "none":
      break;
    case "ms":
      options.wait = field<number>(request, "wait_ms", "number");
      break;
    case "forever":
      options.wait = Infinity;
      break;
    default:
      throw new Refused("bad_request", `unknown wait ${String(request["wait"])}`);
  }
  if (typeof request["owner"] === "string") options.owner = request["owner"];
  const controller = new AbortController();
  options.signal = controller.signal;
  const acquiring = client().acquire(field<string>(request, "key", "string"), options);
  waits.set(id, { controller, done: acquiring.catch(() => undefined) });
  let lock: Lock | null;
  try {
    lock = await acquiring;
  } catch (error) {
    if (controller.signal.aborted) throw new Refused("cancelled", "the wait was cancelled");
    throw error;
  } finally {
    waits.delete(id);
  }
  if (lock === null) return { acquired: false };
  const granted = lock;
  held.set(name, granted);
  watchLoss(name, granted);
  return { acquired: true, token: granted.token.toString(), owner: granted.owner };
}

/** Campaigns until this actor leads (cancellable as an acquire); its lock is kept
 * under `lock` for `guard`, `check` and its loss event, its leadership for `resign`. */
async function campaign(request: Json, id: number): Promise<Json> {
  const name = field<string>(request, "lock", "string");
  const election = client().election(field<string>(request, "key", "string"), {
    ttl: field<number>(request, "ttl_ms", "number"),
  });
  const controller = new AbortController();
  const campaigning = election.campaign(field<string>(request, "value", "string"), { signal: controller.signal });
  waits.set(id, { controller, done: campaigning.catch(() => undefined) });
  let leadership: Leadership;
  try {
    leadership = await campaigning;
  } catch (error) {
    if (controller.signal.aborted) throw new Refused("cancelled", "the campaign was cancelled");
    throw error;
  } finally {
    waits.delete(id);
  }
  const granted = leadership.lock;
  held.set(name, granted);
  leading.set(name, leadership);
  watchLoss(name, granted);
  return { acquired: true, token: granted.token.toString(), owner: granted.owner };
}

/** Writes the `lost` event of `lock` when its signal aborts (not for a release). A
 * lease shorter than its margin (a TTL of 1 ms) may have ended by now: its event
 * follows the reply. */
function watchLoss(name: string, granted: Lock): void {
  const signal = granted.signal;
  const lost = (): void => {
    const reason: unknown = signal.reason;
    if (reason instanceof LockLostError && reason.why === "released") return;
    write({ event: "lost", lock: name, cause: cause(granted), message: reason instanceof Error ? reason.message : String(reason) });
  };
  if (signal.aborted) setImmediate(lost);
  else signal.addEventListener("abort", lost);
}

async function awaitLost(request: Json): Promise<Json> {
  const lock = lockOf(request);
  const timeout = field<number>(request, "timeout_ms", "number");
  if (!lock.signal.aborted) {
    await new Promise<void>((done) => {
      const timer = setTimeout(done, timeout);
      lock.signal.addEventListener("abort", () => {
        clearTimeout(timer);
        done();
      });
    });
  }
  const reason: unknown = lock.signal.reason;
  if (!lock.signal.aborted || (reason instanceof LockLostError && reason.why === "released")) return { lost: false };
  return { lost: true, cause: cause(lock) };
}

/** The check before a write, as docs/node-client.md shows it: through the lock,
 * whose `signal` getter reads the clock, made from a timer as work reaches its write. */
async function check(request: Json): Promise<Json> {
  const lock = lockOf(request);
  const after = typeof request["after_ms"] === "number" ? request["after_ms"] : 0;
  await new Promise((done) => setTimeout(done, after));
  try {
    lock.signal.throwIfAborted();
    return { held: true };
  } catch {
    return { held: false };
  }
}

/** `after_ms` (default 0) after the request arrived, from a timer, as `check` does. */
function after(request: Json): Promise<void> {
  const ms = typeof request["after_ms"] === "number" ? request["after_ms"] : 0;
  return new Promise((done) => setTimeout(done, ms));
}

/** `SET key value` through the lock's guard, as docs/node-client.md shows it. */
async function guard(request: Json): Promise<Json> {
  const lock = lockOf(request);
  const key = field<string>(request, "key", "string");
  const value = field<string>(request, "value", "string");
  await after(request);
  await lock.guard([key], "SET", key, value);
  return { written: true };
}

/** One transaction on the adapter's own PostgreSQL: the lock's fence for `resource`,
 * then the write, then COMMIT; rolled back on any error. */
async function fencePostgres(request: Json): Promise<Json> {
  const lock = lockOf(request);
  const resource = field<string>(request, "resource", "string");
  const value = field<string>(request, "value", "string");
  if (postgres === undefined) throw new Refused("bad_request", "open had no postgres URL");
  const pool = postgres;
  await after(request);
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query("BEGIN");
    await lock.fencePostgres(client, resource);
    await client.query(
      "INSERT INTO conformance_writes (resource, value) VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value",
      [resource, value],
    );
    await client.query("COMMIT");
  } catch (error) {
    await client.query("ROLLBACK").catch((failed: unknown) => {
      broken = failed instanceof Error ? failed : new Error(String(failed));
    });
    throw error;
  } finally {
    client.release(broken); // a connection that could not roll back is closed
  }
  return { written: true };
}

/** The open in progress: later requests wait for it (they may arrive before it
 * answered). */
let opening: Promise<unknown> = Promise.resolve();

async function handle(request: Json, id: number): Promise<Json> {
  if (request["op"] === "open") {
    const opened = open(request);
    opening = opened.catch(() => undefined);
    return opened;
  }
  await opening;
  switch (request["op"]) {
    case "acquire":
      return acquire(request, id);
    case "release":
      return { released: await lockOf(request).release() };
    case "extend": {
      const lock = lockOf(request);
      if (lock.lost) throw new Refused("lock_lost", `lock ${lock.key} is lost`);
      return { extended: await lock.extend(field<number>(request, "ttl_ms", "number")) };
    }
    case "token": {
      const lock = lockOf(request);
      const lost = lock.lost;
      return { token: lock.token.toString(), owner: lock.owner, lost, ...(lost ? { cause: cause(lock) } : {}) };
    }
    case "await_lost":
      return awaitLost(request);
    case "check":
      return check(request);
    case "guard":
      return guard(request);
    case "fence_postgres":
      return fencePostgres(request);
    case "cancel": {
      const wait = waits.get(field<number>(request, "target", "number"));
      if (wait !== undefined) {
        wait.controller.abort(new Error("the wait was cancelled"));
        await wait.done;
      }
      return {};
    }
    case "info": {
      const info = await client().info(field<string>(request, "key", "string"));
      if (info === null) return { info: null };
      return {
        info: {
          mode: info.mode,
          waiters: info.waiters,
          holders: info.holders.map((h) => ({ owner: h.owner, token: h.token.toString() })),
        },
      };
    }
    case "campaign":
      return campaign(request, id);
    case "resign": {
      const name = field<string>(request, "lock", "string");
      const leadership = leading.get(name);
      if (leadership === undefined) throw new Refused("bad_request", `no leadership ${name}`);
      leading.delete(name);
      return { resigned: await leadership.resign() };
    }
    case "leader": {
      const found = await client().election(field<string>(request, "key", "string"), { ttl: READ_TTL }).leader();
      return { leader: found === null ? null : { term: found.term.toString(), value: found.value } };
    }
    case "observe": {
      const name = field<string>(request, "observer", "string");
      const observer = client().election(field<string>(request, "key", "string"), { ttl: READ_TTL }).observe();
      await observer.start();
      void (async () => {
        for await (const found of observer) {
          write({ event: "leader", observer: name, term: found.term.toString(), value: found.value });
        }
      })();
      return {};
    }
    case "close":
      locks?.close();
      await quit?.();
      await postgres?.end().catch(() => undefined);
      return {};
    default:
      throw new Refused("bad_request", `unknown op ${String(request["op"])}`);
  }
}

function kind(error: unknown): string {
  if (error instanceof Refused) return error.kind;
  if (error instanceof WaitUnansweredError) return "wait_unanswered";
  if (error instanceof LibraryVersionError)
    return error.found > error.max ? "library_too_new" : "library_too_old";
  if (error instanceof NoBackendError) return "no_backend";
  if (error instanceof FencedError) return "fenced";
  if (error instanceof LockLostError) return "lock_lost";
  if (error instanceof RangeError || error instanceof TypeError) return "invalid_argument";
  if (error instanceof CommandTimeoutError) return "connection";
  if (error instanceof Error) {
    if (error.message.startsWith("WRONGTYPE")) return "wrong_type";
    if (/^[A-Z][A-Z_]+ /.test(error.message)) return "server";
    return "connection";
  }
  return "other";
}

const lines = createInterface({ input: process.stdin });
let closing = false;
lines.on("line", (line) => {
  if (line.trim() === "") return;
  let request: Json;
  try {
    request = JSON.parse(line) as Json;
  } catch {
    write({ id: 0, error: { kind: "bad_request", message: `not JSON: ${line}` } });
    return;
  }
  const id = typeof request["id"] === "number" ? request["id"] : 0;
  void handle(request, id).then(
    (ok) => {
      write({ id, ok });
      if (request["op"] === "close") {
        closing = true;
        process.exit(0);
      }
    },
    (error: unknown) =>
      write({ id, error: { kind: kind(error), message: error instanceof Error ? error.message : String(error) } }),
  );
});
lines.on("close", () => {
  // End of stdin: a close without its reply, once an open under way has answered.
  if (closing) return;
  void opening
    .then(async () => {
      locks?.close();
      await quit?.();
      await postgres?.end().catch(() => undefined);
    })
    .finally(() => process.exit(0));
});
