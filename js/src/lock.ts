/**
 * A held lock: its token, its lease and loss signal, its renewal in the background.
 *
 * Renewal extends the lock at a third of its TTL on a dedicated connection of its
 * own (opened at the first renewal, so a short holding costs no connection), each
 * attempt bounded by what is left of the lease; a failed one closes the connection
 * and is tried again soon. The loss signal does not depend on renewal: the lease's
 * timer aborts it at the local deadline whatever the renewals are doing.
 */
import { call, isFunctionMissing } from "./calls.js";
import type { Connection } from "./connection.js";
import { LockLostError, type LossReason } from "./errors.js";
import { Lease, now } from "./lease.js";
import { type Backend, type Mode, RELEASE_LIMIT_MS, flag, period, retryDelay, ttlArg } from "./protocol.js";

/** What a lock needs from the `Locks` that made it. */
export interface Holder {
  command(): Promise<Connection>;
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
  private renewal: NodeJS.Timeout | undefined;
  private connection: Connection | undefined;
  private renewing = false;
  private stopped = false;

  /** @internal */
  constructor(
    private readonly holder: Holder,
    fields: { key: string; owner: string; token: bigint; mode: Mode; backend: Backend; ttl: number; sent: number },
    renew: boolean,
  ) {
    this.key = fields.key;
    this.owner = fields.owner;
    this.token = fields.token;
    this.mode = fields.mode;
    this.backend = fields.backend;
    this.lease = new Lease(
      fields.sent,
      fields.ttl,
      (why: LossReason, lastError: unknown) => new LockLostError(this.key, this.owner, this.token, why, lastError),
      (why) => {
        this.stop();
        if (why !== "released") holder.event("lost", this, this.lease.reason());
      },
    );
    if (renew) this.schedule(this.lease.sent + period(fields.ttl));
  }

  /**
   * Aborted when the lock is lost: a renewal found it gone, or no renewal was
   * acknowledged before the lease's local deadline (at the latest then, before the
   * server can grant it to anyone else), or it was released. `signal.reason` is a
   * {@link LockLostError} saying which.
   */
  get signal(): AbortSignal {
    return this.lease.signal;
  }

  /** True once the lock is lost, or its lease ran out, or it was released. */
  get lost(): boolean {
    return this.lease.lost;
  }

  /** Milliseconds the lock is safe to rely on from now; 0 once lost. */
  get remaining(): number {
    return this.lease.remaining();
  }

  /** The TTL in ms the holding was last acquired or extended with. */
  get ttl(): number {
    return this.lease.ttl;
  }

  /** Throws the {@link LockLostError} once the lock is lost: `lock.check()` between
   * steps of the work stops it before it does harm. */
  check(): void {
    if (this.lease.lost && this.lease.ended === undefined) this.lease.end("expired");
    const reason = this.lease.reason();
    if (reason !== undefined) throw reason;
  }

  /** Gives the lock back; false if the server no longer held it for this owner. The
   * signal aborts (reason "released") and renewal stops first. */
  async release(): Promise<boolean> {
    this.stop();
    const wasLost = this.lease.lost;
    this.lease.end("released");
    try {
      const connection = await this.holder.command();
      const reply = await this.send(connection, "lock_release", [this.owner], RELEASE_LIMIT_MS);
      const released = flag(reply, "release");
      this.holder.event("released", this, released);
      return released;
    } catch (error) {
      if (wasLost) return false;
      throw error;
    }
  }

  /** Extends the lock to `ttl` ms from now (by default its TTL); false, and the
   * signal aborted, if the server no longer holds it for this owner. */
  async extend(ttl: number = this.lease.ttl): Promise<boolean> {
    ttlArg(ttl);
    const connection = await this.holder.command();
    return this.extendOn(connection, ttl, RELEASE_LIMIT_MS);
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

  private async extendOn(connection: Connection, ttl: number, limitMs: number): Promise<boolean> {
    const sent = now();
    const reply = await this.send(connection, "lock_extend", [this.owner, ttlArg(ttl)], limitMs);
    if (flag(reply, "extend")) {
      this.lease.renewed(sent, ttl);
      return true;
    }
    this.lease.end("refused");
    return false;
  }

  private schedule(at: number): void {
    if (this.stopped) return;
    clearTimeout(this.renewal);
    const wake = Math.min(at, this.lease.validUntil);
    this.renewal = setTimeout(() => void this.renew(), Math.max(Math.ceil(wake - now()), 0));
    this.renewal.unref();
  }

  private async renew(): Promise<void> {
    if (this.stopped || this.renewing) return;
    if (this.lease.lost) {
      this.lease.end("expired");
      return;
    }
    this.renewing = true;
    const ttl = this.lease.ttl;
    const limit = Math.max(this.lease.remaining(), 10);
    try {
      const connection = await this.renewalConnection(limit);
      const held = await this.extendOn(connection, ttl, limit);
      if (held) {
        this.holder.event("renewed", this);
        this.schedule(this.lease.sent + period(ttl));
      }
    } catch (error) {
      this.connection?.close();
      this.connection = undefined;
      this.lease.lastError = error;
      if (!this.stopped) {
        this.holder.event("renewalFailed", this, error);
        this.schedule(now() + retryDelay(ttl));
      }
    } finally {
      this.renewing = false;
    }
  }

  /** The renewal's connection, opened within `limitMs` (a black-holed path must not
   * hold the renewal past the lease). */
  private async renewalConnection(limitMs: number): Promise<Connection> {
    if (this.connection !== undefined && !this.connection.closed) return this.connection;
    const opening = this.holder.dedicated(this.key);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no connection for the renewal within ${Math.round(limitMs)} ms`)), limitMs);
    });
    try {
      this.connection = await Promise.race([opening, timeout]);
      if (this.stopped) this.connection.close();
      return this.connection;
    } catch (error) {
      void opening.then((c) => c.close(), () => undefined);
      throw error;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Stops renewing and closes the renewal's connection. */
  private stop(): void {
    this.stopped = true;
    clearTimeout(this.renewal);
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
