//! A holding belongs to the process that acquired it: in a process forked from the
//! holder, a guard dropped, a release or an extend sends nothing (the parent's
//! connection is shared with the child) and the parent goes on holding. One test
//! alone in this binary: a fork copies only the forking thread.

#[path = "support/backend.rs"]
mod on_backend;

use std::time::Duration;

use on_backend::{backend, LockCommands};
use redis_lock_client::{Request, Wait};

#[test]
fn a_forked_child_neither_releases_nor_extends_its_parents_lock() {
    let server = redis_lock_testkit::lock_server();
    let mut con = server.connection();
    let request = Request::new("job", Duration::from_secs(10)).wait(Wait::No);
    let mut guard =
        redis_lock_client::LockCommands::lock_guard_with(&mut con, request.backend(backend()))
            .unwrap()
            .expect("granted");
    let lock = guard.lock().clone();
    // SAFETY: the child only runs the client's code on this thread's values and
    // leaves with _exit (no destructors, no atexit handlers of the parent's).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let quiet = matches!(
            guard.connection().extend(&lock, Duration::from_millis(1)),
            Ok(false)
        ) && matches!(guard.connection().release(&lock), Ok(false));
        drop(guard); // a guard that leaves its scope in the child
                     // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(if quiet { 0 } else { 3 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above; writes only to `status`.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status}"
    );
    let mut other = server.connection();
    let info = other.lock_info("job").unwrap().expect("still held");
    assert_eq!(info.holders[0].owner, lock.owner());
    assert!(
        info.holders[0].ttl > Some(Duration::from_secs(5)),
        "not shortened by the child"
    );
    assert!(other
        .try_acquire("job", Duration::from_secs(1))
        .unwrap()
        .is_none());
    // Nothing the child sent is waiting on the shared connection to answer this.
    assert!(guard.release().unwrap(), "released by its holder");
    assert!(other.lock_info("job").unwrap().is_none());
}
