/**
 * Sending the protocol's calls: each bounded in time, `NOSCRIPT` handled on the
 * scripts backend, and which backend a server offers.
 */
import type { Arg, Connection } from "./connection.js";
import { CommandTimeoutError, NoBackendError, UnexpectedReplyError, describe } from "./errors.js";
import { LIBRARY_SOURCE, SCRIPT_SHA } from "./generated.js";
import { type Backend, CONTROL_LIMIT_MS, type LibraryCall, checkVersion, command, integer } from "./protocol.js";
import { type Timer, later } from "./timers.js";

/** The library as `SCRIPT LOAD` takes it: without its `#!lua` line, which Lua 5.1
 * cannot parse (docs/PROTOCOL.md, "Loading"). */
export const LIBRARY_SCRIPT = LIBRARY_SOURCE.startsWith("#!")
  ? LIBRARY_SOURCE.slice(LIBRARY_SOURCE.indexOf("\n") + 1)
  : LIBRARY_SOURCE;

export { LIBRARY_SOURCE, SCRIPT_SHA };

/** A server's error reply (as opposed to a lost connection or a timeout). */
export function isServerError(error: unknown): error is Error {
  if (!(error instanceof Error)) return false;
  if (["ReplyError", "ErrorReply", "SimpleError", "BlobError"].includes(error.constructor.name)) return true;
  return /^[A-Z][A-Z_]+ /.test(error.message) && !(error instanceof CommandTimeoutError);
}

export function isNoScript(error: unknown): boolean {
  return isServerError(error) && error.message.startsWith("NOSCRIPT");
}

/** The library is gone from the server (a restart without persistence, FUNCTION
 * FLUSH): the functions backend is dead, the scripts backend is not. */
export function isFunctionMissing(error: unknown): boolean {
  return isServerError(error) && /^ERR Function not found/i.test(error.message);
}

/** `send` on `connection`, rejected after `limitMs` (none: unbounded; any length,
 * through {@link later}) or when `signal` aborts; `onGiveUp` runs then (it closes a
 * dedicated connection, whose reply would otherwise come to nobody). */
export function bounded(
  connection: Connection,
  args: readonly Arg[],
  key: string | undefined,
  limitMs: number | undefined,
  signal?: AbortSignal,
  onGiveUp?: () => void,
): Promise<unknown> {
  if (limitMs === undefined && signal === undefined) return connection.send(args, key);
  return new Promise((resolve, reject) => {
    let timer: Timer | undefined;
    const finish = (): void => {
      timer?.clear();
      signal?.removeEventListener("abort", aborted);
    };
    const aborted = (): void => {
      finish();
      onGiveUp?.();
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the caller's own reason
      reject(signal?.reason);
    };
    if (signal?.aborted) {
      aborted();
      return;
    }
    signal?.addEventListener("abort", aborted, { once: true });
    if (limitMs !== undefined) {
      timer = later(Math.max(limitMs, 1), () => {
        finish();
        onGiveUp?.();
        reject(new CommandTimeoutError(commandName(args), limitMs));
      });
    }
    connection.send(args, key).then(
      (reply) => {
        finish();
        resolve(reply);
      },
      (error: unknown) => {
        finish();
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the client's error as it is
        reject(error);
      },
    );
  });
}

/** A command's name for messages: the library call's name after FCALL or EVALSHA
 * (`EVALSHA sha numkeys key... name`). */
function commandName(args: readonly Arg[]): string {
  const [name, second, numkeys] = [args[0] ?? "", args[1] ?? "", args[2] ?? "0"].map(String);
  if (name?.startsWith("FCALL") === true) return `${name} ${second ?? ""}`;
  if (name === "EVALSHA") return `EVALSHA ${String(args[3 + Number(numkeys)] ?? "")}`;
  return name ?? "";
}

export interface CallOptions {
  limitMs?: number | undefined;
  signal?: AbortSignal | undefined;
  onGiveUp?: (() => void) | undefined;
}

/** Makes library call `call` on `backend`; on the scripts backend a `NOSCRIPT` (a
 * restart, `SCRIPT FLUSH`, a failover) loads the library on that node and sends the
 * call once more: the call did not run. */
export async function call(
  connection: Connection,
  backend: Backend,
  name: LibraryCall,
  key: string | undefined,
  args: readonly string[],
  options: CallOptions = {},
): Promise<unknown> {
  const words = command(backend, name, key, args);
  const send = (): Promise<unknown> =>
    bounded(connection, words, key, options.limitMs, options.signal, options.onGiveUp);
  try {
    return await send();
  } catch (error) {
    if (backend === "functions" && name !== "lock_version" && isWrongType(error)) {
      await refuseChangedLibrary(connection, key, options, error);
    }
    if (backend !== "scripts" || !isNoScript(error)) throw error;
  }
  await bounded(connection, ["SCRIPT", "LOAD", LIBRARY_SCRIPT], key, options.limitMs, options.signal, options.onGiveUp);
  return send();
}

