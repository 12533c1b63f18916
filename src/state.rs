//! The module's state, all of it in one `static`, [`MODULE`]: the token mint, the
//! INFO counters and the settings (atomics, read anywhere), and [`Live`], what the
//! waiting machinery keeps between calls (queues, timers, marks, the rescan), behind
//! one accessor, [`Module::with`]. Redis runs module code on its main thread only
//! (`ffi::MainThread`).
//!
//! The state is never entered twice: a caller of `with` does not call into Redis
//! inside it (Redis may call back, a keyspace event for one). A debug build panics
//! on a second entry (the test suites load the debug build); a release build logs
//! it and the second caller gets `None`.

use redis_lock_core::hashing::{HashMap, HashSet};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use redis_lock_core::args::{parse_i64, Limits, MAX_DURATION_MS};
use redis_lock_core::queue::Queues;
use redis_lock_core::timers::Armed;
use redis_lock_core::{Stats, TokenMint};

use crate::ffi::block::Blocked;
use crate::ffi::scan::KeyScan;
use crate::ffi::{log_warning, HeldString, MainThread};
use crate::reply::Outcome;

/// Everything the module keeps between calls.
pub struct Module {
    pub mint: TokenMint,
    pub stats: Stats,
    /// `lock.max-ttl`: largest TTL in ms a command may ask for, 0 for no cap.
    pub max_ttl: AtomicI64,
    /// `lock.max-owner-len`: longest owner in bytes for a new holding.
    pub max_owner_len: AtomicI64,
    /// Whether any queue has a waiter, kept by [`Module::with`] after every change:
    /// lets the commands on a key without waiters (nearly all of them) skip the
    /// queues.
    any_waiting: AtomicBool,
    /// True while the module deletes a key that it hands off right after itself
    /// ([`Module::deleting_here`]).
    deleting_here: AtomicBool,
    live: MainThread<RefCell<Option<Live>>>,
}

/// The module's state.
pub static MODULE: Module = Module {
    mint: TokenMint::new(),
    stats: Stats::new(),
    max_ttl: AtomicI64::new(0),
    max_owner_len: AtomicI64::new(DEFAULT_MAX_OWNER_LEN),
    any_waiting: AtomicBool::new(false),
    deleting_here: AtomicBool::new(false),
    live: MainThread::new(RefCell::new(None)),
};

/// A blocked `LOCK.ACQUIRE … WAIT`, answered with an [`Outcome`].
pub type Client = Blocked<Outcome>;

/// What the waiting machinery keeps between calls (`crate::waiting`).
#[derive(Default)]
pub struct Live {
    /// The waiters, per database and key, in FIFO order.
    pub queues: Queues<Client>,
    /// Waiters woken with a holding whose reply Redis has not sent yet: the grant
    /// they were woken with.
    pub in_flight: HashMap<Client, GrantAt>,
    /// The grants of [`Live::in_flight`] with more than one waiter (several waiters
    /// of one owner, a client that retried its WAIT, share one grant) or that
    /// refreshed a holding: such a grant is taken back only when the last of its
    /// waiters vanished and none heard of it. A fresh grant to one waiter has no
    /// entry here.
    pub grants_in_flight: HashMap<GrantAt, GrantInFlight>,
    /// The one timer that times waiters out.
    pub timeout_timer: Option<Armed>,
    /// The timer of each watched key (waiters, or shared holdings that lapse).
    pub key_timers: KeyTimers,
    /// Keys to look at from the next zero-delay timer, and why.
    pub marked: Vec<(i32, Box<[u8]>, Mark)>,
    pub marked_timer_armed: bool,
    /// Keys to look at once writes resume (`CLIENT PAUSE WRITE`, `FAILOVER`): one
    /// timer retries for all of them, not one per key.
    pub paused: HashSet<(i32, Box<[u8]>)>,
    pub paused_timer_armed: bool,
    /// The scan for lapsing holdings after a load or a promotion, where it is.
    pub rescan: Option<Rescan>,
    /// A lock was relocated (RENAME, MOVE) while the scan ran: scan once more.
    pub rescan_again: bool,
    /// The key object of the lock Redis unlinked last, until the next keyspace event
    /// (`waiting::removals`).
    pub unlinked: Option<HeldString>,
}

/// A grant to waiters: its database, key and token.
pub type GrantAt = (i32, Box<[u8]>, i64);

