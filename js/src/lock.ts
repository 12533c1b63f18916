/**
 * A held lock: its token, its lease and loss signal, its renewal in the background.
 *
 * Renewal extends the lock on a dedicated connection of its own (opened at the
 * first renewal, so a short holding costs no connection) when the lease says it is
 * due (a third of its TTL after the write it counts from: lease.ts), asking for the
 * TTL the holder last asked for; each attempt is bounded by what is left of the
 * lease, and a failed one closes the connection and is tried again soon. Every
 * write (the renewals and the holder's extends) goes through the lease, which keeps
 * the deadline to what the writes that may still be applied allow. The loss signal
 * does not depend on renewal: the lease's timer aborts it at the local deadline
 * whatever the renewals are doing, and each accessor reads the clock.
 */
import { bounded, call, isFunctionMissing, isServerError } from "./calls.js";
import type { Connection } from "./connection.js";
import { CommandTimeoutError, FencedError, LibraryVersionError, LockLostError, type LossReason } from "./errors.js";
import { type GuardArg, type GuardRequest, guardError, guardRequest, lacksGuard, sendGuard } from "./guard.js";
import { Lease, now, type Write } from "./lease.js";
import { type PostgresClient, fencePostgres } from "./postgres.js";
import {
  type Backend,
  CONTROL_LIMIT_MS,
  LIBRARY_VERSION,
  MIN_LIBRARY_VERSION,
  type Millis,
  type Mode,
  RELEASE_LIMIT_MS,
  type Span,
  command,
  flag,
  integer,
  leaseTtl,
  period,
  retryDelay,
  span,
} from "./protocol.js";
import { type Timer, later } from "./timers.js";

/** What a lock needs from the `Locks` that made it. */
export interface Holder {
  command(): Promise<Connection>;
  /** The connection of guarded writes (replies as the user's client reads them). */
  guarded(): Promise<Connection>;
  dedicated(key: string): Promise<Connection>;
  /** The library is gone (a restart that lost it): detect the backend anew. */
  forgetBackend(): void;
  event(name: "lost" | "renewalFailed" | "released" | "renewed", lock: Lock, detail?: unknown): void;
}

export class Lock implements AsyncDisposable {
  /** The key the lock lives at. */
  readonly key: string;
  /** The owner id the server knows this holding by. */
  readonly owner: string;
  /**
   * The fencing token: greater than every token handed out for this key before.
   * Stamp each write to the guarded resource with it, and have the resource refuse a
   * token lower than the highest it has seen. A `bigint`: tokens go up to 2^62.
   */
  readonly token: bigint;
  /** The kind of holding: exclusive, shared, or one of `limit` permits. */
  readonly mode: Mode;
  /** The backend that holds it (the scripts backend after the library was lost). */
  backend: Backend;
  private readonly lease: Lease;
  /** The TTL the holder last asked for: each renewal asks for it again. */
  private asked: Span;
  private renewal: Timer | undefined;
  private connection: Connection | undefined;
  private renewing = false;
  private stopped = false;
  /** Not before this (a renewal failed: the pause before the next try). */
  private retryAt = 0;

  /** @internal */
  constructor(
    private readonly holder: Holder,
    fields: { key: string; owner: string; token: bigint; mode: Mode; backend: Backend; ttl: Span; sent: number },
    renew: boolean,
  ) {
    this.key = fields.key;
    this.owner = fields.owner;
    this.token = fields.token;
    this.mode = fields.mode;
    this.backend = fields.backend;
    this.asked = fields.ttl;
    this.lease = new Lease(
      fields.sent,
      leaseTtl(fields.backend, fields.ttl.ms),
      (why: LossReason, lastError: unknown) => new LockLostError(this.key, this.owner, this.token, why, lastError),
      (why) => {
        this.stop();
        if (why !== "released") holder.event("lost", this, this.lease.reason());
      },
    );
    if (!renew) this.stopped = true;
    this.lease.start();
    this.schedule();
  }

