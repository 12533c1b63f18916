//! Fault injection, for the test that proves a panic of `redis-lock` while a
//! command runs stops the command's group. Only in debug builds (the binary the tests
//! run), and only with `REDIS_LOCK_FAULT_INJECTION=1` in the environment: a run
//! whose owner is `panic:<site>` then panics at that site. In a release build the
//! check is empty and inlined away.

#[cfg(debug_assertions)]
pub fn check(site: &str, owner: &str) {
    let enabled = std::env::var_os("REDIS_LOCK_FAULT_INJECTION").is_some_and(|v| v == "1");
    if enabled && owner.strip_prefix("panic:") == Some(site) {
        panic!("injected fault at {site}");
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn check(_site: &str, _owner: &str) {}
