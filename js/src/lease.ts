/**
 * The holder's side of a lock: a lease with a local deadline, and the loss signal.
 *
 * The server counts a lock's TTL from the moment it runs the acquire or extend,
 * which is after the client sent it. So a write sent at *s* with TTL *T*, if it is
 * the last one the server applied, keeps the lock until at least *s + T*. But the
 * writes of one holding (the acquire, the renewals on their connection, the
 * holder's own extends on the command connection, a try given up after a timeout
 * whose bytes may still arrive) can reach the server in another order than they
 * were sent, and the expiry is set by the one applied last. So the lease counts
 * from V, the acknowledged write sent last, and is no longer than any write that
 * could still be the last one applied allows (contract.md "Renewal and the lease"):
 *
 *     deadline = min over V and every write W not known to be applied before V of
 *                start(W) + T_W − margin(T_W),   start(W) = max(s_V, s_W)
 *
 * where W is known to be applied before V when its reply arrived before V was sent.
 * A W that may be applied after V was so after both sends, hence `max(s_V, s_W)`:
 * `s_V + T_W − margin(T_W)` where W was sent before V, and as long as W itself
 * allows where W was sent after it (an extend to a shorter TTL late in a holding
 * does not end the lease at once). Writes with the
 * TTL of V change nothing. A write never answered (given up) stays for the life of
 * the holding: it may still arrive. The client does not use "a connection keeps
 * order": the drivers reconnect under the same connection object, so two writes on
 * one object may have gone on two sockets. The margin ({@link margin}: 10% of the
 * TTL, at least 50 ms) is for the two clocks' rates and for the wake-up of whoever
 * listens to the signal. A renewal is due a third of the same TTL after the same
 * start, so an extend to a shorter TTL renews at a third of the new one.
 *
 * A timer aborts the signal at the deadline even if no reply ever comes back (a
 * partition, a hung server), so the holder hears of the loss before the server can
 * grant the lock to anyone else; and every accessor the holder checks reads the
 * clock itself ({@link Lease.poll}), so a check made by a timer that ran before the
 * lease's own (after SIGSTOP and SIGCONT, a long synchronous stretch) says lost.
 *
 * What the deadline cannot cover: a holder whose own process stops between
 * checking and writing; a local clock that runs more than 10% slow against the
 * server's. Fencing tokens cover those.
 */
import { performance } from "node:perf_hooks";

import { LockLostError, type LossReason } from "./errors.js";
import { margin, period } from "./protocol.js";
import { type Timer, later } from "./timers.js";

/** Monotonic milliseconds. */
export const now = (): number => performance.now();

/** One write that sets the holding's expiry: an acquire, a renewal, an extend. */
export interface Write {
  /** When it was sent (before the first byte left). */
  readonly sent: number;
  /** Its TTL in ms (a `number`: above 2^53 the nearest double, which the margin of
   * 10% dwarfs). */
  readonly ttl: number;
  /** When its reply (1) arrived; undefined while none did. */
  answered?: number;
  /** No reply will be read: it may still reach the server. */
  abandoned?: boolean;
}

/**
 * The writes of one holding and what they allow: the deadline and when the next
 * renewal is due. Pure (the caller gives the time), so the rule is tested alone.
 */
export class Writes {
  /** V: the acknowledged write sent last. */
  private latest: Write;
  /** Writes that may be applied after V: in flight, answered after V was sent,
   * or given up on and sent after V. */
  private open = new Set<Write>();
  /** The least TTL of the writes given up on and sent before V, which count from
   * s_V for the life of the holding (Infinity: none). */
  private abandonedTtl = Infinity;

  constructor(granted: Write) {
    this.latest = granted;
  }

  /** The acknowledged write sent last. */
  get last(): Write {
    return this.latest;
  }

  /** A write is on its way at `at`. */
  send(ttl: number, at: number): Write {
    const write: Write = { sent: at, ttl };
    this.open.add(write);
    return write;
  }

  /** `write` was answered 1 at `at`. */
  applied(write: Write, at: number): void {
    write.answered = at;
    if (write.sent > this.latest.sent) {
      // The old V may have been applied after the new one, unless its reply came
      // before the new one was sent: settle() sorts that out.
      this.open.add(this.latest);
      this.open.delete(write);
      this.latest = write;
    }
    this.settle();
  }

  /** No reply to `write` will be read (a timeout, a lost connection). */
  abandoned(write: Write): void {
    write.abandoned = true;
    this.settle();
  }

  /** When the lease ends, as the rule says. */
  deadline(): number {
    return this.least((start, ttl) => start + ttl - margin(ttl));
  }

  /** When the next renewal is due: a third of the same TTL after the same start. */
  renewalDue(): number {
    return this.least((start, ttl) => start + period(ttl));
  }

  /** The TTL that bounds the lease now (T_min of the rule, for what is sent before V). */
  shortestTtl(): number {
    let ttl = Math.min(this.latest.ttl, this.abandonedTtl);
    for (const write of this.open) ttl = Math.min(ttl, write.ttl);
    return ttl;
  }

