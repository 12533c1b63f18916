/**
 * Fenced writes in Redis (docs/contract.md, "Fenced writes"): a held lock's command,
 * run by the server only while the lock's token holds it, checked and run in one
 * step (`LOCK.GUARD key token command …` on the module, the library's `lock_guard`
 * with the command's keys declared). What `lock.guard` checks before it sends, how
 * it sends, and what the server's refusals mean; lock.ts holds the lock's side.
 */
import { LIBRARY_SCRIPT, bounded, isNoScript, isServerError } from "./calls.js";
import type { Arg, Connection } from "./connection.js";
import { CommandTimeoutError, FencedError, LockError } from "./errors.js";
import { now } from "./lease.js";
import { type Backend, guardCommand } from "./protocol.js";

/** An argument of a guarded command: text, bytes (sent as they are), or a number or
 * bigint (sent as its decimal text). */
export type GuardArg = string | Buffer | number | bigint;

/** A guarded write as checked: the data keys and the command's words. */
export interface GuardRequest {
  readonly keys: readonly Arg[];
  readonly words: readonly Arg[];
}

const EXAMPLE = 'lock.guard(["{job:1}:out"], "SET", "{job:1}:out", value)';

/** `keys`, `name` and `args` as sent, or a TypeError saying what was given, before
 * anything is sent. */
export function guardRequest(keys: unknown, name: unknown, args: readonly unknown[]): GuardRequest {
  if (!Array.isArray(keys)) {
    const given = typeof keys === "string" ? "one string" : describeValue(keys);
    throw new TypeError(`keys must be an array of the keys the command touches, not ${given}: ${EXAMPLE}`);
  }
  const declared = keys.map((key: unknown, i) => {
    if (typeof key === "string" || Buffer.isBuffer(key)) return key;
    throw new TypeError(`keys[${i}] must be a string or a Buffer, not ${describeValue(key)}`);
  });
  if (typeof name !== "string" || name.length === 0) {
    throw new TypeError(`a guarded write needs a command, a non-empty string, not ${describeValue(name)}: ${EXAMPLE}`);
  }
  const words: Arg[] = [name];
  args.forEach((arg, i) => words.push(word(arg, i)));
  return { keys: declared, words };
}

function word(arg: unknown, i: number): Arg {
  if (typeof arg === "string" || Buffer.isBuffer(arg)) return arg;
  if (typeof arg === "bigint") return arg.toString();
  if (typeof arg === "number" && Number.isFinite(arg)) return String(arg);
  throw new TypeError(
    `the guarded command's argument ${i + 1} must be a string, a Buffer, a finite number or a bigint, not ${describeValue(arg)}`,
  );
}

function describeValue(value: unknown): string {
  if (value === null) return "null";
  if (typeof value === "number") return String(value);
  if (typeof value === "object") return value.constructor?.name ?? "an object";
  return typeof value;
}

/** Sends the guarded write once, within `limitMs`. On the scripts backend a
 * `NOSCRIPT` (nothing ran) loads the library on that node, and the write is sent
 * again, in what is left of the bound. */
export async function sendGuard(
  connection: Connection,
  backend: Backend,
  key: string,
  token: bigint,
  request: GuardRequest,
  limitMs: number,
): Promise<unknown> {
  const words = guardCommand(backend, key, request.keys, token, request.words);
  const started = now();
  try {
    return await bounded(connection, words, key, limitMs);
  } catch (error) {
    if (backend !== "scripts" || !isNoScript(error)) throw error;
  }
  const left = (): number => Math.max(limitMs - (now() - started), 1);
  await bounded(connection, ["SCRIPT", "LOAD", LIBRARY_SCRIPT], key, left());
  return bounded(connection, words, key, left());
}

/** The scripts path's answer to a call it does not have: a library without
 * `lock_guard` (only a script of another release can say it: this client sends its
 * own). */
export function lacksGuard(error: unknown): boolean {
  return isServerError(error) && /^ERR unknown function 'lock_guard'/.test(error.message);
}

/**
 * What a guarded write that failed with `error` throws: a {@link FencedError} for
 * `FENCED` (the caller ends the lock), a `LockError` that says what to do for
 * `CROSSSLOT` and for a module without `LOCK.GUARD`, a {@link CommandTimeoutError}
 * that says the write may have run; anything else (the command's own error reply, a
 * lost connection) as it came.
 */
export function guardError(error: unknown, backend: Backend, key: string, token: bigint): unknown {
  if (error instanceof CommandTimeoutError) {
    return new CommandTimeoutError(
      `the guarded write under lock ${key} (${error.command})`,
      error.limitMs,
      "it may have run; it was not sent again",
    );
  }
  if (!isServerError(error)) return error;
  const text = error.message;
  if (text.startsWith("FENCED")) return new FencedError(key, token, "redis", error);
  if (text.startsWith("CROSSSLOT")) {
    return new LockError(
      `${text} (lock ${key}: the keys of a guarded write must be in the hash slot of the lock's key: give them its hash tag, as in ${sameSlotExample(key)})`,
      { cause: error },
    );
  }
  if (backend === "module" && /^ERR unknown command ['`]?lock\.guard/i.test(text)) {
    return new LockError(
      `the server's redis-lock module has no LOCK.GUARD: load the module of this release (fenced writes came with version 4 of its commands)`,
      { cause: error },
    );
  }
  return error;
}

/** A data key in the hash slot of lock `key`: with its hash tag, or the key itself
 * as the tag. */
export function sameSlotExample(key: string): string {
  const open = key.indexOf("{");
  const close = open >= 0 ? key.indexOf("}", open + 1) : -1;
  if (close > open + 1) return `${key.slice(open, close + 1)}:out beside the lock ${key}`;
  if (key.includes("{") || key.includes("}")) return "{job:1}:out beside a lock {job:1}";
  return `{${key}}:out beside the lock ${key}`;
}
