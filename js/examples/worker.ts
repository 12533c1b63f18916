// examples/worker.ts: a queue worker in the style of BullMQ's `new Worker(queue,
// processor, { concurrency })`. Jobs that touch the same account run one at a time,
// in the order they asked, across every worker process; each write is fenced.
import type { Redis } from "ioredis";
import { Locks } from "redis-lock-client";

export interface Job {
  id: string;
  account: string;
  amount: number;
}

/** The processor: what BullMQ calls with `job.data`. */
export function processor(locks: Locks, redis: Redis) {
  return (job: Job): Promise<string> =>
    locks.using(`account:${job.account}`, { ttl: 15_000, wait: 60_000 }, async (lock) => {
      const balance = Number((await redis.hget(`balance:${job.account}`, "amount")) ?? "0");
      // Right before the write, through the lock: `lock.signal` reads the clock, so
      // a pause that outlived the lease is seen even before the lease's timer ran.
      lock.signal.throwIfAborted(); // the lock is gone (or going): do not write
      // The store keeps the highest token it has seen and refuses lower ones, so a
      // holder that stalled past its lease cannot overwrite a newer one's work.
      const written = await redis.eval(
        `if tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') > tonumber(ARGV[2]) then return 0 end
         redis.call('HSET', KEYS[1], 'amount', ARGV[1], 'fence', ARGV[2]) return 1`,
        1,
        `balance:${job.account}`,
        String(balance + job.amount),
        lock.token.toString(),
      );
      if (written !== 1) throw new Error(`job ${job.id}: fenced off by a newer holder`);
      return `job ${job.id}: ${job.account} = ${balance + job.amount}`;
    });
}

/** A minimal queue loop (BRPOP) running `concurrency` jobs at a time until `stop`
 * aborts; with BullMQ: `new Worker("payments", (job) => handle(job.data), …)`. */
export async function work(redis: Redis, queue: string, concurrency: number, stop: AbortSignal): Promise<string[]> {
  const locks = new Locks(redis);
  const handle = processor(locks, redis);
  const done: string[] = [];
  const consumer = async (): Promise<void> => {
    const connection = redis.duplicate(); // BRPOP blocks its connection
    try {
      while (!stop.aborted) {
        const popped = await connection.brpop(queue, 0.1);
        if (popped !== null) done.push(await handle(JSON.parse(popped[1]) as Job));
      }
    } finally {
      connection.disconnect();
    }
  };
  await Promise.all(Array.from({ length: concurrency }, consumer));
  locks.close();
  return done;
}
