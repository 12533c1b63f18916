//! The look at every lock after the server loaded its RDB or AOF (at start,
//! `DEBUG RELOAD`), became a master, or swapped databases: it then holds shared
//! holdings whose lapses no timer of its own watches (it did not grant them, or a
//! replica left lapses to its master, or the timers watch the keys' old databases).
//! A scan of every database, a few hundred keys per zero-delay timer tick so that
//! clients are served in between, arms the key timer of each lock whose holdings
//! lapse (`timers::watch_lapse`), which removes them on time.

use super::timers::{start as start_timer, watch_lapse, TimerJob};
use crate::ffi::scan::KeyScan;
use crate::ffi::Ctx;
use crate::state::{Rescan, MODULE};

/// Keys visited per timer tick: about 40 µs of the server's time.
const KEYS_PER_STEP: usize = 500;

fn replace(scan: Option<Rescan>) -> Option<Rescan> {
    MODULE
        .with(|w| std::mem::replace(&mut w.rescan, scan))
        .flatten()
}

/// Starts the scan from the first database; a scan already running starts over.
pub fn start(ctx: Ctx) {
    MODULE.with(|w| w.rescan_again = false);
    let Some(keys) = KeyScan::new() else {
        return;
    };
    if replace(Some(Rescan { db: 0, keys })).is_none() {
        start_timer(ctx, 0, TimerJob::Rescan);
    }
}

/// A shared lock left its key other than by expiry, eviction or the module's own
/// deletion: RENAME or MOVE took it where no timer watches its lapses (or DEL, an
/// overwrite: the scan then finds nothing). Scans now, or once more after the scan
/// that runs: never more than one pass behind, however many keys move.
pub fn lock_relocated(ctx: Ctx) {
    let running = MODULE
        .with(|w| {
            let running = w.rescan.is_some();
            w.rescan_again |= running;
            running
        })
        .unwrap_or(true);
    if !running {
        start(ctx);
    }
}

/// Ends the scan (a replica leaves lapses to its master).
pub fn stop() {
    MODULE.with(|w| w.rescan_again = false);
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
        let again = MODULE
            .with(|w| std::mem::replace(&mut w.rescan_again, false))
            .unwrap_or(false);
        if again {
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
        at = Rescan {
            db: at.db.saturating_add(1),
            keys,
        };
    }
    replace(Some(at));
    start_timer(ctx, 0, TimerJob::Rescan);
}
