/**
 * redis-lock-client: locks, semaphores and read-write locks for Node on the
 * redis-lock module or its `redislock` function library, through ioredis or
 * node-redis. See docs/node-client.md in the repository.
 */
export { Locks, LockBusyError, newOwner } from "./locks.js";
export type { AcquireOptions, LocksEvents, LocksOptions, Logger } from "./locks.js";
export { Lock } from "./lock.js";
export { Election, LeaderObserver, Leadership, MAX_LEADER_VALUE } from "./election.js";
export type { Leader, RunWhileLeaderOptions } from "./election.js";
export type { GuardArg } from "./guard.js";
export { FENCE_SQL, FENCE_TABLE_SQL, createPostgresFenceTable, fencePostgres } from "./postgres.js";
export type { PostgresClient } from "./postgres.js";
export type { LockInfo } from "./calls.js";
export { LIBRARY_SCRIPT, LIBRARY_SOURCE, SCRIPT_SHA } from "./calls.js";
export {
  CommandTimeoutError,
  FencedError,
  LibraryVersionError,
  LockError,
  LockLostError,
  NoBackendError,
  UnexpectedReplyError,
  WaitUnansweredError,
} from "./errors.js";
export type { LossReason } from "./errors.js";
export {
  BACKENDS,
  CONTROL_LIMIT_MS,
  LEASE_MARGIN_MIN_MS,
  LEASE_MARGIN_PERCENT,
  LIBRARY_VERSION,
  MAX_MILLIS,
  MAX_PERMITS,
  MIN_LIBRARY_VERSION,
  RELEASE_LIMIT_MS,
  RENEWAL_DIVISOR,
  WAIT_MARGIN_MS,
  WITHDRAW_AFTER_TIMEOUT_MS,
  margin,
} from "./protocol.js";
export type { Backend, Millis, Mode } from "./protocol.js";
