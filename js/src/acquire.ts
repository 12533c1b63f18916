/**
 * An acquire, on any backend:
 * - no wait: `LOCK.ACQUIRE` or `lock_acquire`, answered at once, on the command
 *   connection; a lost reply is asked again as the same owner, who gets the same
 *   token back if the lost try won;
 * - the module with a wait: `LOCK.ACQUIRE … WAIT ms`, one command that blocks in the
 *   server, on a dedicated connection;
 * - the library with a wait, the protocol of docs/PROTOCOL.md: `lock_wait` (a place
 *   in the queue, or the lock), `BLPOP` on the waiter's grant list until the
 *   `wake_ms` it named, again, until granted or the deadline, when `lock_cancel`
 *   gives the place up.
 *
 * Every step of a timed wait is bounded by the wait's end plus {@link WAIT_MARGIN_MS},
 * so a hung server cannot stretch it. A wait cut short (a timeout, a lost connection,
 * the caller's signal) is withdrawn before the promise settles: the dedicated
 * connection is closed (the module drops a waiter that disconnects), the library's
 * place cancelled, and a grant that crossed released when the owner is one this
 * client made up (nobody else can know it).
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
  WAIT_MARGIN_MS,
  blpopSeconds,
  flag,
  integer,
  margin,
  modeArgs,
  text,
  tokenOrNull,
  ttlArg,
} from "./protocol.js";

const COMMAND_LIMIT_MS = CONTROL_LIMIT_MS;

export interface Request {
  key: string;
  owner: string;
  /** The owner was given by the caller (so others may know it: never released
   * behind the caller's back). */
  ownerGiven: boolean;
  ttl: number;
  mode: Mode;
  /** 0: no wait; Infinity: without limit. */
  wait: number;
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
  const ttl = ttlArg(request.ttl);
  const base = [request.owner, ttl, ...modeArgs(request.mode)];
  request.signal?.throwIfAborted();
  if (request.wait === 0) return tryOnce(channels, backend, request, base);
  if (backend === "module") return moduleWait(channels, request, base);
  return libraryWait(channels, backend, request, base);
}

async function tryOnce(channels: Channels, backend: Backend, request: Request, args: string[]): Promise<Grant | null> {
  const connection = await channels.command();
  for (let attempt = 0; ; attempt++) {
    const sent = now();
    try {
      const reply = await call(connection, backend, "lock_acquire", request.key, args, {
        limitMs: COMMAND_LIMIT_MS,
        signal: request.signal,
      });
      const token = tokenOrNull(reply, "acquire");
      return token === null ? null : { token, sent };
    } catch (error) {
      if (isServerError(error) || request.signal?.aborted === true) throw error;
      if (attempt === 0) continue; // a lost reply: ask again as the same owner
      await withdraw(channels, backend, request, false, WITHDRAW_AFTER_TIMEOUT_MS);
      throw error;
    }
  }
}

function waitBound(request: Request): number | undefined {
  return Number.isFinite(request.wait) ? request.wait + WAIT_MARGIN_MS : undefined;
}

async function moduleWait(channels: Channels, request: Request, args: string[]): Promise<Grant | null> {
  const waitMs = Number.isFinite(request.wait) ? ttlArg(request.wait, "wait") : "0";
  const connection = await channels.dedicated(request.key);
  const sent = now();
  let reply: unknown;
  try {
    reply = await call(connection, "module", "lock_acquire", request.key, [...args, "WAIT", waitMs], {
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
  if (now() - sent > margin(request.ttl)) {
    const again = now();
    try {
      const command = await channels.command();
      const extended = await call(command, "module", "lock_extend", request.key, [request.owner, ttlArg(request.ttl)], {
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
  const deadline = Number.isFinite(request.wait) ? now() + request.wait : undefined;
  const bound = (): number | undefined =>
    deadline === undefined ? undefined : Math.max(deadline + WAIT_MARGIN_MS - now(), 10);
  const connection = await channels.dedicated(request.key);
  const options = (): CallOptions => ({
    limitMs: bound(),
    signal: request.signal,
    onGiveUp: () => connection.close(),
  });
  try {
    for (;;) {
      const sent = now();
      const reply = await call(connection, backend, "lock_wait", request.key, args, options());
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
      const o = options();
      await bounded(connection, ["BLPOP", list, blpopSeconds(block)], request.key, o.limitMs, o.signal, o.onGiveUp);
    }
  } catch (error) {
    connection.close();
    throw await cutShort(channels, backend, request, error, true);
  }
}

/** Withdraws a request cut short by `error` and says why it ended: the caller's
 * abort reason, a {@link WaitUnansweredError} for a timed wait nobody answered, or
 * the error itself. */
async function cutShort(
  channels: Channels,
  backend: Backend,
  request: Request,
  error: unknown,
  placed: boolean,
): Promise<unknown> {
  const timedOut = error instanceof CommandTimeoutError;
  await withdraw(channels, backend, request, placed, timedOut ? WITHDRAW_AFTER_TIMEOUT_MS : RELEASE_LIMIT_MS);
  if (request.signal?.aborted === true) return request.signal.reason;
  if (timedOut && Number.isFinite(request.wait)) {
    return new WaitUnansweredError(request.key, request.wait, WAIT_MARGIN_MS);
  }
  return error;
}

/** Takes back what a cut-short request may have left: its queue place and a grant
 * not collected (`lock_cancel`, library only), and, for an owner nobody else knows,
 * a grant already made. Errors are swallowed: what is left lapses with its lease. */
async function withdraw(
  channels: Channels,
  backend: Backend,
  request: Request,
  placed: boolean,
  limitMs: number,
): Promise<void> {
  try {
    const connection = await channels.command();
    if (placed) {
      await call(connection, backend, "lock_cancel", request.key, [request.owner], { limitMs });
    }
    if (!request.ownerGiven) {
      await call(connection, backend, "lock_release", request.key, [request.owner], { limitMs });
    }
  } catch {
    // lapses within its lease
  }
}
