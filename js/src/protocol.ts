/**
 * The wire protocol as this client speaks it: the limits the server enforces, the
 * arguments of each call, and which command carries a call on each backend. The
 * constants come from core/src (scripts/bundle.mjs), so the client never sends what
 * the server refuses nor refuses what the server takes.
 */
import {
  DEFAULT_MAX_OWNER_LEN,
  LIBRARY_VERSION,
  MAX_MILLIS,
  MAX_PERMITS,
  MAX_PLACE_LEASE_MS,
  MIN_LIBRARY_VERSION,
  SCRIPT_SHA,
} from "./generated.js";
import type { Arg } from "./connection.js";
import { LibraryVersionError, UnexpectedReplyError } from "./errors.js";

export {
  DEFAULT_MAX_OWNER_LEN,
  LIBRARY_VERSION,
  MAX_MILLIS,
  MAX_PERMITS,
  MAX_PLACE_LEASE_MS,
  MIN_LIBRARY_VERSION,
};

/**
 * Where a lock lives: the redis-lock module's `LOCK.*` commands, the `redislock`
 * function library called with `FCALL`, or the same library sent by this client
 * with `SCRIPT LOAD` and called with `EVALSHA` (Redis 6.2, or an ACL without
 * `FUNCTION`).
 */
export type Backend = "module" | "functions" | "scripts";

/** Every backend, in the order detection tries them. */
export const BACKENDS: readonly Backend[] = ["module", "functions", "scripts"];

/** How long past its timeout a wait may go unanswered before it is given up: the
 * server answers a wait that runs out at its end; the margin covers the round trip
 * and a busy server, and bounds the wait when the server hangs or the network drops
 * everything. */
export const WAIT_MARGIN_MS = 1000;
/** A holding is renewed every TTL / this: at a third of its TTL. */
export const RENEWAL_DIVISOR = 3;
/** The lease ends `margin` before *send time + TTL*: this percent of the TTL... */
export const LEASE_MARGIN_PERCENT = 10;
/** ...and at least this many ms (never more than the TTL). */
export const LEASE_MARGIN_MIN_MS = 50;
/** How long a connect, the backend probe, or an acquire that does not wait may take. */
export const CONTROL_LIMIT_MS = 2000;
/** How long a release, an extend, or the withdrawal of a cancelled or failed acquire
 * may take before it is given up (the lock then lapses with its TTL). */
export const RELEASE_LIMIT_MS = 1000;
/** How long the withdrawal after an unanswered wait may take: the server hangs or the
 * path is cut, and waiting for this reply would only push the give-up past its bound. */
export const WITHDRAW_AFTER_TIMEOUT_MS = 100;

/** What kind of holding is asked for. */
export interface Mode {
  /** A shared holding (a read lock); implied by `limit`. */
  readonly shared?: boolean;
  /** A shared holding granted only while fewer than `limit` owners hold the key. */
  readonly limit?: number;
}

/** How much earlier than *send time + TTL* a lease ends: 10% of the TTL, at least
 * 50 ms, and never more than the TTL. */
export function margin(ttlMs: number): number {
  return Math.min(Math.max((ttlMs * LEASE_MARGIN_PERCENT) / 100, LEASE_MARGIN_MIN_MS), ttlMs);
}

/** How often a lock of `ttlMs` is renewed: a third of its TTL. */
export function period(ttlMs: number): number {
  return Math.max(ttlMs / RENEWAL_DIVISOR, 1);
}

/** The pause before another try after a failed renewal: short, so that a blip costs
 * little of the lease. */
export function retryDelay(ttlMs: number): number {
  return Math.min(Math.max(period(ttlMs) / 4, 10), 250);
}

/**
 * A TTL or a wait as the API takes it, in milliseconds: a `number` (a fraction is
 * rounded up; past 2^53 a number is the double it is, which may not be what was
 * written: 2 ** 62 - 1 is 2^62) or a `bigint`, exact to {@link MAX_MILLIS}
 * (2^62 − 1).
 */
export type Millis = number | bigint;

