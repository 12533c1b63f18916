/**
 * The holder's side of a lock: a lease with a local deadline, and the loss signal.
 *
 * The server counts a lock's TTL from the moment it runs the acquire or extend,
 * which is after the client sent it. So the lock is the server's to keep until at
 * least *send time + TTL*, whatever happened to the reply. The lease ends a margin
 * earlier ({@link margin}: 10% of the TTL, at least 50 ms), for the two clocks'
 * drift and for the wake-up of whoever listens to the signal. A timer aborts the
 * signal at that deadline even if no reply ever comes back (a partition, a hung
 * server), so the holder hears of the loss before the server can grant the lock to
 * anyone else.
 *
 * What the deadline cannot cover: a holder whose own process stops (a long
 * synchronous stretch of JavaScript that blocks the event loop, a GC pause, SIGSTOP,
 * a suspended VM) between checking the signal and writing; a local clock that runs
 * more than 10% slow against the server's. Fencing tokens cover those.
 */
import { performance } from "node:perf_hooks";

import { LockLostError, type LossReason } from "./errors.js";
import { margin } from "./protocol.js";

/** Monotonic milliseconds. */
export const now = (): number => performance.now();

export class Lease {
  /** When the last acknowledged acquire or extend was sent. */
  sent: number;
  ttl: number;
  validUntil: number;
  lastError: unknown;
  /** Why it ended, once it did. */
  ended: LossReason | undefined;
  // The signal and its reason are made when first asked for (or at a loss): an
  // AbortController and its abort cost more than the rest of a short holding.
  private controller: AbortController | undefined;
  private error: LockLostError | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    sent: number,
    ttl: number,
    private readonly loss: (why: LossReason, lastError: unknown) => LockLostError,
    private readonly onEnd: (why: LossReason) => void,
  ) {
    this.sent = sent;
    this.ttl = ttl;
    this.validUntil = sent + ttl - margin(ttl);
    this.arm();
  }

  get lost(): boolean {
    return this.ended !== undefined || now() >= this.validUntil;
  }

  /** Aborted, with {@link reason}, once the lease ended. */
  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.ended !== undefined) this.controller.abort(this.reason());
    }
    return this.controller.signal;
  }

  /** Why it ended, as the signal's reason; undefined while it holds. */
  reason(): LockLostError | undefined {
    if (this.ended === undefined) return undefined;
    this.error ??= this.loss(this.ended, this.lastError);
    return this.error;
  }

  /** Milliseconds left of the lease; 0 once lost. */
  remaining(): number {
    return this.ended !== undefined ? 0 : Math.max(this.validUntil - now(), 0);
  }

  /**
   * An acquire or extend sent at `sent` was acknowledged. A reply to an older
   * request than the one the lease is counted from changes nothing, and neither does
   * one that comes after the lease ran out: once lost, a lock stays lost, so the work
   * that stopped for it was right to.
   */
  renewed(sent: number, ttl: number): boolean {
    if (this.lost || sent < this.sent) return false;
    this.lastError = undefined;
    this.sent = sent;
    this.ttl = ttl;
    this.validUntil = sent + ttl - margin(ttl);
    this.arm();
    return true;
  }

  /** Ends the lease: the first reason given stays. */
  end(why: LossReason): void {
    if (this.ended !== undefined) return;
    this.ended = why;
    clearTimeout(this.timer);
    this.controller?.abort(this.reason());
    this.onEnd(why);
  }

  /** The deadline's timer, unref'ed: a lease never keeps the process alive. A timer
   * can fire a little early (whole milliseconds): it is armed again then. */
  private arm(): void {
    clearTimeout(this.timer);
    const left = this.validUntil - now();
    if (left <= 0) {
      this.end("expired");
      return;
    }
    // setTimeout takes at most 2^31 - 1 ms; a longer lease is looked at again then.
    this.timer = setTimeout(() => this.arm(), Math.min(Math.ceil(left), 2 ** 31 - 1));
    this.timer.unref();
  }

  /** Stops the timer without signalling (the lock was released: the caller ends it). */
  dispose(): void {
    clearTimeout(this.timer);
  }
}
