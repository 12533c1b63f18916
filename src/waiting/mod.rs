//! Waiting for a lock (`LOCK.ACQUIRE … WAIT`) and the module's timers: the glue
//! that applies what `redis_lock_core::handoff` decides. Waiters queue per key in
//! FIFO order; when a key's holdings change, a hand-off grants as many of them as
//! fit, in order, with fresh tokens, propagated like any grant.
//!
//! What frees a lock, and where the hand-off runs:
//! - LOCK.RELEASE: inline, in the releasing command (`handoff`).
//! - Expiry: a timer per watched key (`timers`) fires one millisecond after the
//!   lock's expiry (Redis alone may remove an expired key much later) and opens the
//!   key, which makes Redis delete it; the hand-off follows in that timer (`fired`).
//!   LOCK.EXTEND and refreshes re-arm it when the lock now expires sooner
//!   (`settle::expiry_changed`); while the lock is held, the timer also looks every
//!   `EXPIRY_RECHECK_MS`, which catches an expiry shortened by hand (`PEXPIRE`).
//! - A shared holding that lapses while others live on: the same key timer, due one
//!   millisecond after it, removes it (`settle`, which tells replicas), then hands
//!   off. Holdings the server did not grant itself get their timers too: those of a
//!   value `RESTORE`d (marked from the RDB loader), and, after the server loaded its
//!   RDB or AOF or became a master, those of every lock, found by a scan of the
//!   keyspace a few hundred keys per timer tick (`rescan`).
//! - DEL, UNLINK, RENAME, MOVE, eviction, FLUSHDB/FLUSHALL: Redis tells the module
//!   from inside its deletion, where writing is not allowed (`removals`), so the key
//!   is marked (`marks`) and a zero-delay timer hands off.
//!
//! In between, a key with waiters is never taken by anyone else: LOCK.ACQUIRE first
//! hands off to the queue, and a newcomer never goes ahead of it.
//!
//! A hand-off is a grant, and is refused where an acquire would be: under OOM, and
//! for a lock Redis just evicted for memory, every waiter gets the `OOM` error. A key
//! overwritten by a value of another type ends its queue with `WRONGTYPE`. A free
//! lock in a cluster slot being migrated sends its waiters to the target (`redirect`).
//!
//! Timeouts are the module's own (one timer for the earliest deadline of all
//! waiters, `queue`), not Redis's: Redis 7.0 lets a blocked client's timeout that
//! falls in the same event-loop turn as the module's answer swallow that answer.
//! Decided in the core, a waiter is either granted or timed out, never both, and a
//! waiter past its deadline is never granted. A granted waiter that disconnects
//! before its reply goes out has its grant taken back (`takeback`).
//!
//! The files, each importing only those listed before it: `timers`, `marks`,
//! `settle`, `redirect`, `handoff`, `takeback`, `queue`, `rescan`, `removals`,
//! `fired` (what each timer does when it fires).

pub mod fired;
pub mod handoff;
pub mod marks;
pub mod queue;
pub mod redirect;
pub mod removals;
pub mod rescan;
pub mod settle;
pub mod takeback;
pub mod timers;