/** A TTL or wait checked: `text` as the server takes it (exact), `ms` for the
 * client's own clock arithmetic (the nearest double). */
export interface Span {
  readonly text: string;
  readonly ms: number;
}

/** The longest TTL the library keeps as it is: it holds absolute times below 2^53 ms
 * (Lua's doubles), ending a longer TTL at 2^53 ms after the epoch (the year 287,000;
 * docs/PROTOCOL.md, "TTLs past 2^53 ms"). Up to 2^52 it sets the TTL as it is, which
 * ends before then for the next 140,000 years; so on the library a lease counts at
 * most this long. The module keeps every TTL exactly. */
export const LIBRARY_EXACT_TTL_MS = 2 ** 52;

/** The TTL a lease on `backend` may count with for a write of `ttlMs`. */
export function leaseTtl(backend: Backend, ttlMs: number): number {
  return backend === "module" ? ttlMs : Math.min(ttlMs, LIBRARY_EXACT_TTL_MS);
}

/** `value` as the server takes it: a positive whole number of ms (a fraction is
 * rounded up), at most {@link MAX_MILLIS}; a RangeError otherwise. */
export function span(value: Millis, what = "ttl"): Span {
  let whole: bigint;
  if (typeof value === "bigint") {
    whole = value;
  } else if (typeof value === "number" && Number.isFinite(value) && value > 0) {
    whole = BigInt(Math.ceil(value));
  } else {
    throw new RangeError(`${what} must be a positive, finite number of milliseconds (or a bigint): ${String(value)}`);
  }
  if (whole < 1n || whole > MAX_MILLIS) {
    const hint = typeof value === "number" && whole > MAX_MILLIS ? " (past 2^53 a number is rounded: give a bigint)" : "";
    throw new RangeError(`${what} is out of range: from 1 to ${MAX_MILLIS} ms, not ${String(value)}${hint}`);
  }
  return { text: whole.toString(), ms: Number(whole) };
}

/** A TTL in ms as the server takes it (see {@link span}). */
export function ttlArg(ms: Millis, what = "ttl"): string {
  return span(ms, what).text;
}

/** `[SHARED | LIMIT n]`. */
export function modeArgs(mode: Mode): string[] {
  if (mode.limit !== undefined) {
    const n = mode.limit;
    if (!Number.isInteger(n) || n < 1 || n > MAX_PERMITS) {
      throw new RangeError(`limit ${String(n)}: a semaphore has from 1 to ${MAX_PERMITS} permits`);
    }
    return ["LIMIT", String(n)];
  }
  return mode.shared === true ? ["SHARED"] : [];
}

/** An owner id the server takes: from 1 to {@link DEFAULT_MAX_OWNER_LEN} bytes
 * (the library's limit, and the module's unless its config lowers it), as the Go
 * client checks it: a TypeError for one that is not a string or is empty, a
 * RangeError for one too long. */
export function checkOwner(owner: string): string {
  if (typeof owner !== "string" || owner.length === 0) {
    throw new TypeError("an owner id must be a non-empty string");
  }
  const bytes = Buffer.byteLength(owner);
  if (bytes > DEFAULT_MAX_OWNER_LEN) {
    throw new RangeError(`an owner id has from 1 to ${DEFAULT_MAX_OWNER_LEN} bytes, not ${bytes}`);
  }
  return owner;
}

/** The library's calls; the module has the first four as `LOCK.*` commands. */
export type LibraryCall =
  | "lock_acquire"
  | "lock_release"
  | "lock_extend"
  | "lock_info"
  | "lock_version"
  | "lock_wait"
  | "lock_cancel";

const MODULE_COMMANDS: Partial<Record<LibraryCall, string>> = {
  lock_acquire: "LOCK.ACQUIRE",
  lock_release: "LOCK.RELEASE",
  lock_extend: "LOCK.EXTEND",
  lock_info: "LOCK.INFO",
};

/** The command that makes library call `call` on `key` (none for `lock_version`)
 * with `args`, on `backend`. The arguments after the key are the same on each. */
