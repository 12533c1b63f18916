//! Waits: a wait is a `Wait`, rounded up, never "forever" by accident; waiting takes a
//! connection of its own, so it holds up nothing; and a cancelled wait leaves no
//! lock to an owner that stopped waiting.

use redis_lock_testkit as common;

#[path = "support/backend.rs"]
mod on_backend;

use std::time::{Duration, Instant};

use common::proxy::Proxy;
use on_backend::{AsyncLockCommands, LockCommands};
use redis::AsyncConnectionConfig;
use redis_lock_client::{BlockingLockClient, Error, LockClient, Request, Wait, WAIT_MARGIN};

const TTL: Duration = Duration::from_secs(30);

#[test]
fn a_wait_under_a_millisecond_waits_a_millisecond_not_forever() {
    let server = common::lock_server();
    let mut holder = server.connection();
    let held = holder.try_acquire("job", TTL).unwrap().unwrap();
    let mut con = server.connection();
    con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let started = Instant::now();
    for wait in [Duration::from_micros(300), Duration::from_nanos(1)] {
        let answer = con.acquire("job", TTL, Wait::For(wait)).unwrap();
        assert_eq!(answer, None, "busy after a {wait:?} wait");
    }
    // What is left of a deadline that passed is no wait at all.
    let past = Instant::now() - Duration::from_millis(1);
    assert_eq!(con.acquire("job", TTL, Wait::until(past)).unwrap(), None);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    holder.release(&held).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_async_connection_refuses_to_wait() {
    let server = common::lock_server();
    let mut con = server.client().get_connection_manager().await.unwrap();
    let request = Request::new("job", TTL).wait(Wait::For(Duration::from_secs(5)));
    let error = con.acquire_with(request.clone()).await.unwrap_err();
    assert!(
        matches!(&error, Error::InvalidArgument(m) if m.contains("LockClient")),
        "{error}"
    );
    let error = con.lock_guard_with(request).await.unwrap_err();
    assert!(matches!(error, Error::InvalidArgument(_)));
    assert_eq!(
        con.lock_info("job").await.unwrap(),
        None,
        "nothing was sent"
    );
}

/// 100 tasks wait for one lock, each holding it briefly: with every wait on a
/// connection of its own, the lock passes from one to the next at once (not once per
/// TTL), and a shared connection keeps answering meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiters_hold_up_nothing_and_hand_off_at_once() {
    let server = common::lock_server();
    let locks = LockClient::new(server.client());
    let mut shared = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let started = Instant::now();
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let locks = locks.clone();
            tokio::spawn(async move {
                let wait = Wait::For(Duration::from_secs(60));
                let lock = locks.acquire("job", TTL, wait).await.unwrap().unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
                assert!(locks.release(&lock).await.unwrap());
            })
        })
        .collect();
    let mut slowest_ping = Duration::ZERO;
    while !tasks.iter().all(|t| t.is_finished()) {
        let sent = Instant::now();
        let pong: String = redis::cmd("PING").query_async(&mut shared).await.unwrap();
        assert_eq!(pong, "PONG");
        slowest_ping = slowest_ping.max(sent.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for task in tasks {
        task.await.unwrap();
    }
    // One hand-off per TTL would take 100 × 30 s.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert!(
        slowest_ping < Duration::from_millis(500),
        "a PING took {slowest_ping:?}"
    );
}

