//! Redlock over 3 and 5 independent servers, some of them down or slow.

use redis_lock_testkit as common;

use std::time::{Duration, Instant};

use common::Config;
use common::Server;
use redis_lock_client::{Error, LockCommands, Redlock, Retry};

const TTL: Duration = Duration::from_secs(60);

fn servers(n: usize) -> Vec<Server> {
    (0..n).map(|_| Server::start()).collect()
}

fn manager(servers: &[Server]) -> Redlock {
    let redlock = Redlock::new(servers.iter().map(Server::client).collect()).retry(Retry::NONE);
    if common::slow_server() {
        // Under valgrind a healthy server answers in far more than 50 ms.
        redlock.server_timeout(Duration::from_secs(2))
    } else {
        redlock
    }
}

/// How many servers hold `key` as `owner` now.
fn holders(servers: &[Server], key: &str, owner: &str) -> usize {
    servers
        .iter()
        .filter(|s| {
            let mut con = s.connection();
            con.lock_info(key)
                .unwrap()
                .is_some_and(|info| info.owner == owner)
        })
        .count()
}

/// A server timeout short enough for a stopped server, long enough for a live one.
fn slow_timeout() -> Duration {
    Duration::from_millis(if common::slow_server() { 2_000 } else { 100 })
}

#[test]
fn five_servers_grant_with_two_down_and_not_with_three() {
    let mut five = servers(5);
    five[3].kill();
    five[4].kill();
    let mut first = manager(&five);
    let lock = first
        .acquire("job", TTL)
        .unwrap()
        .expect("3 of 5 is a majority");
    assert_eq!(lock.tokens().iter().flatten().count(), 3);
    assert!(lock.validity() > TTL / 2);
    assert!(lock.fence() > 0);
    let mut second = manager(&five);
    assert_eq!(
        second.acquire("job", TTL).unwrap(),
        None,
        "held by the first"
    );
    assert_eq!(
        holders(&five[..3], "job", lock.owner()),
        3,
        "the loser released"
    );
    assert_eq!(first.release(&lock), 3);

    five[2].kill();
    let mut third = manager(&five);
    let error = third.acquire("job", TTL).unwrap_err();
    assert!(
        matches!(&error, Error::NoQuorum { granted: 2, needed: 3, errors, .. } if errors.len() == 3),
        "2 of 5 is not a majority, and the 3 down servers are the cause: {error}"
    );
    let mut con = five[0].connection();
    assert_eq!(
        con.lock_info("job").unwrap(),
        None,
        "partial grants released"
    );
}

#[test]
fn three_servers_grant_with_one_slow_and_not_with_two() {
    let three = servers(3);
    three[2].pause();
    let started = Instant::now();
    let mut redlock = manager(&three).server_timeout(slow_timeout());
    let lock = redlock
        .acquire("job", TTL)
        .unwrap()
        .expect("2 of 3 answered");
    assert!(
        started.elapsed() < slow_timeout() * 10,
        "the slow server was not waited on"
    );
    assert_eq!(lock.tokens()[2], None);
    assert!(lock.validity() < TTL);
    three[1].pause();
    let mut other = manager(&three).server_timeout(slow_timeout());
    let error = other.acquire("other", TTL).unwrap_err();
    assert!(
        matches!(&error, Error::NoQuorum { granted: 1, .. }),
        "1 of 3 answered: {error}"
    );
    three[1].resume();
    three[2].resume();
    // Resumed servers first answer what queued up while they were stopped.
    for server in &three {
        let pong: String = redis::cmd("PING").query(&mut server.connection()).unwrap();
        assert_eq!(pong, "PONG");
    }
    assert!(redlock.release(&lock) >= 2);
}

#[test]
fn extend_keeps_a_majority_and_notices_its_loss() {
    let three = servers(3);
    let mut redlock = manager(&three);
    let mut lock = redlock
        .acquire("job", Duration::from_millis(500))
        .unwrap()
        .unwrap();
    assert!(redlock.extend(&mut lock, TTL));
    assert!(lock.validity() > Duration::from_secs(5));
    for server in &three[..2] {
        let _: i64 = redis::cmd("DEL")
            .arg("job")
            .query(&mut server.connection())
            .unwrap();
    }
    assert!(
        !redlock.extend(&mut lock, TTL),
        "only one server still holds it"
    );
}

#[test]
fn servers_are_asked_in_parallel() {
    let five = servers(5);
    five[3].pause();
    five[4].pause();
    let timeout = Duration::from_millis(if common::slow_server() { 2_000 } else { 400 });
    let mut redlock = manager(&five).server_timeout(timeout);
    let started = Instant::now();
    let lock = redlock.try_acquire("job", TTL).unwrap().expect("3 of 5");
    let took = started.elapsed();
    // A stopped server costs up to two timeouts (the connect's handshake, then the
    // command); one after another, the two would cost four.
    assert!(took < timeout * 3, "{took:?} for a {timeout:?} timeout");
    five[3].resume();
    five[4].resume();
    assert!(redlock.release(&lock) >= 3);
}

#[test]
fn real_errors_are_surfaced_per_server_not_reported_as_busy() {
    let plain: Vec<Server> = (0..3)
        .map(|_| Server::with(Config::default().without_module()))
        .collect();
    let error = manager(&plain).try_acquire("job", TTL).unwrap_err();
    let Error::NoQuorum {
        errors, granted, ..
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!((*granted, errors.len()), (0, 3));
    for (server, cause) in errors {
        assert!(server.contains("127.0.0.1"), "{server}");
        assert!(matches!(cause, Error::ModuleNotLoaded(_)), "{cause:?}");
    }
    assert!(
        error.to_string().contains("module is not loaded"),
        "{error}"
    );

    let three = servers(3);
    for server in &three {
        let _: () = redis::cmd("SET")
            .arg("text")
            .arg("v")
            .query(&mut server.connection())
            .unwrap();
    }
    let error = manager(&three).try_acquire("text", TTL).unwrap_err();
    assert!(
        matches!(&error, Error::NoQuorum { errors, .. } if errors.iter().all(|(_, e)| matches!(e, Error::WrongType(_)))),
        "{error:?}"
    );

    // Busy is busy: every server answered, someone else holds it.
    let mut first = manager(&three);
    let held = first.try_acquire("job", TTL).unwrap().unwrap();
    assert_eq!(manager(&three).try_acquire("job", TTL).unwrap(), None);
    first.release(&held);
}
