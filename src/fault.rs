//! Fault injection, for the tests that prove a panic anywhere in the module leaves the
//! server up: built only with the cargo feature `fault-injection` (never in the
//! module users load, where [`check`] is an empty inline function). With it, a lock
//! whose owner is `panic:<site>` makes the module panic at that site.

#[cfg(feature = "fault-injection")]
pub fn check(site: &str, owner: &[u8]) {
    if owner.strip_prefix(b"panic:") == Some(site.as_bytes()) {
        panic!("injected fault at {site}");
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn check(_site: &str, _owner: &[u8]) {}

/// Whether a lock owned by `panic:info` was taken: INFO then panics.
#[cfg(feature = "fault-injection")]
static INFO_ARMED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Called with every acquire's owner: `panic:command` panics in the command,
/// `panic:info` arms a panic in the next `INFO`.
#[cfg(feature = "fault-injection")]
pub fn check_command(owner: &[u8]) {
    if owner == b"panic:info" {
        INFO_ARMED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    check("command", owner);
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn check_command(_owner: &[u8]) {}

/// Panics once if `panic:info` armed it.
#[cfg(feature = "fault-injection")]
pub fn check_info() {
    if INFO_ARMED.swap(false, std::sync::atomic::Ordering::Relaxed) {
        panic!("injected fault at info");
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn check_info() {}
