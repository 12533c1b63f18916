//! The top layer: the module's load, and what each kind of callback from Redis
//! means to the module. `ffi` owns the C entry points, monomorphised over traits;
//! here are the types that implement them (`LockSettings`, `LockValues`,
//! `ServerEvents`; `commands::Table` is the commands'), and the order in which
//! everything is registered.

use std::ffi::CStr;

use redis_lock_core::Lock;

use crate::commands::Table;
use crate::ffi::config::{self, Settings};
use crate::ffi::datatype::{self, AofRewrite, Digest, LockType, ModuleIo};
use crate::ffi::events::{self, Events};
use crate::ffi::{command, log_notice, log_warning, Ctx, RString};
use crate::state::{self, MODULE};
use crate::waiting::{marks, removals, rescan};
use crate::{fault, keyspace, observe};

/// The module's load: checks the server, loads the configs and then the load
/// arguments, and only then registers the data type and the rest. `Err` logs its
/// reason and refuses the load; Redis then unloads the module whole (a refusal after
/// the data type exists would go through Redis's post-load unload, which cannot
/// unload a module with a data type and crashes on 7.2+).
pub fn load(ctx: Ctx, args: &[&[u8]]) -> Result<(), String> {
    let missing = crate::ffi::missing_required_apis();
    if !missing.is_empty() {
        return Err(format!(
            "needs Redis 7.0 or newer; this server lacks {}",
            missing.join(", ")
        ));
    }
    config::register_and_load::<LockSettings>(ctx)?;
    for (setting, value) in state::parse_load_args(args)? {
        setting
            .value
            .store(value, std::sync::atomic::Ordering::Relaxed);
    }
    crate::ffi::log_panics();
    datatype::create_type::<LockValues>(ctx)
        .map_err(|reason| format!("could not create the data type: {reason}"))?;
    datatype::set_module_options(ctx);
    command::register::<Table>(ctx)?;
    if !(crate::ffi::init_module_ctx(ctx) && events::subscribe::<ServerEvents>(ctx)) {
        return Err("could not register the module's callbacks".into());
    }
    warn_if_locks_can_be_evicted(ctx);
    Ok(())
}

/// The `lock.*` configs, as `ffi::config` registers them.
struct LockSettings;

impl Settings for LockSettings {
    const COUNT: usize = state::SETTING_COUNT;

    fn name(index: usize) -> &'static str {
        state::settings().get(index).map_or("", |s| s.name)
    }

    fn show(index: usize) -> String {
        state::settings().get(index).map_or(String::new(), |s| {
            s.value
                .load(std::sync::atomic::Ordering::Relaxed)
                .to_string()
        })
    }

    fn set(index: usize, value: &[u8]) -> Result<(), String> {
        state::settings()
            .get(index)
            .ok_or_else(|| "unknown config".to_string())?
            .set(value)
    }
}

/// The lock data type: its bytes (`keyspace`), and what its loads and removals
/// mean to the waiting machinery.
struct LockValues;

impl LockType for LockValues {
    const NAME: &'static str = keyspace::TYPE_NAME;
    const ENCODING_VERSION: i32 = keyspace::ENCODING_VERSION;

    fn load(io: &ModuleIo, encver: i32) -> Option<Lock> {
        let lock = keyspace::load(io, encver)?;
        if lock.next_lapse().is_some() {
            if let Some((db, key)) = io.key() {
                marks::restored(db, key);
            }
        }
        Some(lock)
    }

    fn save(io: &ModuleIo, lock: &Lock) {
        keyspace::save(io, lock);
    }

    fn rewrite(aof: &AofRewrite<'_>, lock: &Lock) {
        keyspace::rewrite(aof, lock);
    }

    fn memory(lock: &Lock) -> usize {
        keyspace::memory(lock)
    }

    fn digest(digest: &Digest, lock: &Lock) {
        keyspace::digest(digest, lock);
    }

    fn unlinked(db: i32, key: &RString, lock: Option<&Lock>) {
        removals::lock_unlinked(db, key, lock);
    }

    fn aux_value() -> i64 {
        keyspace::aux_value()
    }

    fn aux_load(io: &ModuleIo, encver: i32) -> bool {
        keyspace::aux_load(io, encver)
    }
}

/// Keyspace and server events, and `INFO lock`.
struct ServerEvents;

impl Events for ServerEvents {
    fn keyspace(db: i32, event: &[u8], key: &RString) {
        removals::keyspace_event(db, event, key);
    }

    fn flushed(db: Option<i32>) {
        marks::flushed(db);
    }

    fn swapped(ctx: Ctx, first: i32, second: i32) {
        marks::flushed(Some(first));
        marks::flushed(Some(second));
        // The lapse timers watch keys by database: the swapped ones look anew.
        if !ctx.is_replica() {
            rescan::start(ctx);
        }
    }

    /// The end of loading (a replica's full synchronisation too, which leaves lapses
    /// to its master): watch the lapses of the loaded locks.
    fn loaded(ctx: Ctx) {
        if !ctx.is_replica() {
            rescan::start(ctx);
        }
    }

    fn eviction_policy_changed(ctx: Ctx) {
        warn_if_locks_can_be_evicted(ctx);
    }

    /// A node that becomes a master (a replica promoted by Sentinel, `REPLICAOF NO
    /// ONE`, `FAILOVER`) mints its tokens in a digit of its own from then on
    /// (`TokenMint::promote`), so they never equal those of the master it replaced,
    /// which may still be granting until it learns it was replaced. Its master
    /// judged the lapses of shared holdings until now: this node does.
    fn became_master(ctx: Ctx) {
        rescan::start(ctx);
        let digit = MODULE.mint.promote();
        log_notice(&format!(
            "lock module: now a master; its fencing tokens end in the digit {digit}"
        ));
    }

    fn info() -> Vec<(&'static CStr, i64)> {
        fault::check_info();
        observe::info_fields()
    }
}

/// Logs the eviction warning if the server's `maxmemory-policy` can evict locks.
fn warn_if_locks_can_be_evicted(ctx: Ctx) {
    if let Some(warning) = ctx
        .config_get(c"maxmemory-policy")
        .and_then(|policy| observe::eviction_warning(&policy))
    {
        log_warning(&warning);
    }
}
