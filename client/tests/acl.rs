//! The ACL each backend needs (docs/PROTOCOL.md, "ACL"), exactly: the client runs
//! as a user with the rules that page lists (an acquire that waits in the queue, an
//! extend, a release that hands the lock on, `lock_info`, a semaphore, on the
//! library the release of a lock stored by version 2, an election), and fails
//! without any one of the commands listed.

use redis_lock_testkit as common;

use std::time::Duration;

use common::{Config, Server};
use redis_lock_client::{Backend, Election, LockClient, Request, Wait};

const TTL: Duration = Duration::from_secs(10);

/// The `ACL SETUSER` line PROTOCOL.md gives for `backend`, as words.
fn documented_rules(backend: &str) -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/PROTOCOL.md");
    let page = std::fs::read_to_string(path).expect("docs/PROTOCOL.md");
    let mut lines = page.lines();
    lines
        .find(|line| *line == format!("# {backend}"))
        .unwrap_or_else(|| panic!("PROTOCOL.md has no `# {backend}` block"));
    let rules = lines.next().expect("the ACL line");
    let words: Vec<String> = rules.split_whitespace().map(String::from).collect();
    assert_eq!(words[..3], ["ACL", "SETUSER", "worker"], "{rules}");
    words
}

/// The commands a rule line allows (`+name`), in order.
fn allowed(rules: &[String]) -> Vec<String> {
    rules
        .iter()
        .filter(|w| w.starts_with('+'))
        .cloned()
        .collect()
}