/// An acquire cancelled while it waits, also as the grant crosses the cancellation:
/// the lock never stays with the owner that stopped waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_leaves_no_ghost_owner() {
    let server = common::lock_server();
    let config = AsyncConnectionConfig::new().set_response_timeout(None);
    let mut con = server
        .client()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    let locks = LockClient::new(server.client());
    for round in 0..20 {
        let held = con.try_acquire("job", TTL).await.unwrap().unwrap();
        let waiting = tokio::spawn({
            let locks = locks.clone();
            async move {
                locks
                    .acquire("job", TTL, Wait::For(Duration::from_secs(20)))
                    .await
            }
        });
        common::wait_until(Duration::from_secs(5), || {
            server
                .connection()
                .lock_info("job")
                .unwrap()
                .is_some_and(|info| info.waiters == 1)
        });
        // Release and cancel at once: some rounds the grant wins the race.
        let release = con.release(&held);
        let spread = Duration::from_micros(200 * round);
        let cancel = async {
            tokio::time::sleep(spread).await;
            waiting.abort();
            waiting.await
        };
        let (released, waited) = tokio::join!(release, cancel);
        assert!(released.unwrap());
        let deadline = Instant::now() + Duration::from_secs(3);
        match waited {
            Ok(Ok(Some(lock))) => {
                // It returned before the cancel: a real holder, not a ghost.
                assert!(locks.release(&lock).await.unwrap());
            }
            Ok(other) => panic!("{other:?}"),
            Err(_cancelled) => {
                while con.lock_info("job").await.unwrap().is_some() {
                    assert!(
                        Instant::now() < deadline,
                        "round {round}: the lock stayed with a cancelled waiter"
                    );
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }
}

/// A server answers a wait that ran out with "busy"; one that answers nothing (it
/// was stopped, or the network drops every byte) must not hold the waiter past its
/// wait plus the margin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_gives_up_in_time_when_the_server_stops_or_the_path_black_holes() {
    let server = common::lock_server();
    let proxy = Proxy::start(server.port);
    let mut holder = server.connection();
    let held = holder.try_acquire("job", TTL).unwrap().unwrap();
    let wait = Duration::from_millis(500);
    for stopped in [true, false] {
        // The last round's waiter gone first (its withdrawal reaches the server
        // after the resume; through the library its place may lapse instead):
        // its place must not pass for this round's waiter, which would then meet
        // the black hole before it connected.
        common::wait_until(Duration::from_secs(10), || {
            holder
                .lock_info("job")
                .unwrap()
                .is_some_and(|info| info.waiters == 0)
        });
        let locks = LockClient::new(if stopped {
            server.client()
        } else {
            proxy.client()
        });
        let waiting = tokio::spawn(async move {
            let started = Instant::now();
            let answer = locks.acquire("job", TTL, Wait::For(wait)).await;
            (answer, started.elapsed())
        });
        common::wait_until(Duration::from_secs(5), || {
            holder
                .lock_info("job")
                .unwrap()
                .is_some_and(|info| info.waiters == 1)
        });
        if stopped {
            server.pause();
        } else {
            proxy.black_hole();
        }
        let answered = tokio::time::timeout(Duration::from_secs(10), waiting).await;
        server.resume();
        let (answer, waited) = answered.expect("the wait gave up in time").unwrap();
        assert!(
            matches!(answer, Err(Error::WaitUnanswered { .. })),
            "stopped {stopped}: {answer:?}"
        );
        assert!(
            waited < wait + WAIT_MARGIN + Duration::from_secs(1),
            "stopped {stopped}: gave up after {waited:?}"
        );
    }
    assert!(holder.release(&held).unwrap());
}

/// The blocking client bounds its waits as the async one does: a server that
/// answers nothing (stopped, or a black-holed path) gets the waiter back within
/// its wait plus the margin, on every backend (a library wait is several calls,
/// each bounded by what is left).
#[test]
fn a_blocking_wait_gives_up_in_time_when_the_server_stops_or_the_path_black_holes() {
    let server = common::lock_server();
    let proxy = Proxy::start(server.port);
    let holder = BlockingLockClient::new(server.client());
    let held = holder.acquire("job", TTL, Wait::No).unwrap().unwrap();
    let wait = Duration::from_millis(500);
    for stopped in [true, false] {
        // The last round's waiter gone first (its withdrawal reaches the server
        // after the resume; through the library its place may lapse instead):
        // its place must not pass for this round's waiter, which would then meet
        // the black hole before it connected.
        common::wait_until(Duration::from_secs(10), || {
            holder
                .lock_info("job")
                .unwrap()
                .is_some_and(|info| info.waiters == 0)
        });
        let locks = BlockingLockClient::new(if stopped {
            server.client()
        } else {
            proxy.client()
        });
        let (answered, answer) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let started = Instant::now();
            let result = locks.acquire("job", TTL, Wait::For(wait));
            let _ = answered.send((result, started.elapsed()));
        });
        common::wait_until(Duration::from_secs(5), || {
            holder
                .lock_info("job")
                .unwrap()
                .is_some_and(|info| info.waiters == 1)
        });
        if stopped {
            server.pause();
        } else {
            proxy.black_hole();
        }
        let answer = answer.recv_timeout(Duration::from_secs(10));
        server.resume();
        let (result, waited) = answer.expect("the blocking wait gave up in time");
        assert!(
            matches!(result, Err(Error::WaitUnanswered { .. })),
            "stopped {stopped}: {result:?}"
        );
        assert!(
            waited < wait + WAIT_MARGIN + Duration::from_secs(1),
            "stopped {stopped}: gave up after {waited:?}"
        );
    }
    assert!(holder.release(&held).unwrap());
    // A waiter cut off before its give-up reached the server may be granted the
    // lock by that release; it never collects it, and the grant lapses with the
    // place's lease (2 s) on the library, at once on the module.
    common::wait_until(Duration::from_secs(3), || {
        holder.lock_info("job").unwrap().is_none()
    });
}