  /**
   * Aborted when the lock is lost: a renewal found it gone, or no renewal was
   * acknowledged before the lease's local deadline (at the latest then, before the
   * server can grant it to anyone else), or it was released. `signal.reason` is a
   * {@link LockLostError} saying which.
   *
   * Reading `lock.signal` reads the clock: past the deadline it aborts the signal
   * first. So `lock.signal.throwIfAborted()` (or `lock.signal.aborted`) right before
   * a write is the check to make, even when the process was stopped and another
   * timer runs before the lease's own. A signal kept from an earlier read (the one
   * `using` hands the routine) is aborted by a timer: give it to what listens for
   * the abort, and check through `lock` before each write.
   */
  get signal(): AbortSignal {
    return this.lease.signal;
  }

  /** True once the lock is lost, or its lease ran out, or it was released (reads
   * the clock, as {@link signal} does). */
  get lost(): boolean {
    return this.lease.lost;
  }

  /** Milliseconds the lock is safe to rely on from now; 0 once lost. */
  get remaining(): number {
    return this.lease.remaining();
  }

  /** The TTL in ms the holder last asked for (at the acquire, or its last extend),
   * which each renewal asks for again; past 2^53, the nearest `number`. */
  get ttl(): number {
    return this.asked.ms;
  }

  /** Throws the {@link LockLostError} once the lock is lost (reads the clock, as
   * {@link signal} does): the same check as `lock.signal.throwIfAborted()`. */
  check(): void {
    const reason = this.lease.lost ? this.lease.reason() : undefined;
    if (reason !== undefined) throw reason;
  }

  /**
   * Gives the lock back; false if the server no longer held it for this owner. The
   * signal aborts (reason "released") and renewal stops first. A release whose
   * connection failed before its answer came (it may have run) is sent once more
   * within the same bound: answered 0 while the lease still held, it is the first
   * one that released it, and this says true. It is never re-sent by the driver.
   */
  async release(): Promise<boolean> {
    this.stop();
    const wasLost = this.lease.lost;
    this.lease.end("released");
    const started = now();
    let released: boolean;
    try {
      released = flag(await this.sendRelease(RELEASE_LIMIT_MS), "release");
    } catch (error) {
      if (wasLost) return false;
      const left = RELEASE_LIMIT_MS - (now() - started);
      if (isServerError(error) || error instanceof CommandTimeoutError || left <= 0) throw error;
      const again = now();
      released = flag(await this.sendRelease(left), "release") || again < this.lease.validUntil;
    }
    this.holder.event("released", this, released);
    return released;
  }

  /**
   * Extends the lock to `ttl` ms from now (by default the TTL last asked for), and
   * renews it with that TTL from then on; false, and the signal aborted, if the
   * server no longer holds it for this owner; false without a call once the lock is
   * lost. A shorter TTL shortens the lease as soon as it is sent. `ttl`: a number of
   * ms, or a bigint (exact to 2^62 − 1).
   */
  async extend(ttl?: Millis): Promise<boolean> {
    const asked = ttl === undefined ? this.asked : span(ttl);
    if (this.lease.lost) return false;
    const connection = await this.holder.command();
    this.asked = asked;
    return this.extendOn(connection, asked, RELEASE_LIMIT_MS);
  }

  /**
   * Runs `command` with `args` on the lock's server only while this lock's token
   * holds it: the server checks the token and runs the command in one step
   * (`LOCK.GUARD` on the module, `lock_guard` on the library), so no lapse, release
   * or grant to another holder comes between the check and the write. Resolves the
   * command's reply as your Redis client gives a raw command's (ioredis' `call`,
   * node-redis' `sendCommand`, with its own reading of integers); rejects with the
   * command's own error reply.
   *
   * `keys` are every key the command touches. The library declares them to the
   * server (Cluster routing, ACL key patterns) and refuses a command that touches a
   * key not declared; the module finds them itself, but name them on every backend,
   * so the code runs on each. In a Cluster they share the lock key's hash slot: hash
   * tags, `{job:1}` for the lock and `{job:1}:out` for the data.
   *
   * ```ts
   * await lock.guard(["{job:1}:out"], "SET", "{job:1}:out", result);
   * ```
   *
   * When the server does not hold the lock with this token (it lapsed, was released
   * or deleted, another holder has it), nothing runs: a {@link FencedError}, and the
   * lock is lost at once (`lock.signal` aborted, its reason a {@link LockLostError}
   * whose `why` is `"fenced"`). A lock the client knows is lost or released is
   * refused before anything is sent, with its {@link LockLostError}. Sent once,
   * within {@link CONTROL_LIMIT_MS}: a reply lost to a broken connection or a
   * timeout is not asked for again, as the command may have run. A library loaded
   * before `lock_guard` existed is a {@link LibraryVersionError} whose `lacks` is
   * `"lock_guard"`.
   */
  async guard(keys: readonly (string | Buffer)[], command: string, ...args: GuardArg[]): Promise<unknown> {
    const request = guardRequest(keys, command, args);
    this.check();
    const connection = await this.holder.guarded();
    const backend = this.backend;
    try {
      return await this.sendGuard(connection, request);
    } catch (error) {
      const thrown = guardError(error, backend, this.key, this.token);
      if (thrown instanceof FencedError) this.lease.endWith("fenced", thrown);
      throw thrown;
    }
  }