  private least(bound: (start: number, ttl: number) => number): number {
    const v = this.latest;
    let least = bound(v.sent, v.ttl);
    if (this.abandonedTtl < Infinity) least = Math.min(least, bound(v.sent, this.abandonedTtl));
    for (const write of this.open) least = Math.min(least, bound(Math.max(v.sent, write.sent), write.ttl));
    return least;
  }

  /** Forgets what can no longer be applied after V, and folds what is given up on
   * and sent before V into one TTL. */
  private settle(): void {
    const v = this.latest;
    for (const write of this.open) {
      if (write.answered !== undefined && write.answered <= v.sent) {
        this.open.delete(write); // known applied before V, so before any later V
      } else if (write.abandoned === true && write.sent <= v.sent) {
        this.abandonedTtl = Math.min(this.abandonedTtl, write.ttl);
        this.open.delete(write);
      }
    }
  }
}

export class Lease {
  /** The TTL of the last write the holder asked for (a renewal asks for it again). */
  ttl: number;
  validUntil: number;
  lastError: unknown;
  /** Why it ended, once it did. */
  ended: LossReason | undefined;
  private readonly writes: Writes;
  // The signal and its reason are made when first asked for (or at a loss): an
  // AbortController and its abort cost more than the rest of a short holding.
  private controller: AbortController | undefined;
  private error: LockLostError | undefined;
  private timer: Timer | undefined;

  /** A lease from the write that granted the lock, sent at `sent` with `ttl`. Its
   * timer starts with {@link start}, once the caller can hear of its end. */
  constructor(
    sent: number,
    ttl: number,
    private readonly loss: (why: LossReason, lastError: unknown) => LockLostError,
    private readonly onEnd: (why: LossReason) => void,
  ) {
    this.ttl = ttl;
    this.writes = new Writes({ sent, ttl, answered: sent });
    this.validUntil = this.writes.deadline();
  }

  /** Arms the deadline's timer (a lease that ended at once ends on the next turn of
   * the timers, after the acquire that made it returned). */
  start(): void {
    this.arm();
  }

  /** Ends the lease if its deadline has passed: every accessor the holder checks
   * calls it, so a check reads the clock, whichever timer ran first. */
  poll(): void {
    if (this.ended === undefined && now() >= this.validUntil) this.end("expired");
  }

  get lost(): boolean {
    this.poll();
    return this.ended !== undefined;
  }

  /** Aborted, with {@link reason}, once the lease ended (read the clock first). */
  get signal(): AbortSignal {
    this.poll();
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
    return this.lost ? 0 : Math.max(this.validUntil - now(), 0);
  }

  /** When the next renewal is due. */
  renewalDue(): number {
    return this.writes.renewalDue();
  }

  /** The TTL that bounds the lease now. */
  shortestTtl(): number {
    return this.writes.shortestTtl();
  }

  /** An extend with `ttl` (a renewal, or the holder's own) is sent now: a shorter
   * TTL than the lease's shortens it at once (it may be applied any time). */
  send(ttl: number): Write {
    const write = this.writes.send(ttl, now());
    this.update();
    return write;
  }

  /**
   * `write` was answered 1. A reply to an older write than the one the lease counts
   * from moves nothing on (it may shorten it), and one that comes after the lease
   * ran out changes nothing: once lost, a lock stays lost, so the work that stopped
   * for it was right to. True while the lease holds.
   */
  applied(write: Write): boolean {
    if (this.lost) return false;
    if (write.sent >= this.writes.last.sent) this.lastError = undefined;
    this.writes.applied(write, now());
    this.update();
    return this.ended === undefined;
  }

  /** No reply to `write` will be read: it stays among those that may come last. */
  abandoned(write: Write): void {
    this.writes.abandoned(write);
    if (this.ended === undefined) this.update();
  }

  /** Ends the lease for `why`, with `error` as the reason's cause, unless it ended
   * already (a fenced write refused after a release or a lapse changes nothing). */
  endWith(why: LossReason, error: unknown): void {
    if (this.ended !== undefined) return;
    this.lastError = error;
    this.end(why);
  }

  /** Ends the lease: the first reason given stays. */
  end(why: LossReason): void {
    if (this.ended !== undefined) return;
    this.ended = why;
    this.timer?.clear();
    this.controller?.abort(this.reason());
    this.onEnd(why);
  }

  /** Stops the timer without signalling (the lock was released: the caller ends it). */
  dispose(): void {
    this.timer?.clear();
  }

  private update(): void {
    this.validUntil = this.writes.deadline();
    if (this.ended !== undefined) return;
    if (now() >= this.validUntil) this.end("expired");
    else this.arm();
  }

  /** The deadline's timer, unref'ed: a lease never keeps the process alive. A timer
   * can fire a little early (whole milliseconds): it is armed again then. */
  private arm(): void {
    this.timer?.clear();
    if (this.ended !== undefined) return;
    this.timer = later(
      this.validUntil - now(),
      () => {
        if (now() >= this.validUntil) this.end("expired");
        else this.arm();
      },
      true,
    );
  }
}
