//! `redis-lock run`: take the lock, run the command as a child in a process group
//! of its own while renewing the lock, stop the child before anyone else can be
//! granted the lock, release it once the child exited.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use redis_lock_client::{Connector, Lock, LockClient, Request, Wait};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::args::RunArgs;
use crate::events::Events;
use crate::exit;

/// How long the final release may take before the lock is left to its TTL.
const RELEASE_LIMIT: Duration = Duration::from_secs(2);

pub async fn run<K: Connector>(locks: LockClient<K>, args: RunArgs, events: Events) -> i32 {
    let mut signals = match Signals::new() {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!("redis-lock: cannot watch signals: {error}");
            return exit::SOFTWARE;
        }
    };
    let wait = args.wait.unwrap_or(Wait::No);
    let mut request = Request::new(&args.key, args.ttl).wait(wait);
    if let Some(permits) = args.limit {
        request = request.limit(permits);
    } else if args.shared {
        request = request.shared();
    }
    if let Some(owner) = &args.owner {
        request = request.owner(owner.as_str());
    }
    match wait {
        Wait::No => {}
        Wait::For(limit) => events.say(format_args!(
            "waiting for {} (up to {})",
            args.key,
            humantime::format_duration(limit)
        )),
        _ => events.say(format_args!("waiting for {}", args.key)),
    }
    let acquired = tokio::select! {
        acquired = locks.acquire_with(request) => acquired,
        number = signals.next() => {
            // Dropping the wait closes its connection: the server forgets it.
            events.say(format_args!("signal {number} while waiting for {}: gave up", args.key));
            return 128 + number;
        }
    };
    let lock = match acquired {
        Ok(Some(lock)) => lock,
        Ok(None) => return busy(&locks, &args, &events).await,
        Err(error) => return exit::failure(&error, &args.key),
    };
    events.say(format_args!(
        "acquired {} with token {} (owner {}, ttl {})",
        lock.key(),
        lock.token(),
        lock.owner(),
        humantime::format_duration(lock.ttl())
    ));
    let renewer = locks.renewer(&lock);
    let mut child = match spawn(&args.command, &lock) {
        Ok(child) => child,
        Err(error) => {
            let status = if error.kind() == std::io::ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::CANNOT_EXECUTE
            };
            eprintln!("redis-lock: cannot run {:?}: {error}", args.command[0]);
            renewer.stop();
            release(&locks, &lock, &events).await;
            return status;
        }
    };
    let group = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .unwrap_or(0);
    let lost = lock.signal();
    let code = loop {
        tokio::select! {
            status = child.wait() => break status_code(status),
            () = lost.lost() => {
                events.say(format_args!(
                    "lost {} (the server no longer holds it, or no renewal was acknowledged \
                     before the lease ran out): SIGTERM to the command",
                    lock.key()
                ));
                stop(&mut child, group, args.kill_after, &events).await;
                break i32::from(args.lost_exit);
            }
            number = signals.next() => {
                events.say(format_args!("passing signal {number} to the command"));
                kill_group(group, number);
            }
        }
    };
    renewer.stop();
    release(&locks, &lock, &events).await;
    code
}

/// The command as a child in a process group of its own (so a loss stops all it
/// started), with the lock in its environment.
fn spawn(command: &[String], lock: &Lock) -> std::io::Result<Child> {
    let (program, arguments) = command
        .split_first()
        .ok_or_else(|| std::io::Error::other("no command"))?;
    Command::new(program)
        .args(arguments)
        .env("REDIS_LOCK_KEY", lock.key())
        .env("REDIS_LOCK_OWNER", lock.owner())
        .env("REDIS_LOCK_TOKEN", lock.token().to_string())
        .process_group(0)
        .spawn()
}

/// SIGTERM to the child's group, then SIGKILL after `kill_after`; waits for the child.
async fn stop(child: &mut Child, group: i32, kill_after: Duration, events: &Events) {
    kill_group(group, libc::SIGTERM);
    if tokio::time::timeout(kill_after, child.wait())
        .await
        .is_err()
    {
        events.say(format_args!(
            "the command outlived --kill-after {}: SIGKILL",
            humantime::format_duration(kill_after)
        ));
        kill_group(group, libc::SIGKILL);
        let _ = child.wait().await;
    }
}

fn kill_group(group: i32, number: i32) {
    if group > 0 {
        // SAFETY: killpg has no memory effects; a stale group id fails with ESRCH.
        unsafe {
            libc::killpg(group, number);
        }
    }
}

/// The child's exit status, or 128+N if signal N killed it.
fn status_code(status: std::io::Result<ExitStatus>) -> i32 {
    match status {
        Ok(status) => status
            .code()
            .or_else(|| status.signal().map(|n| 128 + n))
            .unwrap_or(exit::SOFTWARE),
        Err(_) => exit::SOFTWARE,
    }
}

async fn busy<K: Connector>(locks: &LockClient<K>, args: &RunArgs, events: &Events) -> i32 {
    let holder = match locks.lock_info(&args.key).await {
        Ok(Some(info)) => format!(
            ": held by {} (token {}, {} left)",
            info.owner,
            info.token,
            info.ttl
                .map_or("no expiry".into(), |t| humantime::format_duration(
                    Duration::from_millis(t.as_millis() as u64)
                )
                .to_string())
        ),
        _ => String::new(),
    };
    events.say(format_args!("{} is busy{holder}", args.key));
    i32::from(args.busy_exit)
}

async fn release<K: Connector>(locks: &LockClient<K>, lock: &Lock, events: &Events) {
    match tokio::time::timeout(RELEASE_LIMIT, locks.release(lock)).await {
        Ok(Ok(true)) => events.say(format_args!("released {}", lock.key())),
        Ok(Ok(false)) => events.say(format_args!(
            "{} was no longer held: nothing to release",
            lock.key()
        )),
        Ok(Err(error)) => events.say(format_args!(
            "release of {} failed, it lapses with its TTL: {error}",
            lock.key()
        )),
        Err(_) => events.say(format_args!(
            "release of {} got no answer, it lapses with its TTL",
            lock.key()
        )),
    }
}

/// SIGINT, SIGTERM and SIGHUP, as their numbers.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
            _ = self.hangup.recv() => libc::SIGHUP,
        }
    }
}