/// On the library, a wait without a limit is several steps (`lock_wait`, `BLPOP`
/// for the `wake_ms` it names, again), each with a bound of its own: a path that
/// then drops every byte ends the wait with an error within a step's bound (the
/// control limit, or a place's lease and the margin), instead of hanging while the
/// place lapses in the server. (On the module such a wait is one blocked call that
/// the server answers: nothing of the client's to bound.)
#[test]
fn a_library_wait_without_a_limit_ends_on_a_dead_path() {
    if common::backend_name() == "module" {
        eprintln!("skipped on the module: its wait is one blocked call");
        return;
    }
    let server = common::lock_server();
    let holder = BlockingLockClient::new(server.client());
    let held = holder.acquire("job", TTL, Wait::No).unwrap().unwrap();
    let bound = Duration::from_secs(2) + Duration::from_secs(2) + WAIT_MARGIN;
    for blocking in [false, true] {
        let proxy = Proxy::start(server.port);
        let client = proxy.client();
        let (answered, answer) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let result = if blocking {
                BlockingLockClient::new(client).acquire("job", TTL, Wait::Forever)
            } else {
                let runtime = tokio::runtime::Runtime::new().unwrap();
                runtime.block_on(LockClient::new(client).acquire("job", TTL, Wait::Forever))
            };
            let _ = answered.send((result, Instant::now()));
        });
        common::wait_until(Duration::from_secs(5), || {
            holder
                .lock_info("job")
                .unwrap()
                .is_some_and(|info| info.waiters == 1)
        });
        let cut = Instant::now();
        proxy.black_hole();
        let (result, ended) = answer.recv_timeout(bound * 2).unwrap_or_else(|_| {
            panic!(
                "blocking {blocking}: still waiting {:?} after the cut",
                bound * 2
            )
        });
        assert!(
            matches!(
                &result,
                Err(Error::Connection(_) | Error::WaitUnanswered { .. })
            ),
            "blocking {blocking}: {result:?}"
        );
        assert!(
            ended - cut < bound,
            "blocking {blocking}: ended {:?} after the cut",
            ended - cut
        );
        println!(
            "blocking {blocking}: {:?} after the cut: {}",
            ended - cut,
            result.unwrap_err()
        );
        // Its place lapses in the server (it could not be given up).
        common::wait_until(Duration::from_secs(5), || {
            holder
                .lock_info("job")
                .unwrap()
                .is_some_and(|info| info.waiters == 0)
        });
    }
    assert!(holder.release(&held).unwrap());
}
