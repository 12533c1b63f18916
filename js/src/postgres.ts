/**
 * Fenced writes in PostgreSQL (docs/fencing.md): the resource keeps, per fenced
 * resource, the highest token it has accepted, and refuses a lower one (an equal one
 * passes: the holder writes more than once).
 *
 * The fence is one statement, run in the write's own transaction **before** the
 * write: no row back means a holder with a greater token has written, and
 * {@link fencePostgres} throws {@link FencedError}; roll back. The fence row stays
 * locked until the transaction ends, so a newer holder's fence waits for an older
 * writer's commit. The statements are the repository's fence/postgresql/*.sql,
 * bundled into generated.ts at build time ({@link FENCE_SQL}, {@link FENCE_TABLE_SQL}).
 *
 * The helpers take anything with node-postgres' `query(text, values)`: the package
 * imports no PostgreSQL driver.
 */
import { FencedError, LockError, UnexpectedReplyError } from "./errors.js";
import { FENCE_SQL, FENCE_TABLE_SQL } from "./generated.js";

export { FENCE_SQL, FENCE_TABLE_SQL };

/**
 * What the fence needs of a PostgreSQL client: node-postgres' `query(text, values)`,
 * resolving the rows. A `pg.Client`, or the `PoolClient` of `await pool.connect()`,
 * in the transaction of the write (`BEGIN` sent on it first); not a `pg.Pool`, whose
 * `query` runs each statement on whichever connection is free, outside that
 * transaction.
 */
export interface PostgresClient {
  query(text: string, values: unknown[]): Promise<{ rows: unknown[] }>;
}

/** The largest fencing token, as PostgreSQL's `bigint` and the server take it. */
const MAX_TOKEN = (1n << 63n) - 1n;

/**
 * Fences the transaction `client` is in for `resource` with `token`, an exclusive
 * holding's fencing token: run it before the writes it fences, in the same
 * transaction. Throws {@link FencedError} when a holder with a greater token has
 * written to `resource` (roll the transaction back and stop the work); a TypeError
 * or RangeError for a token that is not an integer from 1 to 2^63 − 1, a resource
 * that is not a non-empty string, or a `pg.Pool`, before anything is sent; a
 * `LockError` that says to create it when the fence table is missing. Other errors
 * of the database come as the driver throws them.
 *
 * `lock.fencePostgres(client)` does the same with a held lock's token, and tells
 * the lock that it is lost when refused.
 *
 * ```ts
 * const client = await pool.connect();
 * try {
 *   await client.query("BEGIN");
 *   await fencePostgres(client, "report:daily", token); // throws FencedError: roll back
 *   await client.query("UPDATE reports SET body = $1 WHERE day = $2", [body, day]);
 *   await client.query("COMMIT");
 * } catch (error) {
 *   await client.query("ROLLBACK");
 *   throw error;
 * } finally {
 *   client.release();
 * }
 * ```
 */
export async function fencePostgres(client: PostgresClient, resource: string, token: bigint | number): Promise<void> {
  checkClient(client);
  if (typeof resource !== "string" || resource.length === 0) {
    const given = typeof resource === "string" ? "an empty one" : typeof resource;
    throw new TypeError(`the fenced resource must be a non-empty string, not ${given}`);
  }
  const exact = fenceToken(token);
  let result: unknown;
  try {
    result = await client.query(FENCE_SQL, [resource, exact.toString()]);
  } catch (error) {
    throw missingTable(error) ?? error;
  }
  const rows = (result as { rows?: unknown } | null | undefined)?.rows;
  if (!Array.isArray(rows)) {
    throw new UnexpectedReplyError(
      `the PostgreSQL fence of ${JSON.stringify(resource)}: query() resolved no rows (give a node-postgres client, or one with its query(text, values))`,
    );
  }
  if (rows.length === 0) throw new FencedError(resource, exact, "postgresql");
}

/** Creates the fence table if it does not exist (fence/postgresql/table.sql), on
 * `client`: once, at setup or in a migration. */
export async function createPostgresFenceTable(client: PostgresClient): Promise<void> {
  checkClient(client);
  await client.query(FENCE_TABLE_SQL, []);
}

/** A token the fence takes: a bigint, or a safe integer `number`, from 1 to 2^63 − 1. */
function fenceToken(token: bigint | number): bigint {
  let exact: bigint;
  if (typeof token === "bigint") exact = token;
  else if (typeof token === "number" && Number.isSafeInteger(token)) exact = BigInt(token);
  else throw new TypeError(`a fencing token is an integer (a bigint, or a safe integer number), not ${String(token)}`);
  if (exact < 1n || exact > MAX_TOKEN) {
    throw new RangeError(`a fencing token is from 1 to 2^63 − 1, not ${exact}`);
  }
  return exact;
}

function checkClient(client: unknown): void {
  if (typeof (client as { query?: unknown } | null)?.query !== "function") {
    throw new TypeError("the fence needs a PostgreSQL client with query(text, values): a pg.Client or a PoolClient");
  }
  const pool = client as { totalCount?: unknown; idleCount?: unknown };
  if (typeof pool.totalCount === "number" && typeof pool.idleCount === "number") {
    throw new TypeError(
      "the fence runs in the write's own transaction: give it the client of that transaction (const client = await pool.connect(), then BEGIN on it), not the pg.Pool, which runs each query on any connection",
    );
  }
}

/** The fence table is missing (SQLSTATE 42P01 on it): say how to make it. */
function missingTable(error: unknown): LockError | undefined {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  if (code !== "42P01" || typeof message !== "string" || !message.includes("redis_lock_fence")) return undefined;
  return new LockError(
    `the PostgreSQL fence table redis_lock_fence does not exist: create it once with createPostgresFenceTable(client) (fence/postgresql/table.sql)`,
    { cause: error },
  );
}
