//! The look at every lock after the server loaded its RDB or AOF (at start,
//! `DEBUG RELOAD`), became a master, or swapped databases: it then holds shared
//! holdings whose lapses no timer of its own watches (it did not grant them, or a
//! replica left lapses to its master, or the timers watch the keys' old databases).
//! A scan of every database, a few hundred keys per zero-delay timer tick so that
//! clients are served in between, arms the key timer of each lock whose holdings
//! lapse (`blocking::watch_lapse`), which removes them on time.

use std::cell::{Cell, RefCell};

use crate::blocking::{watch_lapse, TimerJob};
use crate::ffi::entry;
use crate::ffi::scan::KeyScan;
use crate::ffi::Ctx;

/// Keys visited per timer tick: about 40 µs of the server's time.
const KEYS_PER_STEP: usize = 500;

/// Where the scan is.
struct Scan {
    db: i32,
    keys: KeyScan,
}

thread_local! {
    // Redis calls module code from its main thread only.
    static SCAN: RefCell<Option<Scan>> = const { RefCell::new(None) };
    // A lock moved (RENAME, MOVE) while a scan ran, maybe into its visited part.
    static AGAIN: Cell<bool> = const { Cell::new(false) };
}

fn replace(scan: Option<Scan>) -> Option<Scan> {
    SCAN.with(|cell| {
        cell.try_borrow_mut()
            .ok()
            .and_then(|mut s| std::mem::replace(&mut *s, scan))
    })
}

/// Starts the scan from the first database; a scan already running starts over.
pub fn start(ctx: Ctx) {
    AGAIN.with(|again| again.set(false));
    let Some(keys) = KeyScan::new() else {
        return;
    };
    if replace(Some(Scan { db: 0, keys })).is_none() {
        entry::start_timer(ctx, 0, TimerJob::Rescan);
    }
}

/// A shared lock left its key other than by expiry, eviction or the module's own
/// deletion: RENAME or MOVE took it where no timer watches its lapses (or DEL, an
/// overwrite: the scan then finds nothing). Scans now, or once more after the scan
/// that runs: never more than one pass behind, however many keys move.
pub fn lock_moved(ctx: Ctx) {
    let running = SCAN.with(|cell| cell.try_borrow().map_or(true, |s| s.is_some()));
    if running {
        AGAIN.with(|again| again.set(true));
    } else {
        start(ctx);
    }
}

/// Ends the scan (a replica leaves lapses to its master).
pub fn stop() {
    AGAIN.with(|again| again.set(false));
    replace(None);
}

/// One tick: arms the lapse timers of the locks it meets, then goes on from the next
/// tick (or the next database) until the last database ends.
pub fn step(ctx: Ctx) {
    let Some(mut at) = replace(None) else {
        return;
    };
    if !ctx.select_db(at.db) {
        // Past the last database: done, unless a lock moved meanwhile.
        if AGAIN.with(|again| again.replace(false)) {
            start(ctx);
        }
        return;
    }
    let mut lapsing = Vec::new();
    let step = at.keys.step(ctx, KEYS_PER_STEP, &mut |key, lock| {
        if let Some(lapse) = lock.next_lapse() {
            lapsing.push((Box::<[u8]>::from(key), lapse));
        }
    });
    for (key, lapse) in lapsing {
        watch_lapse(ctx, at.db, &key, Some(lapse));
    }
    if !step.more {
        let Some(keys) = KeyScan::new() else {
            return;
        };
        at = Scan {
            db: at.db.saturating_add(1),
            keys,
        };
    }
    replace(Some(at));
    entry::start_timer(ctx, 0, TimerJob::Rescan);
}
