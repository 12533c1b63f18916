//! `redis-lock elect`: campaign in the server's queue, run the daemon while this
//! process leads, stop its group when leadership is lost (before a rival can lead),
//! resign once it is gone; campaign again if asked.

use redis_lock_client::{Connector, Election, Leadership, LockClient};

use crate::args::ElectArgs;
use crate::events::{self, Events};
use crate::exit;
use crate::group::{self, Group};
use crate::run::{
    cannot_run, is_stop, spawn, spawn_failure, status_code, supervise, Ended, Policy, Signals,
    Watch,
};

/// Runs the daemon while leading. `connection`: the server as the daemon's
/// environment tells it to `redis-lock guard`.
pub async fn elect<K: Connector>(
    locks: LockClient<K>,
    args: ElectArgs,
    connection: Vec<(&'static str, String)>,
    events: Events,
) -> i32 {
    let election = match Election::new(locks.clone(), &args.key, args.ttl) {
        Ok(election) => election,
        Err(error) => {
            events::line(exit::describe(&error));
            return exit::USAGE;
        }
    };
    let value = args.value.clone().unwrap_or_else(default_value);
    let mut signals = match Signals::new() {
        Ok(signals) => signals,
        Err(error) => {
            events::line(format_args!("cannot watch signals: {error}"));
            return exit::SOFTWARE;
        }
    };
    group::become_subreaper();
    let policy = Policy {
        no_wait_group: args.no_wait_group,
        kill_after: args.kill_after,
    };
    loop {
        events.say(format_args!("campaigning for {}", args.key));
        let leadership = match campaign(&election, &value, &mut signals, &events).await {
            Ok(leadership) => leadership,
            Err(code) => return code,
        };
        events.say(format_args!(
            "leading {} in term {} (value {})",
            args.key,
            leadership.term(),
            events::escaped(value.as_bytes())
        ));
        let term = [("REDIS_LOCK_TERM", leadership.term().to_string())];
        let mut child = match spawn(&args.command, leadership.lock(), &connection, &term) {
            Ok(child) => child,
            Err(error) => {
                cannot_run(&args.command, &error);
                resign(leadership, &events).await;
                return spawn_failure(&error);
            }
        };
        let ended = match Group::led_by(child.id()) {
            Some(group) => {
                group.stop_on_panic(args.kill_after);
                let watch = Watch {
                    lock: leadership.lock(),
                    policy,
                    events: &events,
                };
                let ended = supervise(&mut child, group, &locks, watch, &mut signals).await;
                Group::forget_on_panic();
                ended
            }
            None => Ended::Exited(status_code(child.wait().await)),
        };
        match ended {
            Ended::Exited(code) => {
                resign(leadership, &events).await;
                return code;
            }
            Ended::Lost if args.again => drop(leadership),
            Ended::Lost => return i32::from(args.lost_exit),
        }
    }
}

/// Waits in the queue until this process leads; a signal other than a job-control
/// stop gives up (the wait's connection closes: the server forgets it).
async fn campaign<K: Connector>(
    election: &Election<K>,
    value: &str,
    signals: &mut Signals,
    events: &Events,
) -> Result<Leadership<K>, i32> {
    let campaigning = election.campaign(value);
    tokio::pin!(campaigning);
    loop {
        tokio::select! {
            won = &mut campaigning => {
                return won.map_err(|error| exit::failure(&error, election.key()));
            }
            number = signals.next() => {
                if is_stop(number) {
                    // SAFETY: raise has no memory effects.
                    unsafe {
                        libc::raise(libc::SIGSTOP);
                    }
                    continue;
                }
                events.say(format_args!(
                    "signal {number} while campaigning for {}: gave up",
                    election.key()
                ));
                return Err(128 + number);
            }
        }
    }
}

async fn resign<K: Connector>(leadership: Leadership<K>, events: &Events) {
    let key = leadership.lock().key().to_owned();
    match leadership.resign().await {
        Ok(true) => events.say(format_args!("resigned {key}")),
        Ok(false) => events.say(format_args!("{key} was no longer led: nothing to resign")),
        Err(error) => events.say(format_args!(
            "resign of {key} failed, it lapses with its TTL: {}",
            exit::describe(&error)
        )),
    }
}

/// `host:pid`, as owners begin.
fn default_value() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}
