/**
 * An acquire, on any backend:
 * - no wait: `LOCK.ACQUIRE` or `lock_acquire`, answered at once, on the command
 *   connection; a lost reply is asked again as the same owner, who gets the same
 *   token back if the lost try won; an abort while the call is on its way withdraws
 *   what it may have been granted (a release behind it, on the same connection);
 * - the module with a wait: `LOCK.ACQUIRE … WAIT ms`, one command that blocks in the
 *   server, on a dedicated connection;
 * - the library with a wait, the protocol of docs/PROTOCOL.md: `lock_wait` (a place
 *   in the queue, or the lock), `BLPOP` on the waiter's grant list until the
 *   `wake_ms` it named, again, until granted or the deadline, when `lock_cancel`
 *   gives the place up.
 *
 * Every step has a bound. A module wait's is the wait's end plus
 * {@link WAIT_MARGIN_MS} (a wait without limit there is one call the server answers).
 * On the library each step has its own (`lock_wait` {@link CONTROL_LIMIT_MS}, `BLPOP`
 * its block plus the margin), never past the wait's end plus the margin: a hung
 * server or a dead path ends even a wait without limit, as its place lapses
 * unrenewed in the server. A wait cut short (a timeout, a lost connection, the
 * caller's signal) is withdrawn before the promise settles: the dedicated connection
 * is destroyed (the module drops a waiter that disconnects; destroyed, not ended, so
 * that the withdrawal cannot reach the server before the close does and a release
 * grant the waiter still connected), the library's place cancelled, and a grant that
 * crossed released when the owner is one this client made up (nobody else can know
 * it).
 */
import { type CallOptions, bounded, call, isServerError } from "./calls.js";
import type { Connection } from "./connection.js";
import { CommandTimeoutError, UnexpectedReplyError, WaitUnansweredError } from "./errors.js";
import { now } from "./lease.js";
import {
  CONTROL_LIMIT_MS,
  RELEASE_LIMIT_MS,
  WITHDRAW_AFTER_TIMEOUT_MS,
  type Backend,
  type Mode,
  type Span,
  WAIT_MARGIN_MS,
  blpopSeconds,
  flag,
  integer,
  margin,
  modeArgs,
  text,
  tokenOrNull,
} from "./protocol.js";

const COMMAND_LIMIT_MS = CONTROL_LIMIT_MS;

export interface Request {
  key: string;
  owner: string;
  /** The owner was given by the caller (so others may know it: never released
   * behind the caller's back). */
  ownerGiven: boolean;
  ttl: Span;
  mode: Mode;
  /** Up to this long in the queue; "none": answered at once; "forever": without limit. */
  wait: Span | "none" | "forever";
  signal?: AbortSignal | undefined;
}

export interface Grant {
  token: bigint;
  /** When the call that granted (or last refreshed) the holding was sent. */
  sent: number;
}

/** What an acquire needs from the `Locks` that runs it. */
export interface Channels {
  command(): Promise<Connection>;
  /** A dedicated connection for a wait on `key`. */
  dedicated(key: string): Promise<Connection>;
  /** Gives back a dedicated connection whose wait ended cleanly. */
  reuse(connection: Connection): void;
}

export async function acquire(channels: Channels, backend: Backend, request: Request): Promise<Grant | null> {
  const base = [request.owner, request.ttl.text, ...modeArgs(request.mode)];
  request.signal?.throwIfAborted();
  if (request.wait === "none") return tryOnce(channels, backend, request, base);
  if (backend === "module") return moduleWait(channels, request, base);
  return libraryWait(channels, backend, request, base);
}

async function tryOnce(channels: Channels, backend: Backend, request: Request, args: string[]): Promise<Grant | null> {
  const connection = await channels.command();
  for (let attempt = 0; ; attempt++) {
    // Aborted before the call left: there is nothing to withdraw.
    request.signal?.throwIfAborted();
    const sent = now();
    try {
      const reply = await call(connection, backend, "lock_acquire", request.key, args, {
        limitMs: COMMAND_LIMIT_MS,
        signal: request.signal,
      });
      const token = tokenOrNull(reply, "acquire");
      return token === null ? null : { token, sent };
    } catch (error) {
      if (request.signal?.aborted === true) {
        // Aborted while the call was on its way: the server may still grant it. The
        // release follows it on the same connection, so it comes after.
        await withdraw(channels, backend, request, false, RELEASE_LIMIT_MS);
        throw request.signal.reason;
      }
      if (isServerError(error)) throw error;
      if (attempt === 0) continue; // a lost reply: ask again as the same owner
      await withdraw(channels, backend, request, false, WITHDRAW_AFTER_TIMEOUT_MS);
      throw error;
    }
  }
}

/** How long a timed wait's answer may take: the wait and the margin. */
function waitBound(request: Request): number | undefined {
  return typeof request.wait === "string" ? undefined : request.wait.ms + WAIT_MARGIN_MS;
}

