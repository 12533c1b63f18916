/**
 * `Locks`: the client. Give it your ioredis or node-redis client; it makes its own
 * connections from it (see connection.ts), finds out which backend the server offers,
 * and hands out {@link Lock}s.
 */
import { EventEmitter } from "node:events";
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";

import { acquire, type Channels } from "./acquire.js";
import { LIBRARY_SOURCE, type LockInfo, bounded, call, detect, isFunctionMissing, parseInfo } from "./calls.js";
import { type Connection, type Driver, driverFor } from "./connection.js";
import { LockError, type LockLostError, describe } from "./errors.js";
import { Lock, type Holder } from "./lock.js";
import { Election } from "./election.js";
import {
  type Backend,
  BACKENDS,
  CONTROL_LIMIT_MS as COMMAND_LIMIT_MS,
  DEFAULT_MAX_OWNER_LEN,
  type Millis,
  type Mode,
  type Span,
  checkOwner,
  checkVersion,
  command,
  integer,
  span,
} from "./protocol.js";

/** Where `Locks` tells what happens to its locks, besides its events. */
export interface Logger {
  warn(message: string, fields: Record<string, unknown>): void;
  info?(message: string, fields: Record<string, unknown>): void;
}

export interface LocksOptions {
  /** Use this backend only; by default the module if the server has it, else the
   * `redislock` library if loaded, else the library sent as a script. */
  backend?: Backend;
  /** Renew held locks in the background (default true). */
  renew?: boolean;
  /** Gets a line for each lost lock and failed renewal (`warn`), and each acquire
   * and release (`info`). */
  logger?: Logger;
}

export interface AcquireOptions {
  /** How long the server keeps the lock without a renewal, in ms: from 1 to 2^62 − 1,
   * a number (a fraction rounds up; past 2^53 a number is rounded, so give an exact
   * value there as a bigint) or a bigint. */
  ttl: Millis;
  /** How long to wait in the server's FIFO queue, in ms (a number or a bigint, up
   * to 2^62 − 1): 0 does not wait; the default, `Infinity`, waits without limit
   * (until `signal` aborts). */
  wait?: Millis;
  /** Aborting it mid-wait, or while an acquire that does not wait is on its way,
   * withdraws what it may have been granted, leaving nothing behind; the promise
   * rejects with the signal's reason. */
  signal?: AbortSignal;
  /** The owner id the server knows the holding by (1 to 256 bytes); by default
   * `host:pid:` and 16 random hex digits, new for each acquire. Give one only to
   * pick a holding up again (an acquire by its holder refreshes it and answers the
   * same token). */
  owner?: string;
  /** A shared holding (a read lock): held beside other shared ones, never beside an
   * exclusive one. */
  shared?: boolean;
  /** A semaphore: a shared holding granted only while fewer than `limit` owners
   * hold the key. */
  limit?: number;
  /** Renew this lock in the background (default: the `Locks` setting). */
  renew?: boolean;
}

/** The events of `Locks`: `acquired`, `renewed`, `renewalFailed` (with the error),
 * `lost` (with the {@link LockLostError}), `released` (with whether the server still
 * held it). */
export interface LocksEvents {
  acquired: [lock: Lock];
  renewed: [lock: Lock];
  renewalFailed: [lock: Lock, error: unknown];
  lost: [lock: Lock, error: LockLostError];
  released: [lock: Lock, held: boolean];
}

/** A wait ended without the lock: `using` throws it (its routine did not run). */
export class LockBusyError extends LockError {
  override name = "LockBusyError";
  constructor(readonly key: string) {
    super(`lock ${key} is busy: the wait ended without it`);
  }
}

// Cut so that an owner id stays within the server's limit (a host name has up to
// 253 bytes; the pid and the random part take at most 25 more).
const HOST = Buffer.from(hostname()).subarray(0, DEFAULT_MAX_OWNER_LEN - 32).toString();
/** Random bytes drawn 4 KiB at a time: an acquire costs no system call for its owner. */
let pool = Buffer.alloc(0);
let drawn = 0;

/** A new owner id: `host:pid:` and 16 random hex digits. */
export function newOwner(): string {
  if (drawn + 8 > pool.length) {
    pool = randomBytes(4096);
    drawn = 0;
  }
  const random = pool.toString("hex", drawn, drawn + 8);
  drawn += 8;
  return `${HOST}:${process.pid}:${random}`;
}

