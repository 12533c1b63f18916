// Fenced writes in PostgreSQL against a real server of the tests' own
// (tests/postgres/start), on node-postgres (pg.Client and a Pool's PoolClient): the
// fence in the write's transaction passes an equal or greater token and refuses a
// lower one with a FencedError; a held lock's fence (lock.fencePostgres) is lost at
// once when refused; a newer holder's fence waits for an older writer's commit; what
// is refused before anything is sent. Skipped, saying so, where the machine has no
// PostgreSQL (make deps installs it).
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import type { Redis } from "ioredis";
import pg from "pg";

import {
  FENCE_SQL,
  FencedError,
  LockError,
  LockLostError,
  Locks,
  type PostgresClient,
  createPostgresFenceTable,
  fencePostgres,
} from "../src/index.js";
import { runJob } from "../examples/fencing.js";
import { Postgres, Server, client, type Client } from "./helpers.js";

const started = await Postgres.start();
const missing = "missing" in started ? started.missing : undefined;
if (missing !== undefined) console.log(`# skipped: the PostgreSQL fence (${missing})`);
const postgres = "missing" in started ? undefined : started;

let counter = 0;
const fresh = (name: string): string => `{${name}:${process.pid}:${counter++}}`;

/** The written row's value, read outside any transaction. */
async function value(pool: pg.Pool, resource: string): Promise<string | null> {
  const { rows } = await pool.query<{ value: string }>("SELECT value FROM writes WHERE resource = $1", [resource]);
  return rows[0]?.value ?? null;
}

/** One transaction: the fence (`fence`), then the write, then COMMIT; ROLLBACK on
 * any error, which is thrown. */
async function write(
  pool: pg.Pool,
  resource: string,
  text: string,
  fence: (client: pg.PoolClient) => Promise<void>,
): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    await fence(client);
    await client.query(
      "INSERT INTO writes (resource, value) VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value",
      [resource, text],
    );
    await client.query("COMMIT");
  } catch (error) {
    await client.query("ROLLBACK");
    throw error;
  } finally {
    client.release();
  }
}