/// What became of a grant's waiters so far.
#[derive(Debug, Default)]
pub struct GrantInFlight {
    /// Waiters whose reply has not gone out yet, nor they vanished.
    pub unsent: usize,
    /// A waiter's reply went out, or the owner held the holding before (a
    /// refresh): the grant is not the waiters' alone to lose.
    pub heard: bool,
}

/// Why a key was marked for a look from a timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Removed from the keyspace (DEL, RENAME, MOVE, flush…), or its first waiter
    /// left without the lock: hand it off.
    Removed,
    /// Evicted for memory: its waiters get the OOM error, not the lock.
    Evicted,
    /// Written by `RESTORE` with holdings that lapse: watch them.
    Restored,
    /// A shared lock left this key with holdings, by no expiry or eviction (RENAME,
    /// MOVE, DEL…): find where it went, by a rescan.
    Relocated,
}

/// Where the rescan is: a database and a cursor in it.
pub struct Rescan {
    pub db: i32,
    pub keys: KeyScan,
}

/// Timers by database, then key: looked up by a borrowed key, with no allocation on
/// the refresh or release that finds its key's timer already due soon enough.
#[derive(Default)]
pub struct KeyTimers(HashMap<i32, HashMap<Box<[u8]>, Armed>>);

impl KeyTimers {
    pub fn get(&self, db: i32, key: &[u8]) -> Option<Armed> {
        self.0.get(&db)?.get(key).copied()
    }

    pub fn insert(&mut self, db: i32, key: &[u8], armed: Armed) -> Option<Armed> {
        self.0.entry(db).or_default().insert(key.into(), armed)
    }

    /// Forgets the timer of `key` if it is the one due at `due`.
    pub fn fired(&mut self, db: i32, key: &[u8], due: i64) {
        if let Some(timers) = self.0.get_mut(&db) {
            if timers.get(key).is_some_and(|t| t.due == due) {
                timers.remove(key);
            }
            if timers.is_empty() {
                self.0.remove(&db);
            }
        }
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }
}

impl Module {
    /// Runs `f` on the live state. `f` never calls into Redis: Redis may call back
    /// and would find the state in use. `None` only when it is in use already (a
    /// bug: a debug build panics).
    #[inline]
    pub fn with<T>(&self, f: impl FnOnce(&mut Live) -> T) -> Option<T> {
        let Ok(mut live) = self.live.get().try_borrow_mut() else {
            entered_twice();
            return None;
        };
        let live = live.get_or_insert_with(Live::default);
        let out = f(live);
        self.any_waiting
            .store(!live.queues.is_empty(), Ordering::Relaxed);
        Some(out)
    }

    /// Whether any client waits for any lock.
    #[inline]
    pub fn any_waiting(&self) -> bool {
        self.any_waiting.load(Ordering::Relaxed)
    }

    /// Clients waiting on `key` now.
    #[inline]
    pub fn waiters(&self, db: i32, key: &[u8]) -> usize {
        if !self.any_waiting() {
            return 0;
        }
        self.with(|live| live.queues.waiting(db, key)).unwrap_or(0)
    }

    /// Runs `delete`, a deletion by the module that its caller follows with a
    /// hand-off of the key (LOCK.RELEASE, a take-back).
    pub fn deleting_here<T>(&self, delete: impl FnOnce() -> T) -> T {
        struct Reset<'a>(&'a AtomicBool);
        impl Drop for Reset<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Relaxed);
            }
        }
        self.deleting_here.store(true, Ordering::Relaxed);
        let _reset = Reset(&self.deleting_here);
        delete()
    }

    /// True while the module deletes a key itself ([`Module::deleting_here`]).
    #[inline]
    pub fn is_deleting_here(&self) -> bool {
        self.deleting_here.load(Ordering::Relaxed)
    }

    /// The settings in force for this call.
    #[inline]
    pub fn limits(&self) -> Limits {
        Limits {
            max_ttl: self.max_ttl.load(Ordering::Relaxed),
            max_owner_len: usize::try_from(self.max_owner_len.load(Ordering::Relaxed)).unwrap_or(0),
        }
    }
}

#[cold]
fn entered_twice() {
    if cfg!(debug_assertions) {
        panic!("the module state was entered twice");
    }
    log_warning("lock module: internal error: the module state was entered twice");
}