function isWrongType(error: unknown): boolean {
  return isServerError(error) && error.message.startsWith("WRONGTYPE");
}

/** After `WRONGTYPE`: a library replaced under this client (an older one that cannot
 * read what this one stored, or a newer one) is named by its version
 * (docs/PROTOCOL.md, "Versions"), not taken for a key of another type. Returns when
 * the version is one this client accepts, and throws `original` when the version
 * cannot be asked. */
async function refuseChangedLibrary(
  connection: Connection,
  key: string | undefined,
  options: CallOptions,
  original: unknown,
): Promise<void> {
  let found: number;
  try {
    // Bounded even where the call was not (a wait): a dead server must not hold
    // the error up.
    const limitMs = Math.min(options.limitMs ?? CONTROL_LIMIT_MS, CONTROL_LIMIT_MS);
    const words = command("functions", "lock_version", undefined);
    const reply = await bounded(connection, words, key, limitMs, undefined, options.onGiveUp);
    found = Number(integer(reply, "lock_version"));
  } catch {
    throw original;
  }
  checkVersion(found);
}

function namesACommand(reply: unknown): boolean {
  if (Array.isArray(reply)) return reply.some((entry) => entry !== null && entry !== undefined);
  if (reply instanceof Map) return reply.size > 0;
  return typeof reply === "object" && reply !== null && Object.keys(reply).length > 0;
}

/**
 * Which backend the server offers: the module when `COMMAND INFO LOCK.ACQUIRE`
 * names it; else the library when `FCALL_RO lock_version 0` answers (no `FUNCTION
 * LIST`, which restrictive ACLs refuse); else the library as a script, when
 * `EVALSHA` (after a `SCRIPT LOAD`) answers `lock_version`. `forced` tries only that
 * one. A library of a version outside this client's range is refused.
 */
export async function detect(connection: Connection, forced: Backend | undefined, limitMs: number): Promise<Backend> {
  const reasons: string[] = [];
  const probe = async (args: string[]): Promise<unknown> => bounded(connection, args, undefined, limitMs);
  const refused = (what: string, error: unknown): void => {
    if (!isServerError(error)) throw error; // the next backend would fail alike
    reasons.push(`${what}: ${describe(error)}`);
  };
  if (forced === undefined || forced === "module") {
    try {
      if (namesACommand(await probe(["COMMAND", "INFO", "LOCK.ACQUIRE"]))) return "module";
      reasons.push("no module (no LOCK.ACQUIRE command)");
    } catch (error) {
      refused("COMMAND INFO refused", error);
    }
  }
  if (forced === undefined || forced === "functions") {
    try {
      checkVersion(Number(integer(await probe(command("functions", "lock_version", undefined)), "lock_version")));
      return "functions";
    } catch (error) {
      if (!isServerError(error)) throw error;
      reasons.push(`no redislock library: ${describe(error)}`);
    }
  }
  if (forced === undefined || forced === "scripts") {
    try {
      const version = await call(connection, "scripts", "lock_version", undefined, [], { limitMs });
      checkVersion(Number(integer(version, "lock_version")));
      return "scripts";
    } catch (error) {
      refused("scripts refused", error);
    }
  }
  throw new NoBackendError(reasons.join("; "));
}

/** `LOCK.INFO` (or `lock_info`) as an object, RESP2 or RESP3. */
export interface LockInfo {
  mode: "exclusive" | "shared";
  /** Clients waiting for the key. */
  waiters: number;
  holders: { owner: string; ttl: number; token: bigint; limit?: number }[];
}

function fields(reply: unknown): Map<string, unknown> {
  const out = new Map<string, unknown>();
  if (reply instanceof Map) {
    for (const [k, v] of reply) out.set(String(k), v);
  } else if (Array.isArray(reply)) {
    for (let i = 0; i + 1 < reply.length; i += 2) out.set(String(reply[i]), reply[i + 1]);
  } else if (typeof reply === "object" && reply !== null) {
    for (const [k, v] of Object.entries(reply)) out.set(k, v);
  } else {
    throw new UnexpectedReplyError(`lock info: expected a map, got ${String(reply)}`);
  }
  return out;
}

export function parseInfo(reply: unknown): LockInfo | null {
  if (reply === null || reply === undefined) return null;
  const info = fields(reply);
  const holders = ((info.get("holders") as unknown[] | undefined) ?? []).map((entry) => {
    const holding = fields(entry);
    const limit = holding.get("limit");
    return {
      owner: String(holding.get("owner")),
      ttl: Number(integer(holding.get("ttl") ?? 0, "ttl")),
      token: integer(holding.get("token") ?? 0, "token"),
      ...(limit === undefined || limit === null ? {} : { limit: Number(integer(limit, "limit")) }),
    };
  });
  return {
    mode: String(info.get("mode")) === "shared" ? "shared" : "exclusive",
    waiters: Number(integer(info.get("waiters") ?? 0, "waiters")),
    holders,
  };
}