/** A wait as the API takes it: Infinity (the default) without limit, 0 none. */
function waitOf(wait: Millis | undefined): Span | "none" | "forever" {
  if (wait === undefined || wait === Infinity) return "forever";
  if (wait === 0 || wait === 0n) return "none";
  if ((typeof wait === "number" && wait < 0) || (typeof wait === "bigint" && wait < 0n)) {
    throw new RangeError(`wait must be 0 or more milliseconds (Infinity: without limit): ${String(wait)}`);
  }
  return span(wait, "wait");
}

/** Dedicated connections kept for the next wait, per `Locks`. */
const IDLE_WAITS = 4;

/**
 * Locks, semaphores and read-write locks on one Redis (or Cluster, or Sentinel-managed
 * master), through your ioredis or node-redis client.
 *
 * ```ts
 * import Redis from "ioredis";
 * import { Locks } from "redis-lock-client";
 *
 * const locks = new Locks(new Redis());
 * await locks.using("report:daily", { ttl: 30_000 }, async (lock, signal) => {
 *   await buildReport({ fence: lock.token, signal });
 * });
 * ```
 */
export class Locks extends EventEmitter<LocksEvents> {
  private readonly driver: Driver;
  private readonly forced: Backend | undefined;
  private readonly renew: boolean;
  private readonly logger: Logger | undefined;
  private detected: Promise<Backend> | undefined;
  private idle: Connection[] = [];
  private closed = false;
  private readonly holder: Holder;
  private readonly channels: Channels;

  constructor(redis: unknown, options: LocksOptions = {}) {
    super();
    if (options.backend !== undefined && !BACKENDS.includes(options.backend)) {
      throw new TypeError(`backend must be "module", "functions" or "scripts": ${String(options.backend)}`);
    }
    this.driver = driverFor(redis);
    this.forced = options.backend;
    this.renew = options.renew ?? true;
    this.logger = options.logger;
    this.driver.onEnd(() => this.close());
    this.channels = {
      command: () => this.driver.command(),
      dedicated: (key) => this.takeDedicated(key),
      reuse: (connection) => this.reuse(connection),
    };
    this.holder = {
      command: () => this.driver.command(),
      guarded: () => this.driver.guarded(),
      dedicated: (key) => this.driver.dedicated(key),
      forgetBackend: () => {
        this.detected = undefined;
      },
      event: (name, lock, detail) => this.lockEvent(name, lock, detail),
    };
  }

  /** The backend in use, found out on first use (one probe per `Locks`, again after
   * the server lost the library). */
  backend(): Promise<Backend> {
    if (this.detected === undefined) {
      const found = this.driver.command().then((c) => detect(c, this.forced, COMMAND_LIMIT_MS));
      this.detected = found;
      found.catch(() => {
        if (this.detected === found) this.detected = undefined;
      });
    }
    return this.detected;
  }

  /**
   * Takes the lock at `key`, waiting in the server's FIFO queue for `wait` ms (by
   * default without limit). Resolves the {@link Lock}, or `null` if the wait ended
   * without it (busy). Rejects with a {@link WaitUnansweredError} when a timed wait
   * got no answer within its timeout and a second, or a step of a wait on the
   * library none within its own bound (the server hangs, the network is cut), and
   * with the signal's reason when `signal` aborts (after withdrawing what the
   * acquire may have been granted).
   */
  async acquire(key: string, options: AcquireOptions): Promise<Lock | null> {
    if (typeof key !== "string" || key.length === 0) throw new TypeError("a lock key must be a non-empty string");
    const ttl = span(options.ttl);
    const wait = waitOf(options.wait);
    const mode: Mode = { shared: options.shared === true || options.limit !== undefined, ...(options.limit === undefined ? {} : { limit: options.limit }) };
    const owner = options.owner === undefined ? newOwner() : checkOwner(options.owner);
    for (let again = true; ; again = false) {
      const backend = await this.backend();
      try {
        const grant = await acquire(this.channels, backend, {
          key,
          owner,
          ownerGiven: options.owner !== undefined,
          ttl,
          mode,
          wait,
          signal: options.signal,
        });
        if (grant === null) return null;
        const lock = new Lock(
          this.holder,
          { key, owner, token: grant.token, mode, backend, ttl, sent: grant.sent },
          options.renew ?? this.renew,
        );
        this.lockEvent("acquired", lock);
        return lock;
      } catch (error) {
        // The library went missing (a restart that lost it): detect anew, once.
        if (!again || !isFunctionMissing(error)) throw error;
        this.detected = undefined;
      }
    }
  }

  /** Takes the lock at `key` if it is free now (no wait): the {@link Lock}, or `null`. */
  tryAcquire(key: string, options: Omit<AcquireOptions, "wait">): Promise<Lock | null> {
    return this.acquire(key, { ...options, wait: 0 });
  }

