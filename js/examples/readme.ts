// examples/readme.ts: the daily report, built by one instance at a time.
import { Redis } from "ioredis"; // or: import { createClient } from "redis"
import { FencedError, Locks } from "redis-lock-client";

declare function renderPart(part: number, signal: AbortSignal): Promise<string>;

const locks = new Locks(new Redis(6390));

export async function buildReport(): Promise<void> {
  // Waits up to a minute in the server's FIFO queue; renews every 10 s while the
  // routine runs; releases afterwards, also when it throws.
  await locks.using("{report:daily}", { ttl: 30_000, wait: 60_000 }, async (lock, signal) => {
    for (const part of [1, 2]) {
      const key = `{report:daily}:part:${part}`; // in the lock key's hash slot
      // Written only while the token holds the lock (LOCK.GUARD checks it and
      // writes in one step); signal aborts before anyone else can hold it.
      await lock.guard([key], "SET", key, await renderPart(part, signal));
    }
  }).catch((error: unknown) => {
    if (!(error instanceof FencedError)) throw error;
    console.log("stalled past the lease: another instance took over, nothing was overwritten");
  });
}
