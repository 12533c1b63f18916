//! Fault injection, for the tests that prove a panic anywhere in the module leaves the
//! server up. Only in debug builds (the module the tests load), and only when the
//! server was started with `REDIS_LOCK_FAULT_INJECTION=1` in its environment: a lock
//! whose owner is `panic:<site>` then makes the module panic at that site. In a
//! release build every function here is empty and inlined away.

#[cfg(debug_assertions)]
mod armed {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;

    /// Whether the server's environment asked for faults, read once.
    fn enabled() -> bool {
        static ENABLED: OnceLock<bool> = OnceLock::new();
        *ENABLED.get_or_init(|| {
            std::env::var_os("REDIS_LOCK_FAULT_INJECTION").is_some_and(|v| v == "1")
        })
    }

    pub fn check(site: &str, owner: &[u8]) {
        if enabled() && owner.strip_prefix(b"panic:") == Some(site.as_bytes()) {
            panic!("injected fault at {site}");
        }
    }

    /// Whether a lock owned by `panic:info` was taken: INFO then panics.
    static INFO_ARMED: AtomicBool = AtomicBool::new(false);

    pub fn check_command(owner: &[u8]) {
        if enabled() && owner == b"panic:info" {
            INFO_ARMED.store(true, Ordering::Relaxed);
        }
        check("command", owner);
    }

    pub fn check_info() {
        if INFO_ARMED.swap(false, Ordering::Relaxed) {
            panic!("injected fault at info");
        }
    }
}

/// Panics if `owner` is `panic:<site>` (fault injection on).
#[inline(always)]
pub fn check(site: &str, owner: &[u8]) {
    #[cfg(debug_assertions)]
    armed::check(site, owner);
    #[cfg(not(debug_assertions))]
    let _ = (site, owner);
}

/// Called with every acquire's owner: `panic:command` panics in the command,
/// `panic:info` arms a panic in the next `INFO`.
#[inline(always)]
pub fn check_command(owner: &[u8]) {
    #[cfg(debug_assertions)]
    armed::check_command(owner);
    #[cfg(not(debug_assertions))]
    let _ = owner;
}

/// Panics once if `panic:info` armed it.
#[inline(always)]
pub fn check_info() {
    #[cfg(debug_assertions)]
    armed::check_info();
}
