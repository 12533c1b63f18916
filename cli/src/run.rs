//! `redis-lock run`: take the lock, run the command as a child in a process group
//! of its own while renewing the lock, stop the child before anyone else can be
//! granted the lock, release it once the child exited.

use std::io::IsTerminal;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use redis_lock_client::{Connector, Lock, LockClient, Request, Wait};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::args::{RunArgs, CHILD_CONNECTION};
use crate::events::{self, Events};
use crate::exit;
use crate::group::{self, Group};
use crate::why;

/// How long the final release may take before the lock is left to its TTL.
const RELEASE_LIMIT: Duration = Duration::from_secs(2);

/// Runs the command under the lock. `connection`: the server as the command's
/// environment tells it to `redis-lock guard` ([`crate::args::Connection::child_env`]).
pub async fn run<K: Connector>(
    locks: LockClient<K>,
    args: RunArgs,
    connection: Vec<(&'static str, String)>,
    events: Events,
) -> i32 {
    let mut signals = match Signals::new() {
        Ok(signals) => signals,
        Err(error) => {
            events::line(format_args!("cannot watch signals: {error}"));
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
    let acquiring = acquire(&locks, request, wait, &args.key, &events);
    tokio::pin!(acquiring);
    let acquired = loop {
        tokio::select! {
            acquired = &mut acquiring => break acquired,
            number = signals.next() => {
                if is_stop(number) {
                    // Nothing runs under the lock yet: stop, and wait on once resumed.
                    // SAFETY: raise has no memory effects.
                    unsafe {
                        libc::raise(libc::SIGSTOP);
                    }
                    continue;
                }
                // Dropping the wait closes its connection: the server forgets it.
                events.say(format_args!("signal {number} while waiting for {}: gave up", args.key));
                return 128 + number;
            }
        }
    };
    let (lock, waited) = match acquired {
        (Ok(Some(lock)), waited) => (lock, waited),
        (Ok(None), _) => return busy(&locks, &args, &events).await,
        (Err(error), _) => return exit::failure(&error, &args.key),
    };
    let waited = waited.map_or_else(String::new, |since| {
        format!(", waited {:.1} s", since.elapsed().as_secs_f64())
    });
    events.say(format_args!(
        "acquired {} with token {} (owner {}, ttl {}){waited}",
        lock.key(),
        lock.token(),
        events::escaped(lock.owner().as_bytes()),
        humantime::format_duration(lock.ttl())
    ));
    let renewer = locks.renewer(&lock);
    group::become_subreaper();
    let mut child = match spawn(&args.command, &lock, &connection, &[]) {
        Ok(child) => child,
        Err(error) => {
            let status = spawn_failure(&error);
            cannot_run(&args.command, &error);
            renewer.stop();
            release(&locks, &lock, &events).await;
            return status;
        }
    };
    let code = match Group::led_by(child.id()) {
        Some(group) => {
            group.stop_on_panic(args.kill_after);
            let watch = Watch {
                lock: &lock,
                policy: Policy::of(&args),
                events: &events,
            };
            let ended = supervise(&mut child, group, &locks, watch, &mut signals).await;
            Group::forget_on_panic();
            ended.code(args.lost_exit)
        }
        // The child exited and was reaped before its id was read: no group to watch.
        None => status_code(child.wait().await),
    };
    renewer.stop();
    release(&locks, &lock, &events).await;
    code
}

/// Takes the lock as `request` says. A request that waits first asks without
/// waiting, so that "waiting" is said only when the lock is busy; then it queues.
/// The answer, and since when it waited (if it did).
async fn acquire<K: Connector>(
    locks: &LockClient<K>,
    request: Request,
    wait: Wait,
    key: &str,
    events: &Events,
) -> (redis_lock_client::Result<Option<Lock>>, Option<Instant>) {
    if matches!(wait, Wait::No) || wait == Wait::For(Duration::ZERO) {
        return (locks.acquire_with(request).await, None);
    }
    match locks.acquire_with(request.clone().wait(Wait::No)).await {
        Ok(None) => {}
        answer => return (answer, None),
    }
    let since = Instant::now();
    match wait {
        Wait::For(limit) => events.say(format_args!(
            "waiting for {key}: it is busy (waiting up to {})",
            humantime::format_duration(limit)
        )),
        _ => events.say(format_args!("waiting for {key}: it is busy")),
    }
    (locks.acquire_with(request).await, Some(since))
}

/// What `supervise` watches over, and where it reports.
pub(crate) struct Watch<'a> {
    pub(crate) lock: &'a Lock,
    pub(crate) policy: Policy,
    pub(crate) events: &'a Events,
}

/// How the command's end and a loss are handled (`run` and `elect` alike).
#[derive(Clone, Copy)]
pub(crate) struct Policy {
    /// Release as soon as the command exits, whatever its group still runs.
    pub(crate) no_wait_group: bool,
    /// Between SIGTERM and SIGKILL to the group after a loss.
    pub(crate) kill_after: Duration,
}

impl Policy {
    fn of(args: &RunArgs) -> Policy {
        Policy {
            no_wait_group: args.no_wait_group,
            kill_after: args.kill_after,
        }
    }
}

/// How the supervision of a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The command (and its group) is done, with this status; the lock held.
    Exited(i32),
    /// The lock was lost; the command's group is gone.
    Lost,
}

impl Ended {
    /// The exit status: the command's, or `lost_exit`.
    pub(crate) fn code(self, lost_exit: u8) -> i32 {
        match self {
            Ended::Exited(code) => code,
            Ended::Lost => i32::from(lost_exit),
        }
    }
}

/// Watches the command's group until it is done with the lock: the command exited
/// and (unless --no-wait-group) every process of its group too; or the lock was
/// lost and the whole group is gone. Passes signals on to the group meanwhile.
pub(crate) async fn supervise<K: Connector>(
    child: &mut Child,
    group: Group,
    locks: &LockClient<K>,
    watch: Watch<'_>,
    signals: &mut Signals,
) -> Ended {
    let Watch {
        lock,
        policy,
        events,
    } = watch;
    let lost = lock.signal();
    let mut exited: Option<i32> = None;
    let mut told_of_survivors = false;
    loop {
        let (state, wait_group) = (exited, !policy.no_wait_group);
        let group_done = async move {
            match state {
                Some(_) if wait_group => group.emptied().await,
                Some(_) => {}
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            status = child.wait(), if exited.is_none() => {
                let code = status_code(status);
                exited = Some(code);
                if !policy.no_wait_group && !group.is_empty() && !told_of_survivors {
                    told_of_survivors = true;
                    events.say(format_args!(
                        "the command exited ({code}) but left processes in its group: \
                         holding {} until they exit (--no-wait-group releases at once)",
                        lock.key()
                    ));
                }
            }
            () = group_done => {
                // The lease read now: `run` and the command may both have been
                // stopped past it (the group's SIGSTOP), and the command's end seen
                // only once continued. Its last writes may then have come after the
                // lease, so this is a loss, whichever branch tokio polled first.
                if lock.is_lost() {
                    events.say(format_args!(
                        "lost {} before the command's end was seen",
                        lock.key()
                    ));
                    return Ended::Lost;
                }
                return Ended::Exited(exited.unwrap_or(exit::SOFTWARE));
            }
            () = lost.lost() => {
                // The group is told first; finding out why may take a round trip.
                terminate(group);
                if !events.quiet() {
                    let cause = why::lost(locks, lock).await;
                    events.say(format_args!(
                        "lost {} ({cause}): SIGTERM to the command's group",
                        lock.key()
                    ));
                }
                stop(child, exited.is_some(), group, policy.kill_after, events).await;
                return Ended::Lost;
            }
            number = signals.next() => {
                crate::fault::check("signal", lock.owner());
                if is_stop(number) {
                    if !pause(group, lock, events) {
                        events.say(format_args!(
                            "lost {} while stopped: SIGKILL to the command's group",
                            lock.key()
                        ));
                        kill(child, exited.is_some(), group).await;
                        return Ended::Lost;
                    }
                    continue;
                }
                events.say(format_args!("passing signal {number} to the command"));
                group.signal(number);
                // A stopped process of the group acts on the signal only once
                // continued; left stopped, it would hold the lock for ever.
                group.signal(libc::SIGCONT);
            }
        }
    }
}

/// SIGTERM to the group (and SIGCONT: a stopped process acts on it only then).
fn terminate(group: Group) {
    group.signal(libc::SIGTERM);
    group.signal(libc::SIGCONT);
}

/// After [`terminate`], SIGKILL to the group after `kill_after`; returns once the
/// command was waited for and no process of its group is left.
async fn stop(
    child: &mut Child,
    exited: bool,
    group: Group,
    kill_after: Duration,
    events: &Events,
) {
    let gone = async {
        if !exited {
            let _ = child.wait().await;
        }
        group.emptied().await;
    };
    if tokio::time::timeout(kill_after, gone).await.is_ok() {
        return;
    }
    events.say(format_args!(
        "the command's group outlived --kill-after {}: SIGKILL to the group",
        humantime::format_duration(kill_after)
    ));
    kill(child, exited, group).await;
}

/// SIGKILL to the group; returns once the command was waited for and no process of
/// its group is left.
async fn kill(child: &mut Child, exited: bool, group: Group) {
    group.signal(libc::SIGKILL);
    if !exited {
        let _ = child.wait().await;
    }
    group.killed().await;
}

/// The command as a child in a process group of its own (so a loss stops all it
/// started), with the lock in its environment, and the connection and backend it
/// was taken through (for `redis-lock guard` in the job; those of a `run` this one
/// runs under are replaced). Out of the terminal's foreground group, a read of the
/// terminal would stop it for ever (SIGTTIN) with the lock held: a terminal on
/// standard input is replaced by `/dev/null`.
pub(crate) fn spawn(
    command: &[String],
    lock: &Lock,
    connection: &[(&'static str, String)],
    more: &[(&'static str, String)],
) -> std::io::Result<Child> {
    let (program, arguments) = command
        .split_first()
        .ok_or_else(|| std::io::Error::other("no command"))?;
    let mut child = Command::new(program);
    if std::io::stdin().is_terminal() {
        child.stdin(std::process::Stdio::null());
    }
    for name in CHILD_CONNECTION {
        child.env_remove(name);
    }
    child
        .envs(
            connection
                .iter()
                .map(|(name, value)| (*name, value.as_str())),
        )
        .env("REDIS_LOCK_BACKEND", lock.backend().name())
        .args(arguments)
        .env("REDIS_LOCK_KEY", lock.key())
        .env("REDIS_LOCK_OWNER", lock.owner())
        .env("REDIS_LOCK_TOKEN", lock.token().to_string())
        .envs(more.iter().map(|(name, value)| (*name, value.as_str())))
        .process_group(0)
        .spawn()
}

/// The exit status of a command that could not be started (as shells have it).
pub(crate) fn spawn_failure(error: &std::io::Error) -> i32 {
    if error.kind() == std::io::ErrorKind::NotFound {
        exit::NOT_FOUND
    } else {
        exit::CANNOT_EXECUTE
    }
}

/// Says why `command` could not be started.
pub(crate) fn cannot_run(command: &[String], error: &std::io::Error) {
    let program = command.first().map_or("", String::as_str);
    events::line(format_args!("cannot run {program:?}: {error}"));
}

/// The child's exit status, or 128+N if signal N killed it.
pub(crate) fn status_code(status: std::io::Result<ExitStatus>) -> i32 {
    match status {
        Ok(status) => status
            .code()
            .or_else(|| status.signal().map(|n| 128 + n))
            .unwrap_or(exit::SOFTWARE),
        Err(_) => exit::SOFTWARE,
    }
}

async fn busy<K: Connector>(locks: &LockClient<K>, args: &RunArgs, events: &Events) -> i32 {
    let why = match locks.lock_info(&args.key).await {
        Ok(Some(info)) => why::busy(&info, args.limit),
        _ => String::new(),
    };
    events.say(format_args!("{} is busy{why}", args.key));
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
            "release of {} failed, it lapses with its TTL: {}",
            lock.key(),
            exit::describe(&error)
        )),
        Err(_) => events.say(format_args!(
            "release of {} got no answer, it lapses with its TTL",
            lock.key()
        )),
    }
}

/// The signals `run` catches, as their numbers: every signal whose default would end
/// or stop `run` while its command (in a group of its own, out of reach of the
/// terminal's signals) ran on without anyone renewing the lock. SIGTSTP, SIGTTIN and
/// SIGTTOU (job control) stop the command's group with `run`; the others are passed
/// on to the group.
pub(crate) struct Signals {
    caught: Vec<(i32, Signal)>,
}

/// Signals passed on to the command's group.
const PASSED_ON: [i32; 7] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
];

/// Job-control stops: the group is stopped with `run` (see [`pause`]).
const STOPS: [i32; 3] = [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU];

impl Signals {
    pub(crate) fn new() -> std::io::Result<Signals> {
        let caught = PASSED_ON
            .iter()
            .chain(STOPS.iter())
            .map(|&number| Ok((number, signal(SignalKind::from_raw(number))?)))
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Signals { caught })
    }

    pub(crate) async fn next(&mut self) -> i32 {
        std::future::poll_fn(|cx| {
            for (number, signal) in &mut self.caught {
                if signal.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*number);
                }
            }
            std::task::Poll::Pending
        })
        .await
    }
}

