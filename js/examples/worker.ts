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
    locks.using(`{account:${job.account}}`, { ttl: 15_000, wait: 60_000 }, async (lock) => {
      const balance = `{account:${job.account}}:balance`; // in the lock key's hash slot
      const amount = Number((await redis.hget(balance, "amount")) ?? "0") + job.amount;
      // Written only while the lock's token holds it, checked by the server in the
      // same step (LOCK.GUARD): a worker that stalled past its lease while another
      // took the account over gets a FencedError, and writes nothing.
      await lock.guard([balance], "HSET", balance, "amount", amount);
      return `job ${job.id}: ${job.account} = ${amount}`;
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
