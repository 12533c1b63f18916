//! The command's process group: signals to all of it, whether anything of it still
//! runs, and the safety net that stops it if `redis-lock` itself panics.
//!
//! The command is the leader of a group of its own, and whatever it starts stays in
//! the group unless it leaves on purpose (`setsid`, a shell's job control). A lock is
//! held for the group, not only for the command: a grandchild that outlives it still
//! works on the locked resource. `redis-lock` is the group's subreaper (Linux), so
//! orphans of the group become its children and are reaped here; otherwise their
//! zombies would keep the group "non-empty" until some init reaped them.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often an emptying group is looked at.
const POLL: Duration = Duration::from_millis(20);

/// The group a panic must stop (0: none), and its `--kill-after` in ms.
static PANIC_GROUP: AtomicI32 = AtomicI32::new(0);
static PANIC_KILL_AFTER_MS: AtomicU64 = AtomicU64::new(0);

/// A process group, by its id (the leader's pid, always > 0).
#[derive(Debug, Clone, Copy)]
pub struct Group(i32);

impl Group {
    /// The group led by process `pid`; `None` for a pid that is no group id.
    pub fn led_by(pid: Option<u32>) -> Option<Group> {
        pid.and_then(|pid| i32::try_from(pid).ok())
            .filter(|&pid| pid > 0)
            .map(Group)
    }

    /// Sends signal `number` to every process of the group.
    pub fn signal(self, number: i32) {
        // SAFETY: killpg has no memory effects; an empty group fails with ESRCH.
        unsafe {
            libc::killpg(self.0, number);
        }
    }

    /// True once no process of the group is left. Reaps the group's orphans that
    /// were re-parented here, so call it only after the leader was waited for (it
    /// would otherwise reap the leader behind tokio's back).
    pub fn is_empty(self) -> bool {
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes only to `status`, a live local.
            let reaped = unsafe { libc::waitpid(-self.0, &mut status, libc::WNOHANG) };
            if reaped <= 0 {
                break;
            }
        }
        // SAFETY: signal 0 only checks that some process of the group exists.
        let probe = unsafe { libc::killpg(self.0, 0) };
        probe == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }

    /// Returns once the group is empty (its leader waited for already).
    pub async fn emptied(self) {
        while !self.is_empty() {
            tokio::time::sleep(POLL).await;
        }
    }

    /// SIGKILL to the group until it is empty (its leader waited for already): a
    /// process that forked as the first SIGKILL went out has its child killed by
    /// the next.
    pub async fn killed(self) {
        loop {
            self.signal(libc::SIGKILL);
            if self.is_empty() {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Makes a panic of `redis-lock` stop this group as a loss does (SIGTERM, then
    /// SIGKILL after `kill_after`): after a panic nothing renews the lock, and the
    /// group must not run on without it.
    pub fn stop_on_panic(self, kill_after: Duration) {
        let ms = u64::try_from(kill_after.as_millis()).unwrap_or(u64::MAX);
        PANIC_KILL_AFTER_MS.store(ms, Ordering::SeqCst);
        PANIC_GROUP.store(self.0, Ordering::SeqCst);
    }

    /// The group is no longer ours to stop on a panic.
    pub fn forget_on_panic() {
        PANIC_GROUP.store(0, Ordering::SeqCst);
    }
}

/// Makes `redis-lock` the subreaper of its descendants, so orphans of the command's
/// group are re-parented here and reaped by [`Group::is_empty`].
pub fn become_subreaper() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer and has no memory effects.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Installs the panic hook that stops the group registered with
/// [`Group::stop_on_panic`], after the usual panic message.
pub fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        let group = PANIC_GROUP.swap(0, Ordering::SeqCst);
        if group <= 0 {
            return;
        }
        let group = Group(group);
        crate::events::line("panic while supervising the command: stopping its process group");
        group.signal(libc::SIGTERM);
        let kill_after = Duration::from_millis(PANIC_KILL_AFTER_MS.load(Ordering::SeqCst));
        let deadline = Instant::now().checked_add(kill_after);
        while !group.is_empty() && deadline.is_none_or(|d| Instant::now() < d) {
            std::thread::sleep(POLL);
        }
        while !group.is_empty() {
            group.signal(libc::SIGKILL);
            std::thread::sleep(POLL);
        }
    }));
}