  /**
   * Fences the PostgreSQL transaction `client` is in for `resource` (by default the
   * lock's key) with this lock's token: run it first in the transaction, before the
   * writes it fences. Rejects with a {@link FencedError} when a holder with a greater
   * token has written to `resource` (roll the transaction back): the lock is then
   * lost at once, as for {@link guard}. `client`: anything with node-postgres'
   * `query(text, values)`, a `pg.Client` or the `PoolClient` of the transaction.
   *
   * ```ts
   * await client.query("BEGIN");
   * await lock.fencePostgres(client);            // FencedError: roll back
   * await client.query("UPDATE reports SET body = $1 WHERE day = $2", [body, day]);
   * await client.query("COMMIT");
   * ```
   *
   * Only an exclusive holding's token fences (the tokens of read locks and
   * semaphore permits do not order writers): a shared lock is a TypeError. A lock
   * the client knows is lost or released is refused with its {@link LockLostError},
   * before anything is sent. The fence table is made once by
   * `createPostgresFenceTable(client)`.
   */
  async fencePostgres(client: PostgresClient, resource: string = this.key): Promise<void> {
    if (this.mode.shared === true) {
      throw new TypeError(
        `lock ${this.key} is shared: only an exclusive holding's token fences (the tokens of read locks and permits, held side by side, do not order writers)`,
      );
    }
    this.check();
    try {
      await fencePostgres(client, resource, this.token);
    } catch (error) {
      if (error instanceof FencedError) this.lease.endWith("fenced", error);
      throw error;
    }
  }

  /** Releases the lock unless released already: `await using lock = await
   * locks.acquire(…)` (Node 20.4+ has the symbol). */
  declare [Symbol.asyncDispose]: () => Promise<void>;

  /** What `await using` calls: releases the lock unless released already. */
  async dispose(): Promise<void> {
    if (this.lease.ended !== "released") {
      await this.release().catch(() => false);
    }
  }

  /** Sends a guarded write on this lock's backend. A library that answers "not
   * found" for `lock_guard` either lacks it (loaded before it came: asked for its
   * version, a LibraryVersionError) or is gone (a restart without it: the scripts
   * path, which this client carries, answers instead). */
  private async sendGuard(connection: Connection, request: GuardRequest): Promise<unknown> {
    const backend = this.backend;
    try {
      return await sendGuard(connection, backend, this.key, this.token, request, CONTROL_LIMIT_MS);
    } catch (error) {
      if (backend === "module" || !(isFunctionMissing(error) || lacksGuard(error))) throw error;
      const version = await bounded(connection, command(backend, "lock_version", undefined), this.key, CONTROL_LIMIT_MS).then(
        (reply) => Number(integer(reply, "lock_version")),
        () => undefined,
      );
      if (version !== undefined) throw new LibraryVersionError(version, MIN_LIBRARY_VERSION, LIBRARY_VERSION, "lock_guard");
      if (backend !== "functions") throw error;
      this.holder.forgetBackend();
      this.backend = "scripts";
      return sendGuard(connection, "scripts", this.key, this.token, request, CONTROL_LIMIT_MS);
    }
  }

  private async sendRelease(limitMs: number): Promise<unknown> {
    const connection = await this.holder.command();
    return this.send(connection, "lock_release", [this.owner], limitMs);
  }

