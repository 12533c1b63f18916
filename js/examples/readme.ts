// examples/readme.ts: the daily report, built by one instance at a time.
import { Redis } from "ioredis"; // or: import { createClient } from "redis"
import { Locks } from "redis-lock-client";

declare function writeReport(part: number, fence: bigint, signal: AbortSignal): Promise<void>;

const locks = new Locks(new Redis(6390));

export async function buildReport(): Promise<void> {
  // Waits up to a minute in the server's FIFO queue; renews every 10 s while the
  // routine runs; releases afterwards, also when it throws.
  await locks.using("report:daily", { ttl: 30_000, wait: 60_000 }, async (lock, signal) => {
    await writeReport(1, lock.token, signal); // the guarded store refuses older tokens
    await writeReport(2, lock.token, signal); // signal aborts before anyone else can hold it
  });
}