/// True for a job-control stop (Ctrl-Z, a read or write of the terminal from the
/// background).
pub(crate) fn is_stop(number: i32) -> bool {
    STOPS.contains(&number)
}

/// Ctrl-Z and its kin: `run` and its command stop together, as a job a shell can
/// resume. The command's group is stopped first (SIGSTOP: it cannot be caught), then
/// `run` itself; while both are stopped nobody renews the lock, and nothing runs
/// under it. Once resumed (`fg`, `bg`, SIGCONT), the command is continued only if
/// the lease still holds; `false` means it ran out meanwhile, and the caller ends
/// the group without letting it run again.
fn pause(group: Group, lock: &Lock, events: &Events) -> bool {
    group.signal(libc::SIGSTOP);
    events.say(format_args!(
        "stopped with the command; {} lapses unless resumed within {}",
        lock.key(),
        humantime::format_duration(Duration::from_millis(lock.remaining().as_millis() as u64))
    ));
    // SAFETY: raise has no memory effects; SIGSTOP stops this process until SIGCONT.
    unsafe {
        libc::raise(libc::SIGSTOP);
    }
    if lock.is_lost() {
        return false;
    }
    group.signal(libc::SIGCONT);
    events.say(format_args!("resumed, still holding {}", lock.key()));
    true
}
