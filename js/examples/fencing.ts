// examples/fencing.ts: writes that land only while the lock's token holds, in Redis
// and in PostgreSQL. A holder that stalled past its lease (a GC pause, a stopped VM)
// while another took the job over is refused, writes nothing, and stops.
import type { Redis } from "ioredis";
import type pg from "pg";
import { FencedError, type Lock, Locks } from "redis-lock-client";

/** Redis: the server checks the token and runs the command in one step. */
export async function saveResult(lock: Lock, job: string, result: string): Promise<void> {
  const out = `{job:${job}}:result`; // in the hash slot of the lock {job:<id>}
  await lock.guard([out], "SET", out, result);
}

/** PostgreSQL: the fence first, in the write's own transaction. */
export async function saveRow(lock: Lock, pool: pg.Pool, job: string, result: string): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    await lock.fencePostgres(client); // the resource: the lock's key, {job:<id>}
    await client.query("UPDATE jobs SET result = $1 WHERE id = $2", [result, job]);
    await client.query("COMMIT");
  } catch (error) {
    await client.query("ROLLBACK");
    throw error;
  } finally {
    client.release();
  }
}

export async function runJob(redis: Redis, pool: pg.Pool, job: string, work: () => Promise<string>): Promise<string> {
  const locks = new Locks(redis);
  try {
    return await locks.using(`{job:${job}}`, { ttl: 30_000 }, async (lock) => {
      const result = await work();
      await saveResult(lock, job, result);
      await saveRow(lock, pool, job, result);
      return `job ${job}: ${result}`;
    });
  } catch (error) {
    // A newer holder may exist: nothing of this run was written.
    if (error instanceof FencedError) return `job ${job}: taken over (${error.message})`;
    throw error;
  } finally {
    locks.close();
  }
}