  private async send(connection: Connection, name: "lock_release" | "lock_extend", args: string[], limitMs: number) {
    try {
      return await call(connection, this.backend, name, this.key, args, { limitMs });
    } catch (error) {
      // The library is gone (a restart without it, FUNCTION FLUSH): its scripts
      // twin, which this client carries, answers at once (0 when the holding went
      // with it), rather than an error repeated until the deadline.
      if (this.backend !== "functions" || !isFunctionMissing(error)) throw error;
      this.holder.forgetBackend();
      this.backend = "scripts";
      return call(connection, this.backend, name, this.key, args, { limitMs });
    }
  }

  /** Sends an extend to `ttl` through the lease: it counts as a write that may be
   * applied from now on, until its answer says otherwise. */
  private async extendOn(connection: Connection, ttl: Span, limitMs: number): Promise<boolean> {
    const write: Write = this.lease.send(leaseTtl(this.backend, ttl.ms));
    this.schedule(); // a shorter TTL in flight may bring the next renewal forward
    let reply: unknown;
    try {
      reply = await this.send(connection, "lock_extend", [this.owner, ttl.text], limitMs);
    } catch (error) {
      // Unanswered, or answered with an error: it may have been applied (or may
      // still be), so it stays among the writes the lease counts with.
      this.lease.abandoned(write);
      throw error;
    }
    if (!flag(reply, "extend")) {
      this.lease.end("refused");
      return false;
    }
    const held = this.lease.applied(write);
    if (held) {
      this.retryAt = 0;
      this.schedule();
    }
    return held;
  }

  /** Arms the renewal for when the lease says it is due (not before a retry's
   * pause), or when the lease ends if that is sooner. */
  private schedule(): void {
    if (this.stopped) return;
    this.renewal?.clear();
    const wake = Math.min(Math.max(this.lease.renewalDue(), this.retryAt), this.lease.validUntil);
    this.renewal = later(wake - now(), () => void this.renew(), true);
  }

  private async renew(): Promise<void> {
    if (this.stopped || this.renewing) return;
    if (this.lease.lost) return;
    if (now() < Math.max(this.lease.renewalDue(), this.retryAt) - 1) {
      this.schedule(); // moved on since (an extend was answered)
      return;
    }
    this.renewing = true;
    const ttl = this.asked;
    // A renewal unanswered for a third of the lease's TTL (at least the release
    // limit) is tried again on a new connection, never past the lease.
    const limit = Math.max(Math.min(this.lease.remaining(), Math.max(period(this.lease.shortestTtl()), RELEASE_LIMIT_MS)), 10);
    try {
      const connection = await this.renewalConnection(limit);
      const held = await this.extendOn(connection, ttl, limit);
      if (held) this.holder.event("renewed", this);
    } catch (error) {
      this.connection?.close();
      this.connection = undefined;
      this.lease.lastError = error;
      if (!this.stopped) {
        this.holder.event("renewalFailed", this, error);
        this.retryAt = now() + retryDelay(this.lease.shortestTtl());
      }
    } finally {
      this.renewing = false;
      this.schedule();
    }
  }

  /** The renewal's connection, opened within `limitMs` (a black-holed path must not
   * hold the renewal past the lease). */
  private async renewalConnection(limitMs: number): Promise<Connection> {
    if (this.connection !== undefined && !this.connection.closed) return this.connection;
    const opening = this.holder.dedicated(this.key);
    let timer: Timer | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = later(limitMs, () => reject(new Error(`no connection for the renewal within ${Math.round(limitMs)} ms`)));
    });
    try {
      this.connection = await Promise.race([opening, timeout]);
      if (this.stopped) this.connection.close();
      return this.connection;
    } catch (error) {
      void opening.then((c) => c.close(), () => undefined);
      throw error;
    } finally {
      timer?.clear();
    }
  }

  /** Stops renewing and closes the renewal's connection. */
  private stop(): void {
    this.stopped = true;
    this.renewal?.clear();
    this.connection?.close();
    this.connection = undefined;
  }
}

// `await using lock = …` where the runtime has Symbol.asyncDispose (Node 20.4+ has
// the symbol; the syntax needs TypeScript 5.2+ or a runtime that parses it).
const asyncDispose = (Symbol as { asyncDispose?: symbol }).asyncDispose;
if (asyncDispose !== undefined) {
  Object.defineProperty(Lock.prototype, asyncDispose, {
    value(this: Lock) {
      return this.dispose();
    },
  });
}
