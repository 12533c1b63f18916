/**
 * Leader election on a lock (docs/contract.md "Leaders"): campaign in the server's FIFO queue,
 * lead while the lease holds, resign, and see who leads. The term is the holding's
 * fencing token; the leader's value lives in the election's record, a stream beside
 * the key in its hash slot, written only with the guard. One entry per change:
 * `<term>-0` when the term's leader takes office (field `value`), `<term>-1` when it
 * resigns. Ids grow with the terms, so an observer reading after the last id it saw
 * gets every leader once, in term order, from a blocking `XREAD`.
 */
import { bounded } from "./calls.js";
import type { Connection } from "./connection.js";
import { FencedError, LockLostError, UnexpectedReplyError } from "./errors.js";
import type { GuardArg } from "./guard.js";
import type { Lock } from "./lock.js";
import type { LockInfo } from "./calls.js";
import type { PostgresClient } from "./postgres.js";
import { CONTROL_LIMIT_MS, type Millis, span } from "./protocol.js";

/** Appended to a key with a hash tag; a key without one is wrapped as the tag. */
const RECORD_SUFFIX = ":leader";
/** Entries the record keeps (`XADD … MAXLEN = 16`). */
const RECORD_ENTRIES = 16;
/** The longest value a leader may publish, in bytes. */
export const MAX_LEADER_VALUE = 1024;
/** How long one observer read blocks: one call a second at most while idle. */
const OBSERVE_BLOCK_MS = 1000;

/** The leader of an election: its term (the fencing token of its holding; terms
 * only grow) and the value it published. */
export interface Leader {
  term: bigint;
  value: string;
}

/** What an election needs from the `Locks` that made it. */
export interface ElectionIo {
  acquire(key: string, ttl: Millis, signal: AbortSignal | undefined): Promise<Lock | null>;
  info(key: string): Promise<LockInfo | null>;
  command(): Promise<Connection>;
  dedicated(key: string): Promise<Connection>;
}