export function command(
  backend: Backend,
  call: LibraryCall,
  key: string | undefined,
  args: readonly string[] = [],
): string[] {
  const keys = key === undefined ? [] : [key];
  switch (backend) {
    case "module": {
      const name = MODULE_COMMANDS[call];
      if (name === undefined) throw new TypeError(`the module has no ${call}`);
      return [name, ...keys, ...args];
    }
    case "functions": {
      const readOnly = call === "lock_info" || call === "lock_version";
      return [readOnly ? "FCALL_RO" : "FCALL", call, String(keys.length), ...keys, ...args];
    }
    case "scripts":
      return ["EVALSHA", SCRIPT_SHA, String(keys.length), ...keys, call, ...args];
  }
}

/**
 * The command of a guarded write of `words` (the caller's command and its arguments)
 * under the lock at `key` with `token`: `LOCK.GUARD key token command…` on the
 * module, which finds the command's keys itself; else the library's `lock_guard`
 * with the lock key and `dataKeys` declared, by FCALL or EVALSHA (whose first
 * argument after the keys names the call).
 */
export function guardCommand(
  backend: Backend,
  key: string,
  dataKeys: readonly Arg[],
  token: bigint,
  words: readonly Arg[],
): Arg[] {
  switch (backend) {
    case "module":
      return ["LOCK.GUARD", key, token.toString(), ...words];
    case "functions":
      return ["FCALL", "lock_guard", String(1 + dataKeys.length), key, ...dataKeys, token.toString(), ...words];
    case "scripts":
      return ["EVALSHA", SCRIPT_SHA, String(1 + dataKeys.length), key, ...dataKeys, "lock_guard", token.toString(), ...words];
  }
}

/** Checks a library's `lock_version` against the range this client speaks. */
export function checkVersion(found: number): void {
  if (found < MIN_LIBRARY_VERSION || found > LIBRARY_VERSION) {
    throw new LibraryVersionError(found, MIN_LIBRARY_VERSION, LIBRARY_VERSION);
  }
}

/** An integer reply as a bigint: exact whatever the Redis client made of it (a
 * string with ioredis' `stringNumbers` or node-redis' type mapping, a bigint, or a
 * `number`, which is refused past 2^53 where it is no longer exact). */
export function integer(reply: unknown, what: string): bigint {
  if (typeof reply === "bigint") return reply;
  if (typeof reply === "number") {
    if (!Number.isSafeInteger(reply)) {
      throw new UnexpectedReplyError(
        `${what}: ${reply} is past 2^53, where the Redis client's number is no longer exact (use node-redis 5+ or ioredis)`,
      );
    }
    return BigInt(reply);
  }
  if (typeof reply === "string" && /^-?\d+$/.test(reply)) return BigInt(reply);
  if (Buffer.isBuffer(reply) && /^-?\d+$/.test(reply.toString())) return BigInt(reply.toString());
  throw new UnexpectedReplyError(`${what}: expected an integer, got ${show(reply)}`);
}

/** A token reply: a positive integer, or null (not granted). */
export function tokenOrNull(reply: unknown, what: string): bigint | null {
  if (reply === null || reply === undefined) return null;
  return integer(reply, what);
}

/** A 0/1 reply. */
export function flag(reply: unknown, what: string): boolean {
  return integer(reply, what) === 1n;
}

export function text(reply: unknown): string {
  if (typeof reply === "string") return reply;
  if (Buffer.isBuffer(reply)) return reply.toString();
  return String(reply);
}

export function show(reply: unknown): string {
  try {
    return JSON.stringify(reply, (_, v: unknown) => (typeof v === "bigint" ? v.toString() : v));
  } catch {
    return String(reply);
  }
}

/** `seconds` as BLPOP takes it, 3 decimals, at least 2 ms: Redis 6.2 reads
 * `BLPOP list 0.001` as 0, which blocks without limit. */
export function blpopSeconds(ms: number): string {
  const whole = Math.max(Math.ceil(ms), 2);
  return `${Math.floor(whole / 1000)}.${String(whole % 1000).padStart(3, "0")}`;
}
