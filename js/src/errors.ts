/**
 * The errors this package throws, each a subclass of {@link LockError}. A server's
 * own error replies (`ERR …`, `WRONGTYPE …`, `NOPERM …`) reach the caller as the
 * Redis client's error, unchanged.
 */

/** The base class of every error this package makes. */
export class LockError extends Error {
  override name = "LockError";
}

/** Why a lock was lost, as {@link LockLostError.why} says. */
export type LossReason =
  /** A renewal was answered 0: the server no longer holds it for this owner (it
   * expired there, was deleted, or another owner holds it now). */
  | "refused"
  /** No renewal was acknowledged before the lease's local deadline. */
  | "expired"
  /** A write fenced with its token was refused ({@link FencedError}, in `cause`):
   * the server no longer holds the lock with that token (`lock.guard`), or a holder
   * with a greater token has written to the fenced resource (`lock.fencePostgres`). */
  | "fenced"
  /** The holder released it (or its `using` routine ended). */
  | "released";

/**
 * The reason of an aborted `lock.signal`: the lock is lost, or soon may be, so the
 * work under it must stop. `why` says how the client found out; `lastError` (and the
 * standard `cause`) is the last renewal's failure, when one failed, or the
 * {@link FencedError} of a refused fenced write.
 */
export class LockLostError extends LockError {
  override name = "LockLostError";
  constructor(
    readonly key: string,
    readonly owner: string,
    readonly token: bigint,
    readonly why: LossReason,
    readonly lastError?: unknown,
  ) {
    // No stack: it would show the timer or the reply that found the loss, not the
    // holder's code, and a release makes one every time (the signal's reason).
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(lossText(key, why, lastError), lastError === undefined ? undefined : { cause: lastError });
    Error.stackTraceLimit = limit;
  }
}

function lossText(key: string, why: LossReason, lastError: unknown): string {
  switch (why) {
    case "refused":
      return `lock ${key} lost: a renewal was answered 0, the server no longer holds it for this owner`;
    case "released":
      return `lock ${key} was released`;
    case "fenced": {
      const refusal = lastError instanceof FencedError ? lastError.refusal : describe(lastError);
      return `lock ${key} lost: a write fenced with its token was refused: ${refusal}`;
    }
    case "expired": {
      const last = lastError === undefined ? "" : `; the last renewal failed: ${describe(lastError)}`;
      return `lock ${key} lost: no renewal was acknowledged before the lease's deadline${last}`;
    }
  }
}

/** An error's message, or the value as text. */
export function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * A wait got no answer within its timeout plus {@link WAIT_MARGIN_MS}, or, on the
 * library, one step of its waiting protocol (`lock_wait`, `BLPOP`) got none within
 * that step's bound (`step`): the server hangs or the network drops everything. The
 * client withdrew the request (closed the waiting connection, cancelled its place,
 * released a grant that crossed). `waitMs` is Infinity for a wait without limit.
 */
export class WaitUnansweredError extends LockError {
  override name = "WaitUnansweredError";
  constructor(
    readonly key: string,
    readonly waitMs: number,
    readonly marginMs: number,
    readonly step?: { readonly command: string; readonly limitMs: number },
  ) {
    const wait = Number.isFinite(waitMs) ? `its ${waitMs} ms` : "no time limit";
    super(
      step === undefined
        ? `no answer to the wait for lock ${key} within its ${waitMs} ms and the ${marginMs} ms margin: the server hangs or the network is cut; the request was withdrawn`
        : `no answer to the wait for lock ${key} (${wait}): ${step.command} got none within ${Math.round(step.limitMs)} ms, that step's bound: the server hangs or the network is cut; the request was withdrawn`,
    );
  }
}

/** A command got no answer within the client's bound for it (`note` says what that
 * means for it, where it matters: a guarded write may have run). */
export class CommandTimeoutError extends LockError {
  override name = "CommandTimeoutError";
  constructor(
    readonly command: string,
    readonly limitMs: number,
    note?: string,
  ) {
    super(`${command}: no reply within ${Math.round(limitMs)} ms${note === undefined ? "" : `: ${note}`}`);
  }
}

/** The server has none of the backends (module, library, scripts) this client can use. */
export class NoBackendError extends LockError {
  override name = "NoBackendError";
  constructor(readonly reasons: string) {
    super(
      `the server offers no redis-lock backend (${reasons}): load the module (loadmodule libredis_lock.so), or the library (redis-lock functions load, or locks.loadLibrary()), or allow EVALSHA and SCRIPT LOAD`,
    );
  }
}

/**
 * The server's `redislock` library has a version this client does not speak, or
 * lacks a call this client makes (`lacks`: `lock_guard`, in a library of version 3
 * loaded before that call came).
 */
export class LibraryVersionError extends LockError {
  override name = "LibraryVersionError";
  constructor(
    readonly found: number,
    readonly min: number,
    readonly max: number,
    readonly lacks?: string,
  ) {
    super(
      lacks === undefined
        ? `the server's redislock library is version ${found}; this client speaks versions ${min} to ${max}: load the library this client carries (locks.loadLibrary()) or upgrade the client`
        : `the server's redislock library (version ${found}) has no ${lacks}: it was loaded before ${lacks} existed; load the library of this release (locks.loadLibrary(), or redis-lock functions load)`,
    );
  }
}

/**
 * A write fenced with a lock's token was refused, and nothing was written. In Redis
 * (`lock.guard`): the server no longer holds the lock with that token (it lapsed, was
 * released or deleted, or another holder has it); `cause` is the server's `FENCED`
 * reply. In PostgreSQL (`lock.fencePostgres`, `fencePostgres`): a holder with a
 * greater token has written to the resource; roll the transaction back. Either way a
 * newer holder may exist: stop the work. A {@link Lock} whose write was fenced is
 * lost at once (its signal aborted with a {@link LockLostError} whose `why` is
 * `"fenced"`).
 */
export class FencedError extends LockError {
  override name = "FencedError";
  constructor(
    /** The lock's key (Redis) or the fenced resource (PostgreSQL). */
    readonly key: string,
    /** The token that was refused. */
    readonly token: bigint,
    /** Where the write was refused. */
    readonly store: "redis" | "postgresql",
    cause?: unknown,
  ) {
    const refusal =
      store === "redis"
        ? describe(cause)
        : `the PostgreSQL fence of ${JSON.stringify(key)} refused token ${token}: a holder with a greater token has written to it`;
    super(
      store === "redis"
        ? `lock ${key}: the guarded write was refused and did not run (${refusal}): the lock is lost, a newer holder may have it; stop the work`
        : `${refusal}; roll the transaction back and stop the work`,
      cause === undefined ? undefined : { cause },
    );
    this.refusal = refusal;
  }

  /** Why, in a few words: the server's `FENCED …` reply, or what the PostgreSQL
   * fence said. */
  readonly refusal: string;
}

/** A reply that is not what the protocol says, or an integer past 2^53 that the
 * Redis client turned into an inexact `number` (node-redis 4). */
export class UnexpectedReplyError extends LockError {
  override name = "UnexpectedReplyError";
}