/** The hash tag of `key` as Redis Cluster reads it. */
function hashTag(key: string): string | undefined {
  const open = key.indexOf("{");
  if (open < 0) return undefined;
  const close = key.indexOf("}", open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : undefined;
}

/** The stream of the election at `key`, in `key`'s slot. */
export function recordKey(key: string): string {
  if (hashTag(key) !== undefined) return key + RECORD_SUFFIX;
  if (key.includes("}")) {
    throw new TypeError(
      `invalid election key ${JSON.stringify(key)}: without a hash tag it may not contain '}' (give it a tag, e.g. {jobs}:leader-lock)`,
    );
  }
  return `{${key}}${RECORD_SUFFIX}`;
}

/** What an entry id says. */
function entryOf(id: string): { kind: "leader" | "resigned" | "other"; term: bigint } {
  const match = /^(\d+)-([01])$/.exec(id);
  if (match === null) return { kind: "other", term: 0n };
  const term = BigInt(match[1] ?? "0");
  if (term <= 0n) return { kind: "other", term: 0n };
  return { kind: match[2] === "0" ? "leader" : "resigned", term };
}

interface Entry {
  id: string;
  fields: Map<string, string>;
}

function str(value: unknown): string {
  if (typeof value === "string") return value;
  if (Buffer.isBuffer(value)) return value.toString();
  return String(value);
}

function entries(reply: unknown): Entry[] {
  if (!Array.isArray(reply)) return [];
  return reply.map((item: unknown) => {
    const [id, raw] = Array.isArray(item) ? (item as unknown[]) : [];
    const fields = new Map<string, string>();
    if (Array.isArray(raw)) {
      for (let i = 0; i + 1 < raw.length; i += 2) fields.set(str(raw[i]), str(raw[i + 1]));
    } else if (raw !== null && typeof raw === "object") {
      for (const [name, value] of Object.entries(raw)) fields.set(name, str(value));
    }
    return { id: str(id), fields };
  });
}

/** The entries of an `XREAD` reply of one stream: RESP2 (`[[name, entries]]`),
 * RESP3 as a flat array (`[name, entries]`, the map as ioredis reads it), a `Map`
 * or an object, or node-redis' parsed shape. */
function streams(reply: unknown): Entry[] {
  if (reply instanceof Map) return [...reply.values()].flatMap((e) => entries(e));
  if (Array.isArray(reply) && reply.length % 2 === 0 && !Array.isArray(reply[0]) && (typeof reply[0] === "string" || Buffer.isBuffer(reply[0]))) {
    return reply.filter((_, i) => i % 2 === 1).flatMap((e) => entries(e));
  }
  if (Array.isArray(reply)) {
    return reply.flatMap((stream: unknown) => {
      if (Array.isArray(stream)) return entries(stream[1]);
      // node-redis v5 RESP2: { name, messages: [{ id, message }] }
      if (stream !== null && typeof stream === "object" && "messages" in stream) {
        const messages = (stream as { messages: { id: string; message: Record<string, string> }[] }).messages;
        return messages.map((m) => ({ id: m.id, fields: new Map(Object.entries(m.message)) }));
      }
      return [];
    });
  }
  if (reply !== null && typeof reply === "object") return Object.values(reply).flatMap((e) => entries(e));
  return [];
}

/**
 * This candidate leads: the election's lock, renewed in the background until
 * {@link Leadership.resign} (or `await using`); its `signal` aborts when it no
 * longer leads, before any other candidate can.
 */
export class Leadership implements AsyncDisposable {
  /** The value this leader published. */
  readonly value: string;
  private published = false;

  constructor(
    /** The lock held while leading. */
    readonly lock: Lock,
    private readonly election: Election,
    value: string,
  ) {
    this.value = value;
  }

  /** The term: this leadership's fencing token. */
  get term(): bigint {
    return this.lock.token;
  }

  /** Aborts when this candidate no longer leads; reads the clock when looked at. */
  get signal(): AbortSignal {
    return this.lock.signal;
  }

  /** A write fenced with the term ({@link Lock.guard}): rejects with a
   * {@link FencedError} once another candidate leads, and nothing is written. */
  guard(keys: readonly (string | Buffer)[], command: string, ...args: GuardArg[]): Promise<unknown> {
    return this.lock.guard(keys, command, ...args);
  }

  /** Fences a PostgreSQL transaction with the term ({@link Lock.fencePostgres}). */
  fencePostgres(client: PostgresClient, resource?: string): Promise<void> {
    return this.lock.fencePostgres(client, resource);
  }

  /** @internal */
  async publish(): Promise<void> {
    await this.recordWrite(`${this.term}-0`, ["value", this.value]);
    this.published = true;
  }

  /** Marks the record, stops renewing and releases: the next candidate in the
   * queue leads at once. `false` if leadership was lost already. */
  async resign(): Promise<boolean> {
    if (this.published && !this.lock.signal.aborted) {
      try {
        await this.recordWrite(`${this.term}-1`, ["resigned", "1"]);
      } catch (error) {
        if (!(error instanceof FencedError) && !(error instanceof LockLostError)) {
          await this.lock.release().catch(() => false);
          throw error;
        }
      }
    }
    this.published = false;
    return this.lock.release();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.resign().catch(() => false);
  }

  /** A guarded `XADD` of entry `id`; an id already there (a reply lost, the write
   * sent again) is the write done. */
  private async recordWrite(id: string, fields: string[]): Promise<void> {
    const record = this.election.recordKey;
    try {
      await this.lock.guard([record], "XADD", record, "MAXLEN", "=", String(RECORD_ENTRIES), id, ...fields);
    } catch (error) {
      if (!String(error).includes("equal or smaller than the target stream top")) throw error;
      const top = await this.election.top();
      if (top?.id !== id) throw error;
    }
  }
}

/** Options of {@link Election.runWhileLeader}. */
export interface RunWhileLeaderOptions {
  /** After a loss, campaign again instead of resolving `null`. */
  again?: boolean;
  /** Aborting it withdraws a campaign and aborts the routine's signal. */
  signal?: AbortSignal;
}

/**
 * Leader election at one key, with terms that fence: `locks.election(key, { ttl })`.
 *
 * ```ts
 * const election = locks.election("{scheduler}", { ttl: 10_000 });
 * await using leadership = await election.campaign("10.0.0.7:8080"); // waits in the queue
 * await lead({ signal: leadership.signal, term: leadership.term });
 * ```
 */
export class Election {
  /** The stream where leaders publish their values, in the key's slot. */
  readonly recordKey: string;

  /** @internal Made by `Locks.election`. */
  constructor(
    private readonly io: ElectionIo,
    readonly key: string,
    readonly ttl: Millis,
  ) {
    if (typeof key !== "string" || key.length === 0) throw new TypeError("an election key must be a non-empty string");
    this.recordKey = recordKey(key);
    span(ttl);
  }

  /**
   * Waits in the server's FIFO queue, without polling, until this candidate leads
   * (or `signal` aborts: the campaign is withdrawn), then publishes `value` (at most
   * 1 KiB) with a guarded write; the leadership renews in the background.
   */
  async campaign(value: string, options: { signal?: AbortSignal } = {}): Promise<Leadership> {
    if (typeof value !== "string") throw new TypeError("a leader's value must be a string");
    const size = Buffer.byteLength(value);
    if (size > MAX_LEADER_VALUE) throw new RangeError(`invalid value: ${size} bytes, at most ${MAX_LEADER_VALUE}`);
    for (;;) {
      const lock = await this.io.acquire(this.key, this.ttl, options.signal);
      if (lock === null) continue; // a wait without a limit answers with the lock
      const leadership = new Leadership(lock, this, value);
      try {
        await leadership.publish();
        return leadership;
      } catch (error) {
        await leadership.resign().catch(() => false);
        // Lost before it could publish (paused past its lease): campaign again.
        if (error instanceof FencedError || error instanceof LockLostError) continue;
        throw error;
      }
    }
  }

  /** The current leader, or `null` while nobody leads (free, not published yet, or
   * resigned). */
  async leader(): Promise<Leader | null> {
    // The lock, then the record: a record newer than the lock read means a new
    // leader came in between; read both again.
    for (let attempt = 0; attempt < 3; attempt++) {
      const info = await this.io.info(this.key);
      const holder = info?.mode === "exclusive" ? info.holders[0] : undefined;
      const term = holder === undefined ? 0n : BigInt(holder.token);
      const last = await this.top();
      if (last === undefined) return null;
      const { kind, term: published } = entryOf(last.id);
      if (kind === "leader" && published === term && term > 0n) {
        return { term, value: last.fields.get("value") ?? "" };
      }
      if (kind !== "other" && published > term) continue;
      return null;
    }
    return null;
  }

  /**
   * Every change of leader from now on, in term order, each once: the current
   * leader first, if there is one. Reads the record with a blocking `XREAD` on a
   * connection of its own (one call a second at most while nothing changes), never
   * by polling the lock. Ends when `signal` aborts (or the loop is left); a read
   * that fails (the server restarts, the network drops) is tried again a second
   * later from where it was, so none is missed.
   *
   * ```ts
   * for await (const leader of election.observe({ signal })) console.log(leader.term, leader.value);
   * ```
   */
  observe(options: { signal?: AbortSignal } = {}): LeaderObserver {
    return new LeaderObserver(this, this.io, options.signal);
  }
  /**
   * Campaigns with `value` and runs `routine` while leading: its signal aborts when
   * leadership is lost (before any rival can lead) or `options.signal` aborts. When
   * the routine settles while still leading, resigns and resolves its result. After
   * a loss, campaigns again if `options.again`, else resolves `null` (the routine's
   * own rejection after the loss is not reported).
   */
  async runWhileLeader<T>(
    value: string,
    routine: (leadership: Leadership, signal: AbortSignal) => Promise<T> | T,
    options: RunWhileLeaderOptions = {},
  ): Promise<T | null> {
    for (;;) {
      const leadership = await this.campaign(value, options.signal === undefined ? {} : { signal: options.signal });
      const signal = options.signal === undefined ? leadership.signal : AbortSignal.any([leadership.signal, options.signal]);
      let result: T;
      try {
        result = await Promise.race([
          Promise.resolve(routine(leadership, signal)),
          new Promise<never>((_, reject) => {
            const stop = (): void => {
              // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the signal's own reason
              reject(signal.reason);
            };
            if (signal.aborted) stop();
            else signal.addEventListener("abort", stop, { once: true });
          }),
        ]);
      } catch (error) {
        const lost = leadership.signal.aborted;
        await leadership.resign().catch(() => false);
        if (!lost || options.signal?.aborted === true) throw error;
        if (options.again === true) continue;
        return null;
      }
      await leadership.resign().catch(() => false);
      return result;
    }
  }

  /** @internal The record's newest entry. */
  async top(): Promise<Entry | undefined> {
    const connection = await this.io.command();
    const reply = await bounded(connection, ["XREVRANGE", this.recordKey, "+", "-", "COUNT", "1"], this.recordKey, CONTROL_LIMIT_MS);
    return entries(reply)[0];
  }
}




/**
 * The leaders of an {@link Election}, as {@link Election.observe} gives them: an
 * async iterator (`for await`), with {@link LeaderObserver.start} to observe from a
 * known point.
 */
export class LeaderObserver implements AsyncIterableIterator<Leader> {
  private after: string | undefined;
  private lastTerm = 0n;
  private readonly pending: Leader[] = [];
  private connection: Connection | undefined;
  private done = false;

  /** @internal Made by `Election.observe`. */
  constructor(
    private readonly election: Election,
    private readonly io: ElectionIo,
    private readonly signal: AbortSignal | undefined,
  ) {}

  [Symbol.asyncIterator](): LeaderObserver {
    return this;
  }

  /** Positions the observer now, if it was not yet: the first leader it gives is
   * the one leading at this moment, or the first to take office after it.
   * Iterating does this itself. */
  async start(): Promise<void> {
    if (this.after !== undefined) return;
    // The record's top first (the cursor), then the leader: one whose entry is at or
    // before the cursor is handed out now; one that took office in between is after
    // the cursor, and the first read hands it out.
    const last = await this.election.top();
    const current = await this.election.leader();
    if (this.after !== undefined) return;
    this.after = last?.id ?? "0-0";
    const head = this.after.split("-")[0] ?? "0";
    const cursorTerm = /^\d+$/.test(head) ? BigInt(head) : 0n;
    if (current !== null && current.term <= cursorTerm) {
      this.lastTerm = current.term;
      this.pending.push(current);
    }
  }

  async next(): Promise<IteratorResult<Leader, undefined>> {
    for (;;) {
      if (this.stopped()) return this.finish();
      const leader = this.pending.shift();
      if (leader !== undefined) return { done: false, value: leader };
      try {
        if (this.after === undefined) await this.start();
        else await this.read(this.after);
      } catch (error) {
        this.connection?.close();
        this.connection = undefined;
        if (this.stopped()) return this.finish();
        if (error instanceof UnexpectedReplyError) throw error;
        await pause(1000, this.signal);
      }
    }
  }

  /** Stops observing and closes its connection. */
  async return(): Promise<IteratorResult<Leader, undefined>> {
    return Promise.resolve(this.finish());
  }

  private stopped(): boolean {
    return this.done || this.signal?.aborted === true;
  }

  private finish(): IteratorResult<Leader, undefined> {
    this.done = true;
    this.connection?.close();
    this.connection = undefined;
    return { done: true, value: undefined };
  }

  /** One blocking read after `after`: the leaders that took office since. */
  private async read(after: string): Promise<void> {
    this.connection ??= await this.io.dedicated(this.election.recordKey);
    const open = this.connection;
    const record = this.election.recordKey;
    const args = ["XREAD", "COUNT", String(RECORD_ENTRIES), "BLOCK", String(OBSERVE_BLOCK_MS), "STREAMS", record, after];
    const reply = await bounded(open, args, record, OBSERVE_BLOCK_MS + CONTROL_LIMIT_MS, this.signal, () => open.close());
    const read = streams(reply);
    if (reply !== null && read.length === 0) {
      // A reply read as no entry would read it again at once, without end.
      throw new UnexpectedReplyError(`an XREAD reply not understood: ${typeof reply}`);
    }
    for (const entry of read) {
      this.after = entry.id;
      const { kind, term } = entryOf(entry.id);
      if (kind === "leader" && term > this.lastTerm) {
        this.lastTerm = term;
        this.pending.push({ term, value: entry.fields.get("value") ?? "" });
      }
    }
  }
}

/** Waits `ms`, or until `signal` aborts. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((done) => {
    const timer = setTimeout(finish, ms);
    function finish(): void {
      clearTimeout(timer);
      signal?.removeEventListener("abort", finish);
      done();
    }
    signal?.addEventListener("abort", finish, { once: true });
  });
}