pub const DEFAULT_MAX_OWNER_LEN: i64 = redis_lock_core::protocol::DEFAULT_MAX_OWNER_LEN as i64;
/// Largest `lock.max-owner-len` accepted: owners are ids, not payloads.
pub const OWNER_LEN_CEILING: i64 = 1 << 20;

/// A module config: its name after `lock.`, where its value lives, its bounds.
#[derive(Clone, Copy)]
pub struct Setting {
    pub name: &'static str,
    pub value: &'static AtomicI64,
    pub min: i64,
    pub max: i64,
}

/// How many configs the module has.
pub const SETTING_COUNT: usize = 2;

/// The module's configs.
pub fn settings() -> [Setting; SETTING_COUNT] {
    [
        Setting {
            name: "max-ttl",
            value: &MODULE.max_ttl,
            min: 0,
            max: MAX_DURATION_MS,
        },
        Setting {
            name: "max-owner-len",
            value: &MODULE.max_owner_len,
            min: 1,
            max: OWNER_LEN_CEILING,
        },
    ]
}

impl Setting {
    /// Reads a value for this setting: an integer in its bounds, or why not (the
    /// setting, the value as given and the range, for the log and `CONFIG SET`).
    pub fn parse(&self, value: &[u8]) -> Result<i64, String> {
        match parse_i64(value) {
            Some(n) if (self.min..=self.max).contains(&n) => Ok(n),
            _ => Err(format!(
                "invalid value '{}' for lock.{}: expected an integer from {} to {}",
                shown(value),
                self.name,
                self.min,
                self.max
            )),
        }
    }

    /// Sets it from `value`, or changes nothing and says why.
    pub fn set(&self, value: &[u8]) -> Result<(), String> {
        let n = self.parse(value)?;
        self.value.store(n, Ordering::Relaxed);
        Ok(())
    }
}

/// An argument as the log shows it: lossy text with control bytes escaped, cut short.
fn shown(arg: &[u8]) -> String {
    let text = String::from_utf8_lossy(arg);
    let mut shown: String = text.chars().take(64).flat_map(char::escape_debug).collect();
    if text.chars().nth(64).is_some() {
        shown.push_str("...");
    }
    shown
}

/// Reads `loadmodule … NAME VALUE …`: pairs of a setting's name (with or without
/// `lock.`) and an integer in its bounds. Any unknown name, bad value or lone name
/// refuses the whole load (as Redis refuses an unknown directive), with the reason.
pub fn parse_load_args(args: &[&[u8]]) -> Result<Vec<(Setting, i64)>, String> {
    let mut chosen = Vec::new();
    let mut pairs = args.chunks(2);
    for pair in &mut pairs {
        let [name, value] = pair else {
            let name = pair.first().map_or(String::new(), |n| shown(n));
            return Err(format!("load argument '{name}' has no value"));
        };
        let bare = name.strip_prefix(b"lock.").unwrap_or(name);
        let Some(setting) = settings().into_iter().find(|s| s.name.as_bytes() == bare) else {
            let known: Vec<&str> = settings().iter().map(|s| s.name).collect();
            return Err(format!(
                "unknown load argument '{}' (known: {})",
                shown(name),
                known.join(", ")
            ));
        };
        chosen.push((setting, setting.parse(value)?));
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(args: &[&[u8]]) -> Result<Vec<(&'static str, i64)>, String> {
        parse_load_args(args).map(|chosen| chosen.into_iter().map(|(s, n)| (s.name, n)).collect())
    }

    #[test]
    fn settings_are_read_by_name_with_or_without_the_prefix() {
        assert_eq!(names(&[]), Ok(vec![]));
        assert_eq!(
            names(&[b"max-ttl", b"5000", b"lock.max-owner-len", b"64"]),
            Ok(vec![("max-ttl", 5000), ("max-owner-len", 64)])
        );
    }

    #[test]
    fn a_bad_argument_is_refused_with_its_name() {
        for (args, named) in [
            (&[&b"max_ttl"[..], b"5000"][..], "max_ttl"),
            (&[b"max-ttl", b"abc"], "max-ttl"),
            (&[b"max-ttl", b"-1"], "max-ttl"),
            (&[b"max-owner-len", b"0"], "max-owner-len"),
            (&[b"max-owner-len", b"1048577"], "max-owner-len"),
            (&[b"max-ttl", b"1", b"max-owner-len"], "max-owner-len"),
        ] {
            let error = names(args).unwrap_err();
            assert!(error.contains(named), "{args:?}: {error}");
        }
    }
}
