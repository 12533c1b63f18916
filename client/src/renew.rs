//! Auto-renewal: extend a held lock at a third of its TTL while work runs, and tell
//! the work the moment the lock is lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::aio::AsyncLockCommands;
use crate::error::{Error, Result};
use crate::lock::Lock;
use crate::sync::LockCommands;

/// How often a renewal runs for a lock of `ttl`.
fn period(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(1))
}

/// Tells the work under a lock whether the lock is still held. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LockLost {
    rx: watch::Receiver<bool>,
    key: String,
}

impl LockLost {
    /// True once a renewal found the lock gone (expired, or deleted by someone).
    pub fn is_lost(&self) -> bool {
        *self.rx.borrow()
    }

    /// `Err(`[`Error::LockLost`]`)` once the lock is lost: `lost.check()?` between
    /// steps of the work stops it before it does harm.
    pub fn check(&self) -> Result<()> {
        if self.is_lost() {
            return Err(Error::LockLost {
                key: self.key.clone(),
            });
        }
        Ok(())
    }

    /// Completes when the lock is lost. Never completes while the lock is held;
    /// completes at once when renewal has stopped.
    pub async fn lost(&mut self) {
        let _ = self.rx.wait_for(|lost| *lost).await;
    }
}

/// A background task renewing one lock (async).
pub(crate) struct Renewal {
    task: JoinHandle<()>,
    rx: watch::Receiver<bool>,
    key: String,
}

impl Renewal {
    pub(crate) fn signal(&self) -> LockLost {
        LockLost {
            rx: self.rx.clone(),
            key: self.key.clone(),
        }
    }

    /// Stops renewing; returns true if the lock was lost while renewing.
    pub(crate) fn stop(self) -> bool {
        self.task.abort();
        let lost = *self.rx.borrow();
        lost
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts renewing `lock` on `con` in a tokio task.
pub(crate) fn spawn<C>(mut con: C, lock: Lock) -> Renewal
where
    C: AsyncLockCommands + Sync + 'static,
{
    let (tx, rx) = watch::channel(false);
    let key = lock.key.clone();
    let task = tokio::spawn(async move {
        let mut last_renewed = Instant::now();
        loop {
            tokio::time::sleep(period(lock.ttl)).await;
            match con.extend(&lock, lock.ttl).await {
                Ok(true) => last_renewed = Instant::now(),
                // Gone, or unreachable for a whole TTL: as good as gone.
                Ok(false) => break,
                Err(_) if last_renewed.elapsed() >= lock.ttl => break,
                Err(_) => {}
            }
        }
        let _ = tx.send(true);
    });
    Renewal { task, rx, key }
}

/// Renews a lock from a thread of its own, for the blocking API.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{LockCommands, Renewer};
///
/// # fn main() -> redis_lock_client::Result<()> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/").unwrap();
/// let mut con = client.get_connection().unwrap();
/// if let Some(lock) = con.try_acquire("nightly-export", Duration::from_secs(10))? {
///     let renewer = Renewer::start(client.clone(), lock.clone());
///     while !renewer.is_lost() {
///         // … one step of long work, stamped with lock.token() …
///         # break;
///     }
///     renewer.stop();
///     con.release(&lock)?;
/// }
/// # Ok(()) }
/// ```
pub struct Renewer {
    lost: Arc<AtomicBool>,
    stop: mpsc::Sender<()>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Renewer {
    /// Starts extending `lock` every third of its TTL, on a connection of its own
    /// from `client`.
    pub fn start(client: redis::Client, lock: Lock) -> Renewer {
        let lost = Arc::new(AtomicBool::new(false));
        let (stop, stopped) = mpsc::channel::<()>();
        let flag = Arc::clone(&lost);
        let thread = thread::spawn(move || {
            let mut last_renewed = Instant::now();
            let mut con = None;
            // `recv_timeout` sleeps one period, and returns early when stopped.
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(period(lock.ttl))
            {
                if con.is_none() {
                    con = client.get_connection().ok();
                }
                let renewed = match con.as_mut() {
                    Some(c) => c.extend(&lock, lock.ttl),
                    None => Err(crate::Error::UnexpectedReply("no connection".into())),
                };
                match renewed {
                    Ok(true) => last_renewed = Instant::now(),
                    Ok(false) => break,
                    Err(_) if last_renewed.elapsed() >= lock.ttl => break,
                    Err(_) => con = None,
                }
            }
            // Lost unless we were told to stop while still holding it.
            if stopped.try_recv().is_err() {
                flag.store(true, Ordering::SeqCst);
            }
        });
        Renewer {
            lost,
            stop,
            thread: Some(thread),
        }
    }

    /// True once a renewal found the lock gone.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Stops renewing; returns true if the lock was lost before.
    pub fn stop(mut self) -> bool {
        self.shut_down();
        self.is_lost()
    }

    fn shut_down(&mut self) {
        let _ = self.stop.send(());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Renewer {
    fn drop(&mut self) {
        self.shut_down();
    }
}