describe("the PostgreSQL fence", { skip: missing ?? false }, () => {
  let pool: pg.Pool;
  before(async () => {
    pool = new pg.Pool({ connectionString: postgres?.url, max: 4 });
    const setup = new pg.Client({ connectionString: postgres?.url });
    await setup.connect();
    try {
      await createPostgresFenceTable(setup);
      await createPostgresFenceTable(setup); // again: IF NOT EXISTS
      await setup.query("CREATE TABLE writes (resource text PRIMARY KEY, value text NOT NULL)");
    } finally {
      await setup.end();
    }
  });
  after(async () => {
    await pool?.end();
    await postgres?.stop();
  });

  it("passes an equal or greater token, refuses a lower one and rolls back its write", async () => {
    const resource = fresh("tokens");
    await write(pool, resource, "five", (c) => fencePostgres(c, resource, 5n));
    await write(pool, resource, "five again", (c) => fencePostgres(c, resource, 5));
    const refused = await write(pool, resource, "four", (c) => fencePostgres(c, resource, 4n)).catch((e: unknown) => e);
    assert.ok(refused instanceof FencedError, String(refused));
    assert.ok(refused instanceof LockError);
    assert.equal(refused.key, resource);
    assert.equal(refused.token, 4n);
    assert.equal(refused.store, "postgresql");
    assert.match(refused.message, /refused token 4: a holder with a greater token has written to it; roll the transaction back/);
    assert.equal(await value(pool, resource), "five again");
    await write(pool, resource, "2^63 - 1", (c) => fencePostgres(c, resource, 2n ** 63n - 1n));
    const { rows } = await pool.query<{ token: string }>("SELECT token FROM redis_lock_fence WHERE resource = $1", [resource]);
    assert.equal(rows[0]?.token, String(2n ** 63n - 1n));
  });

  it("makes a newer holder's fence wait for an older writer's commit", async () => {
    const resource = fresh("order");
    const older = await pool.connect();
    try {
      await older.query("BEGIN");
      await fencePostgres(older, resource, 10n);
      let newerDone = false;
      const newer = write(pool, resource, "newer", (c) => fencePostgres(c, resource, 11n)).then(() => {
        newerDone = true;
      });
      await new Promise((ok) => setTimeout(ok, 300));
      assert.equal(newerDone, false, "the newer fence waited for the row");
      await older.query("INSERT INTO writes (resource, value) VALUES ($1, 'older')", [resource]);
      await older.query("COMMIT");
      await newer;
      assert.equal(await value(pool, resource), "newer");
    } finally {
      older.release();
    }
    await assert.rejects(write(pool, resource, "late", (c) => fencePostgres(c, resource, 10n)), FencedError);
    assert.equal(await value(pool, resource), "newer");
  });

  it("refuses before sending what it cannot run, and names a missing table", async () => {
    const queries: string[] = [];
    const counting: PostgresClient = {
      query: (text) => {
        queries.push(text);
        return Promise.resolve({ rows: [{ token: "1" }] });
      },
    };
    for (const bad of [0n, -1n, 2n ** 63n, 0]) await assert.rejects(fencePostgres(counting, "r", bad), RangeError, String(bad));
    for (const bad of [1.5, NaN, 2 ** 60, "7" as unknown as number]) await assert.rejects(fencePostgres(counting, "r", bad), TypeError, String(bad));
    await assert.rejects(fencePostgres(counting, "", 1n), /non-empty string/);
    await assert.rejects(fencePostgres(counting, undefined as unknown as string, 1n), TypeError);
    await assert.rejects(fencePostgres({} as PostgresClient, "r", 1n), /query\(text, values\)/);
    await assert.rejects(fencePostgres(pool, "r", 1n), /not the pg.Pool/);
    assert.deepEqual(queries, []);
    await fencePostgres(counting, "r", 1n);
    assert.deepEqual(queries, [FENCE_SQL]);
    await assert.rejects(fencePostgres({ query: () => Promise.resolve({}) } as unknown as PostgresClient, "r", 1n), /resolved no rows/);

    const client = await pool.connect();
    try {
      await client.query("CREATE SCHEMA IF NOT EXISTS empty");
      await client.query("BEGIN");
      await client.query("SET LOCAL search_path TO empty");
      const error = await fencePostgres(client, "r", 1n).catch((e: unknown) => e);
      assert.ok(error instanceof LockError && !(error instanceof FencedError), String(error));
      assert.match(error.message, /redis_lock_fence does not exist: create it once with createPostgresFenceTable/);
      assert.equal((error.cause as { code?: string }).code, "42P01");
    } finally {
      await client.query("ROLLBACK");
      client.release();
    }
  });

  describe("with a held lock", () => {
    let server: Server;
    let redis: Client;
    let locks: Locks;
    before(async () => {
      server = await Server.start();
      redis = await client("ioredis", server.port);
      locks = new Locks(redis.redis);
    });
    after(async () => {
      locks.close();
      await redis.close();
      await server.stop();
    });

    it("lands the holder's writes; a stale holder's is refused, its lock lost at once, the rival's row intact", async () => {
      const key = fresh("held");
      const old = await locks.tryAcquire(key, { ttl: 60_000, renew: false });
      assert.ok(old);
      await write(pool, key, "first", (c) => old.fencePostgres(c));
      await write(pool, key, "second", (c) => old.fencePostgres(c, key));
      assert.equal(await value(pool, key), "second");
      await server.call(["DEL", key]); // as if its TTL ran out while it was stopped
      const rival = await locks.tryAcquire(key, { ttl: 60_000 });
      assert.ok(rival && rival.token > old.token);
      await write(pool, key, "rival", (c) => rival.fencePostgres(c));
      const signal = old.signal;
      assert.equal(signal.aborted, false, "the old holder does not know yet");
      const refused = await write(pool, key, "stale", (c) => old.fencePostgres(c)).catch((e: unknown) => e);
      assert.ok(refused instanceof FencedError, String(refused));
      assert.equal(refused.token, old.token);
      assert.equal(signal.aborted, true);
      const reason = old.signal.reason as LockLostError;
      assert.equal(reason.why, "fenced");
      assert.equal(reason.cause, refused);
      assert.equal(await value(pool, key), "rival");
      assert.equal(rival.lost, false);
      await rival.release();
    });

    it("runs the example of docs/node-client.md (examples/fencing.ts)", async () => {
      await pool.query("CREATE TABLE IF NOT EXISTS jobs (id text PRIMARY KEY, result text)");
      await pool.query("INSERT INTO jobs (id) VALUES ('7')");
      assert.equal(await runJob(redis.redis as Redis, pool, "7", () => Promise.resolve("42 rows")), "job 7: 42 rows");
      const { rows } = await pool.query<{ result: string }>("SELECT result FROM jobs WHERE id = '7'");
      assert.equal(rows[0]?.result, "42 rows");
      assert.equal(await server.call(["GET", "{job:7}:result"]), "$7\r\n42 rows\r\n");
    });

    it("refuses a shared lock's token, and a lock known lost, before sending", async () => {
      const queries: string[] = [];
      const counting: PostgresClient = {
        query: (text) => {
          queries.push(text);
          return Promise.resolve({ rows: [] });
        },
      };
      const key = fresh("refused");
      const reader = await locks.tryAcquire(key, { ttl: 10_000, shared: true });
      assert.ok(reader);
      await assert.rejects(reader.fencePostgres(counting), /is shared: only an exclusive holding's token fences/);
      await reader.release();
      const permit = await locks.tryAcquire(key, { ttl: 10_000, limit: 2 });
      assert.ok(permit);
      await assert.rejects(permit.fencePostgres(counting), TypeError);
      await permit.release();
      const lock = await locks.tryAcquire(key, { ttl: 10_000 });
      assert.ok(lock);
      await lock.release();
      await assert.rejects(lock.fencePostgres(counting), (e: unknown) => e instanceof LockLostError && e.why === "released");
      assert.deepEqual(queries, []);
    });
  });
});