/// What a user does with locks: a holder, two waiters queued behind it and handed
/// the lock in turn by its release and the first one's, an extend, `lock_info`, a
/// semaphore of two permits with a third asker turned away and a permit extended,
/// and on the library the release of a lock stored by version 2. The first
/// error, as text. `key` is the queued lock's, a new one each run: a run that
/// fails leaves its waiters' last calls in flight (their tasks aborted, their
/// connections not yet closed), which may still be handed that lock after the
/// next run's FLUSHALL.
async fn workload(url: &str, expected: Backend, key: &str) -> Result<(), String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let locks = LockClient::new(client);
    let said = |e: redis_lock_client::Error| e.to_string();
    let a = locks
        .acquire(key, TTL, Wait::No)
        .await
        .map_err(said)?
        .ok_or(format!("{key} busy"))?;
    if a.backend() != expected {
        return Err(format!("on {} instead of {expected}", a.backend()));
    }
    // Two waiters, queued one after the other.
    let mut waiters = Vec::new();
    for queued in 1..=2 {
        let waiting = locks.clone();
        let queued_key = key.to_string();
        waiters.push(tokio::spawn(async move {
            waiting
                .acquire(&queued_key, TTL, Wait::For(Duration::from_secs(5)))
                .await
        }));
        let outcome = async {
            loop {
                let info = locks.lock_info(key).await.map_err(said)?;
                if info.is_some_and(|i| i.waiters == queued) {
                    return Ok(());
                }
                if waiters.iter().any(|w| w.is_finished()) {
                    return Err("a waiter gave up".to_string());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        .await;
        if let Err(error) = outcome {
            for waiter in waiters {
                if waiter.is_finished() {
                    waiter.await.map_err(|e| e.to_string())?.map_err(said)?;
                } else {
                    waiter.abort();
                }
            }
            return Err(error);
        }
    }
    let handed_on = async {
        if !locks.extend(&a, TTL).await.map_err(said)? {
            return Err("extend answered 0".to_string());
        }
        if !locks.release(&a).await.map_err(said)? {
            return Err("release answered 0".into());
        }
        Ok(())
    }
    .await;
    let mut last = a.token();
    for waiter in waiters {
        if handed_on.is_err() && !waiter.is_finished() {
            waiter.abort();
            continue;
        }
        let b = waiter
            .await
            .map_err(|e| e.to_string())?
            .map_err(said)?
            .ok_or("a waiter was not handed the lock")?;
        if b.token() <= last {
            return Err(format!("token {} after {last}", b.token()));
        }
        last = b.token();
        locks.release(&b).await.map_err(said)?;
    }
    handed_on?;
    let permit = || Request::new("jobs:sem", TTL).limit(2);
    let first = locks.acquire_with(permit()).await.map_err(said)?;
    let second = locks.acquire_with(permit()).await.map_err(said)?;
    let (Some(first), Some(second)) = (first, second) else {
        return Err("a permit was refused".into());
    };
    if locks.acquire_with(permit()).await.map_err(said)?.is_some() {
        return Err("a third permit".into());
    }
    if !locks.extend(&first, TTL).await.map_err(said)? {
        return Err("a permit's extend answered 0".into());
    }
    let info = locks.lock_info("jobs:sem").await.map_err(said)?;
    if info.map(|i| i.holders.len()) != Some(2) {
        return Err("lock_info does not show the two permits".into());
    }
    for permit in [first, second] {
        if !locks.release(&permit).await.map_err(said)? {
            return Err("a permit's release answered 0".into());
        }
    }
    if expected != Backend::Module && !locks.release_owner("jobs:old", "old").await.map_err(said)? {
        return Err("the lock of version 2 was not released".into());
    }
    election(&locks, key).await
}

/// An election: an observer (its start reads the record), a campaign (the guarded
/// XADD of the record), the leader read back, the observer's blocking read of the
/// next leader, a resign.
async fn election(locks: &LockClient, key: &str) -> Result<(), String> {
    let said = |e: redis_lock_client::Error| e.to_string();
    let election =
        Election::new(locks.clone(), &format!("{key}:{{election}}"), TTL).map_err(said)?;
    let mut observer = election.observe();
    observer.start().await.map_err(said)?;
    for value in ["first", "second"] {
        let leadership = election.campaign(value).await.map_err(said)?;
        let seen = tokio::time::timeout(Duration::from_secs(5), observer.next())
            .await
            .map_err(|_| format!("{value}: not observed"))?
            .map_err(said)?;
        let leader = election.leader().await.map_err(said)?;
        if seen.term != leadership.term() || leader.map(|l| l.term) != Some(leadership.term()) {
            return Err(format!(
                "{value}: observed {}, leader not {}",
                seen.term,
                leadership.term()
            ));
        }
        leadership.resign().await.map_err(said)?;
    }
    Ok(())
}

/// Sets the user `worker` on `server` to `rules` (a fresh user), with a clean
/// dataset and script cache; on the library, with a lock stored by version 2 at
/// `jobs:old`.
fn set_user(server: &Server, rules: &[String], backend: Backend) {
    let mut admin = server.connection();
    let _: () = redis::cmd("FLUSHALL").query(&mut admin).unwrap();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();
    if backend != Backend::Module {
        let fields = [
            "redislock",
            "2",
            "mode",
            "exclusive",
            "h:old",
            "7 9007199254740991",
        ];
        let _: () = redis::cmd("HSET")
            .arg("jobs:old")
            .arg(&fields[..])
            .query(&mut admin)
            .unwrap();
        let _: () = redis::cmd("PEXPIRE")
            .arg("jobs:old")
            .arg(60_000)
            .query(&mut admin)
            .unwrap();
    }
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("worker")
        .arg("reset")
        .query(&mut admin)
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&rules[1..])
        .query(&mut admin)
        .unwrap();
}

/// The documented rules work on `server`, and each command they allow is needed
/// (but for those `unused` by this server's version, as PROTOCOL.md says).
fn exactly_the_documented_acl(server: &Server, name: &str, backend: Backend, unused: &[&str]) {
    let rules: Vec<String> = documented_rules(name)
        .into_iter()
        .filter(|rule| !unused.contains(&rule.as_str()))
        .collect();
    let url = format!("redis://worker:secret@127.0.0.1:{}/", server.port);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    set_user(server, &rules, backend);
    runtime
        .block_on(workload(&url, backend, "jobs:all"))
        .unwrap_or_else(|e| panic!("{name} with {rules:?}: {e}"));
    for command in allowed(&rules) {
        let fewer: Vec<String> = rules.iter().filter(|w| **w != command).cloned().collect();
        set_user(server, &fewer, backend);
        let key = format!("jobs:without-{}", command.trim_start_matches('+'));
        let outcome = runtime.block_on(workload(&url, backend, &key));
        let error = outcome.expect_err(&format!("{name} without {command}: no error"));
        assert!(
            error.contains("NOPERM")
                || error.contains("permission")
                || error.contains("can't run this command"),
            "{name} without {command}: {error}"
        );
    }
}

#[test]
fn the_module_needs_exactly_the_documented_acl() {
    let server = Server::start();
    exactly_the_documented_acl(&server, "module", Backend::Module, &[]);
}

#[test]
fn the_function_library_needs_exactly_the_documented_acl() {
    let server = Server::with(Config::default().without_module());
    common::load_library(&mut server.connection());
    exactly_the_documented_acl(&server, "functions", Backend::Functions, &[]);
}

#[test]
fn the_scripts_path_needs_exactly_the_documented_acl() {
    let server = Server::with(Config::default().without_module());
    exactly_the_documented_acl(&server, "scripts", Backend::Scripts, &[]);
    // And on Redis 6.2, where it is the only way (and the library sets absolute
    // expiry times only: no PEXPIRE).
    if let Some(binary) = common::redis62_server() {
        let old = Server::with(Config::default().without_module().binary(binary));
        exactly_the_documented_acl(&old, "scripts", Backend::Scripts, &["+pexpire"]);
    }
}
