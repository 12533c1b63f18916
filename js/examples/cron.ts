// examples/cron.ts: a job scheduled on every replica (cron, node-cron, a Kubernetes
// Deployment of 3) that must run on one of them only. The replicas that find it held
// skip this round; the one that runs it stops early if it loses the lock.
import { createClient } from "redis";
import { Locks } from "redis-lock-client";

export async function nightlyExport(locks: Locks, exportRows: (fence: bigint, signal: AbortSignal) => Promise<number>) {
  // No wait: another replica has it this round. Released at the end of the block.
  await using lock = await locks.tryAcquire("cron:nightly-export", { ttl: 60_000 });
  if (lock === null) return "skipped: another replica runs it";
  const rows = await exportRows(lock.token, lock.signal);
  return `exported ${rows} rows under token ${lock.token}`;
}

export async function main(exportRows: (fence: bigint, signal: AbortSignal) => Promise<number>) {
  const redis = await createClient({ url: process.env["REDIS_URL"] ?? "redis://127.0.0.1:6390" }).connect();
  try {
    console.log(await nightlyExport(new Locks(redis), exportRows));
  } finally {
    await redis.close();
  }
}