  /**
   * Runs `routine` holding the lock at `key`: acquires it (waiting as
   * `options.wait` says), renews it while the routine runs, and releases it
   * afterwards, also when the routine throws. The routine gets the lock and a signal
   * that aborts when the lock is lost (or `options.signal` aborts): pass it to
   * whatever it does, and check through the lock right before each write
   * (`lock.signal.throwIfAborted()`, which reads the clock). Resolves what the
   * routine resolves; rejects with {@link LockBusyError} when the wait ended without
   * the lock.
   */
  async using<T>(
    key: string,
    options: AcquireOptions,
    routine: (lock: Lock, signal: AbortSignal) => Promise<T> | T,
  ): Promise<T> {
    const lock = await this.acquire(key, options);
    if (lock === null) throw new LockBusyError(key);
    const signal = options.signal === undefined ? lock.signal : AbortSignal.any([lock.signal, options.signal]);
    try {
      return await routine(lock, signal);
    } finally {
      await lock.release().catch(() => false);
    }
  }

  /**
   * The leader election at `key` ({@link Election}): leaders hold the lock for
   * `options.ttl` ms between renewals; the term is the holding's fencing token.
   * A key without a hash tag may not contain `}` (its record shares its slot).
   */
  election(key: string, options: { ttl: Millis }): Election {
    return new Election(
      {
        acquire: (lockKey, ttl, signal) => this.acquire(lockKey, signal === undefined ? { ttl } : { ttl, signal }),
        info: (lockKey) => this.info(lockKey),
        command: () => this.driver.command(),
        dedicated: (lockKey) => this.driver.dedicated(lockKey),
      },
      key,
      options.ttl,
    );
  }

  /** Who holds the lock at `key`: `null` when nobody does. */
  async info(key: string): Promise<LockInfo | null> {
    const backend = await this.backend();
    const connection = await this.driver.command();
    return parseInfo(await call(connection, backend, "lock_info", key, [], { limitMs: COMMAND_LIMIT_MS }));
  }

  /**
   * Installs or upgrades the `redislock` library this client carries (`FUNCTION LOAD
   * REPLACE`), on every master of a Cluster; the version it then answers. For
   * servers without the module that allow `FUNCTION`.
   */
  async loadLibrary(): Promise<number> {
    let version = 0;
    const masters = await this.driver.masters();
    try {
      for (const connection of masters) {
        await bounded(connection, ["FUNCTION", "LOAD", "REPLACE", LIBRARY_SOURCE], undefined, COMMAND_LIMIT_MS);
        const reply = await bounded(connection, command("functions", "lock_version", undefined), undefined, COMMAND_LIMIT_MS);
        version = Number(integer(reply, "lock_version"));
        checkVersion(version);
      }
    } finally {
      if (this.driver.cluster) for (const connection of masters) connection.close();
    }
    this.detected = undefined;
    return version;
  }

  /** Closes this client's own connections (also done when your client ends). Locks
   * still held lapse with their TTL unless released first. */
  close(): void {
    this.closed = true;
    for (const connection of this.idle) connection.close();
    this.idle = [];
    this.driver.close();
  }

  private async takeDedicated(key: string): Promise<Connection> {
    while (!this.driver.cluster) {
      const connection = this.idle.pop();
      if (connection === undefined) break;
      if (!connection.closed) return connection;
    }
    return this.driver.dedicated(key);
  }

  private reuse(connection: Connection): void {
    if (this.closed || this.driver.cluster || connection.closed || this.idle.length >= IDLE_WAITS) {
      connection.close();
      return;
    }
    this.idle.push(connection);
  }

  private lockEvent(name: keyof LocksEvents, lock: Lock, detail?: unknown): void {
    const fields = { key: lock.key, owner: lock.owner, token: lock.token.toString() };
    switch (name) {
      case "acquired":
        this.logger?.info?.("lock acquired", fields);
        this.emit("acquired", lock);
        break;
      case "renewed":
        this.emit("renewed", lock);
        break;
      case "renewalFailed":
        this.logger?.warn("lock renewal failed", { ...fields, remainingMs: lock.remaining, error: describe(detail) });
        this.emit("renewalFailed", lock, detail);
        break;
      case "lost":
        this.logger?.warn("lock lost", { ...fields, reason: describe(detail) });
        this.emit("lost", lock, detail as LockLostError);
        break;
      case "released":
        this.logger?.info?.("lock released", { ...fields, held: detail === true });
        this.emit("released", lock, detail === true);
        break;
    }
  }
}