async function moduleWait(channels: Channels, request: Request, args: string[]): Promise<Grant | null> {
  const waitArg = typeof request.wait === "string" ? "0" : request.wait.text;
  const connection = await channels.dedicated(request.key);
  const sent = now();
  let reply: unknown;
  try {
    reply = await call(connection, "module", "lock_acquire", request.key, [...args, "WAIT", waitArg], {
      limitMs: waitBound(request),
      signal: request.signal,
      onGiveUp: () => connection.close(),
    });
  } catch (error) {
    connection.close();
    throw await cutShort(channels, "module", request, error, false);
  }
  channels.reuse(connection);
  const token = tokenOrNull(reply, "acquire");
  if (token === null) return null;
  // Granted after a wait: the server counts the TTL from the grant, the lease from
  // the send. A prompt extend brings the lease up to date; if it fails, the shorter
  // lease stays.
  if (now() - sent > margin(request.ttl.ms)) {
    const again = now();
    try {
      const command = await channels.command();
      const extended = await call(command, "module", "lock_extend", request.key, [request.owner, request.ttl.text], {
        limitMs: RELEASE_LIMIT_MS,
      });
      if (flag(extended, "extend")) return { token, sent: again };
    } catch {
      // the lease from the acquire's send stays
    }
  }
  return { token, sent };
}

async function libraryWait(
  channels: Channels,
  backend: Backend,
  request: Request,
  args: string[],
): Promise<Grant | null> {
  const deadline = typeof request.wait === "string" ? undefined : now() + request.wait.ms;
  const connection = await channels.dedicated(request.key);
  // The step under way and its bound; `own`: its own, shorter than the wait's.
  let step = { command: "lock_wait", limitMs: CONTROL_LIMIT_MS, own: true };
  const options = (command: string, ownMs: number): CallOptions => {
    const waitLeft = deadline === undefined ? Infinity : Math.max(deadline + WAIT_MARGIN_MS - now(), 10);
    step = { command, limitMs: Math.min(ownMs, waitLeft), own: ownMs < waitLeft };
    return { limitMs: step.limitMs, signal: request.signal, onGiveUp: () => connection.close() };
  };
  try {
    for (;;) {
      const sent = now();
      const reply = await call(connection, backend, "lock_wait", request.key, args, options("lock_wait", COMMAND_LIMIT_MS));
      if (!Array.isArray(reply) || reply.length < 3) {
        throw new UnexpectedReplyError(`lock_wait: expected [token, wake_ms, list], got ${String(reply)}`);
      }
      const token = integer(reply[0], "lock_wait token");
      if (token > 0n) {
        channels.reuse(connection);
        return { token, sent };
      }
      let block = Math.max(Number(integer(reply[1], "lock_wait wake_ms")), 1);
      if (deadline !== undefined) {
        const left = deadline - now();
        if (left <= 0) {
          // Leaves the queue, and ends a grant pushed but not collected.
          await call(connection, backend, "lock_cancel", request.key, [request.owner], {
            limitMs: RELEASE_LIMIT_MS,
            onGiveUp: () => connection.close(),
          });
          channels.reuse(connection);
          return null;
        }
        block = Math.min(block, left);
      }
      // Whatever BLPOP returns (a token, a wake-up, nothing), the next lock_wait says
      // whether the owner holds: the popped value is not trusted alone.
      const list = text(reply[2]);
      const o = options("BLPOP", block + WAIT_MARGIN_MS);
      await bounded(connection, ["BLPOP", list, blpopSeconds(block)], request.key, o.limitMs, o.signal, o.onGiveUp);
    }
  } catch (error) {
    connection.close();
    const unanswered =
      error instanceof CommandTimeoutError && step.own
        ? new WaitUnansweredError(request.key, waitMs(request), WAIT_MARGIN_MS, {
            command: step.command,
            limitMs: step.limitMs,
          })
        : error;
    throw await cutShort(channels, backend, request, unanswered, true);
  }
}

/** The wait's length for messages: Infinity for one without limit. */
function waitMs(request: Request): number {
  return typeof request.wait === "string" ? Infinity : request.wait.ms;
}

/** Withdraws a request cut short by `error` and says why it ended: the caller's
 * abort reason, a {@link WaitUnansweredError} for a wait nobody answered, or the
 * error itself. */
async function cutShort(
  channels: Channels,
  backend: Backend,
  request: Request,
  error: unknown,
  placed: boolean,
): Promise<unknown> {
  const timedOut = error instanceof CommandTimeoutError || error instanceof WaitUnansweredError;
  await withdraw(channels, backend, request, placed, timedOut ? WITHDRAW_AFTER_TIMEOUT_MS : RELEASE_LIMIT_MS);
  if (request.signal?.aborted === true) return request.signal.reason;
  if (error instanceof CommandTimeoutError && typeof request.wait !== "string") {
    return new WaitUnansweredError(request.key, request.wait.ms, WAIT_MARGIN_MS);
  }
  return error;
}

/** Takes back what a cut-short request may have left: its queue place and a grant
 * not collected (`lock_cancel`, library only), and, for an owner nobody else knows,
 * a grant already made. Both are sent at once, in that order on one connection, each
 * within `limitMs`, so one that goes unanswered does not keep the other back.
 * Errors are swallowed: what is left lapses with its lease. */
async function withdraw(
  channels: Channels,
  backend: Backend,
  request: Request,
  placed: boolean,
  limitMs: number,
): Promise<void> {
  try {
    const connection = await channels.command();
    const calls: Promise<unknown>[] = [];
    if (placed) calls.push(call(connection, backend, "lock_cancel", request.key, [request.owner], { limitMs }));
    if (!request.ownerGiven) {
      calls.push(call(connection, backend, "lock_release", request.key, [request.owner], { limitMs }));
    }
    await Promise.allSettled(calls);
  } catch {
    // no connection: what is left lapses within its lease
  }
}
