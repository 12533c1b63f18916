//! The client crate against a real redis-server with the module: every API, sync and
//! async, through a plain connection, a multiplexed one and a ConnectionManager.

use redis_lock_testkit as common;

#[path = "support/backend.rs"]
mod on_backend;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{lock_stat, Config, Server};
use on_backend::{AsyncLockCommands, LockCommands};
use redis::AsyncConnectionConfig;
use redis_lock_client::{
    Backend, Error, LockClient, LossCause, Renewer, Request, Wait, LIBRARY_VERSION,
    MIN_LIBRARY_VERSION,
};

const TTL: Duration = Duration::from_secs(30);

/// An async connection without a response timeout, for waits longer than 500 ms.
async fn async_con(server: &Server) -> redis::aio::MultiplexedConnection {
    let config = AsyncConnectionConfig::new().set_response_timeout(None);
    server
        .client()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

#[test]
fn sync_acquire_extend_info_release() {
    let server = common::lock_server();
    let mut con = server.connection();
    let lock = con.try_acquire("job", TTL).unwrap().expect("free");
    assert!(lock.token() > 0);
    assert_eq!(lock.key(), "job");
    assert!(host_pid_random(lock.owner()), "{}", lock.owner());
    let shown = format!("{lock:?}");
    assert!(
        shown.contains("token") && shown.contains("remaining") && !shown.contains("Mutex"),
        "{shown}"
    );
    assert_eq!(con.try_acquire("job", TTL).unwrap(), None, "a second owner");

    let info = con.lock_info("job").unwrap().unwrap();
    assert_eq!(
        info.owner,
        lock.owner(),
        "an owner compares with Lock::owner"
    );
    assert_eq!(info.token, lock.token());
    assert!(info.ttl.unwrap() <= TTL);

    assert!(con.extend(&lock, Duration::from_secs(90)).unwrap());
    assert!(con.lock_info("job").unwrap().unwrap().ttl.unwrap() > TTL);
    assert!(con.release(&lock).unwrap());
    assert!(!con.release(&lock).unwrap(), "released twice");
    assert!(!con.extend(&lock, TTL).unwrap(), "extend never re-creates");
    assert_eq!(con.lock_info("job").unwrap(), None);
}

/// A default owner: `host:pid:` and 16 hex digits.
fn host_pid_random(owner: &str) -> bool {
    let parts: Vec<&str> = owner.split(':').collect();
    matches!(parts[..], [host, pid, random]
        if !host.is_empty() && pid == std::process::id().to_string() && random.len() == 16)
}

#[test]
fn sync_acquire_waits_in_the_server() {
    let server = common::lock_server();
    let mut con = server.connection();
    let held = con
        .try_acquire("job", Duration::from_millis(300))
        .unwrap()
        .unwrap();
    let mut other = server.connection();
    let started = Instant::now();
    let lock = other
        .acquire("job", TTL, Wait::For(Duration::from_secs(5)))
        .unwrap()
        .expect("granted when the first lock expired");
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert!(lock.token() > held.token());
    let none = con
        .acquire("job", TTL, Wait::For(Duration::from_millis(100)))
        .unwrap();
    assert_eq!(none, None, "the wait ran out");
}

#[test]
fn a_guard_releases_when_dropped() {
    let server = common::lock_server();
    let mut con = server.connection();
    {
        let guard = con.lock_guard("job", TTL, Wait::No).unwrap().expect("free");
        assert!(guard.lock().token() > 0);
        let mut other = server.connection();
        assert_eq!(other.try_acquire("job", TTL).unwrap(), None);
    }
    assert_eq!(con.lock_info("job").unwrap(), None, "released on drop");
    let mut guard = con.lock_guard("job", TTL, Wait::No).unwrap().unwrap();
    guard.extend(Duration::from_secs(60)).unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg("job")
        .query(guard.connection())
        .unwrap();
    let error = guard.extend(TTL).unwrap_err();
    assert!(
        matches!(&error, Error::LockLost { key } if key == "job"),
        "{error:?}"
    );
    assert!(!guard.release().unwrap());
}

#[test]
fn run_locked_runs_only_when_won_and_always_releases() {
    let server = common::lock_server();
    let mut con = server.connection();
    let done = con
        .run_locked("job", TTL, Wait::No, |lock, con| {
            let _: () = redis::cmd("SET")
                .arg("result")
                .arg(lock.token())
                .query(con)
                .unwrap();
            lock.token()
        })
        .unwrap()
        .expect("won");
    assert!(done.held_to_end);
    assert!(matches!(done.released, Ok(true)));
    let stored: i64 = redis::cmd("GET").arg("result").query(&mut con).unwrap();
    assert_eq!(stored, done.value);
    assert_eq!(con.lock_info("job").unwrap(), None);

    let mut other = server.connection();
    let held = other.try_acquire("job", TTL).unwrap().unwrap();
    let ran = con
        .run_locked("job", TTL, Wait::No, |_, _| unreachable!("busy"))
        .unwrap();
    assert!(ran.is_none());
    other.release(&held).unwrap();

    // Lost under the work: the release then finds someone else's lock.
    let lost = con
        .run_locked("job", TTL, Wait::No, |_, con| {
            let _: i64 = redis::cmd("DEL").arg("job").query(con).unwrap();
        })
        .unwrap()
        .unwrap();
    assert!(!lost.held_to_end);
    assert!(matches!(lost.released, Ok(false)));
}

#[test]
fn a_given_owner_gets_its_token_back() {
    let server = common::lock_server();
    let mut con = server.connection();
    let request = Request::new("job", TTL).owner("worker-1");
    let first = con.acquire_with(request.clone()).unwrap().unwrap();
    let again = con.acquire_with(request).unwrap().unwrap();
    assert_eq!((first.owner(), first.token()), ("worker-1", again.token()));
}

/// A proxy that, the first time it sees a LOCK.ACQUIRE, forwards it to the server,
/// swallows the reply and closes the connection: the server did the work, the client
/// never heard. Everything else passes through.
fn reply_losing_proxy(server_port: u16) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let armed = Arc::new(AtomicBool::new(true));
    thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let upstream = TcpStream::connect(("127.0.0.1", server_port)).unwrap();
            let cut = Arc::new(AtomicBool::new(false));
            let (mut from_client, mut to_server) =
                (client.try_clone().unwrap(), upstream.try_clone().unwrap());
            let (armed, cut_up) = (Arc::clone(&armed), Arc::clone(&cut));
            thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = from_client.read(&mut buf) {
                    let acquire = buf[..n].windows(12).any(|w| w == b"LOCK.ACQUIRE");
                    if acquire && armed.swap(false, Ordering::SeqCst) {
                        cut_up.store(true, Ordering::SeqCst);
                    }
                    if to_server.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
            let (mut from_server, mut to_client) = (upstream, client);
            thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = from_server.read(&mut buf) {
                    if cut.load(Ordering::SeqCst) {
                        let _ = to_client.shutdown(std::net::Shutdown::Both);
                        let _ = from_server.shutdown(std::net::Shutdown::Both);
                        break;
                    }
                    if to_client.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

#[test]
fn an_acquire_whose_reply_was_lost_is_retried_and_learns_its_token() {
    let server = common::lock_server();
    let proxy = reply_losing_proxy(server.port);
    // A Client as connection: every command on a fresh connection through the proxy.
    let mut via_proxy = redis::Client::open(format!("redis://127.0.0.1:{proxy}/")).unwrap();
    let lock = via_proxy
        .try_acquire("job", TTL)
        .unwrap()
        .expect("the retry learns it holds the lock");
    let mut con = server.connection();
    let info = con.lock_info("job").unwrap().unwrap();
    assert_eq!(info.token, lock.token());
    assert_eq!(info.owner, lock.owner());
    if common::on_module("the INFO lock counters") {
        assert_eq!(lock_stat(&mut con, "acquisitions"), 1, "one grant");
        assert_eq!(
            lock_stat(&mut con, "refreshes"),
            1,
            "the retry refreshed it"
        );
    }
}

#[test]
fn a_server_without_the_module_is_a_clear_error() {
    if !common::on_module("a_server_without_the_module_is_a_clear_error") {
        return;
    }
    let server = Server::with(Config::default().without_module());
    let mut con = server.connection();
    let error = con.try_acquire("job", TTL).unwrap_err();
    assert!(matches!(error, Error::ModuleNotLoaded(_)), "{error:?}");
    assert!(error.to_string().contains("loadmodule"));
    // Also inside a durable acquire's pipeline, and on the async paths.
    let durable = Request::new("job", TTL).durable(1, Duration::from_millis(10));
    let error = con.acquire_with(durable.clone()).unwrap_err();
    assert!(matches!(error, Error::ModuleNotLoaded(_)), "{error:?}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let locks = LockClient::new(server.client()).backend(Some(Backend::Module));
    for request in [Request::new("job", TTL), durable] {
        let error = runtime.block_on(locks.acquire_with(request)).unwrap_err();
        assert!(matches!(error, Error::NoBackend(_)), "{error:?}");
        assert!(error.to_string().contains("no module"), "{error}");
    }
    // Left to find a backend, the client takes the library as a script.
    let locks = LockClient::new(server.client());
    let lock = runtime
        .block_on(locks.acquire("job", TTL, Wait::No))
        .unwrap()
        .unwrap();
    assert_eq!(lock.backend(), Backend::Scripts);
}

#[test]
fn server_errors_are_typed() {
    let server = common::lock_server();
    let mut con = server.connection();
    let _: () = redis::cmd("SET")
        .arg("text")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let error = con.try_acquire("text", TTL).unwrap_err();
    assert!(matches!(&error, Error::WrongType(_)), "{error:?}");
    let durable = Request::new("text", TTL).durable(1, Duration::from_millis(10));
    let error = con.acquire_with(durable).unwrap_err();
    assert!(matches!(&error, Error::WrongType(_)), "{error:?}");
    let unknown = redis::cmd("NO.SUCH.COMMAND")
        .query::<()>(&mut con)
        .unwrap_err();
    assert!(
        matches!(Error::from(unknown), Error::Server(_)),
        "an unknown command that is not ours does not blame the module"
    );
}

#[test]
fn a_thread_renewer_keeps_a_lock_past_its_ttl_and_reports_loss() {
    let server = common::lock_server();
    let mut con = server.connection();
    let lock = con
        .try_acquire("job", Duration::from_millis(300))
        .unwrap()
        .unwrap();
    let renewer = Renewer::start(server.client(), &lock);
    thread::sleep(Duration::from_millis(1_000));
    assert!(!renewer.is_lost());
    assert_eq!(con.lock_info("job").unwrap().unwrap().token, lock.token());
    let _: i64 = redis::cmd("DEL").arg("job").query(&mut con).unwrap();
    common::wait_until(Duration::from_secs(2), || renewer.is_lost());
    assert!(renewer.stop());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_acquire_wait_extend_release() {
    let server = common::lock_server();
    let mut con = async_con(&server).await;
    let lock = con
        .try_acquire("job", Duration::from_millis(300))
        .await
        .unwrap()
        .unwrap();
    assert!(con.extend(&lock, Duration::from_millis(400)).await.unwrap());
    let locks = LockClient::new(server.client());
    let waited = locks
        .acquire("job", TTL, Wait::For(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("granted at expiry");
    assert!(waited.token() > lock.token());
    assert!(!con.release(&lock).await.unwrap());
    assert!(lock.is_lost(), "a lock whose release found it gone is lost");
    let info = con.lock_info("job").await.unwrap().unwrap();
    assert_eq!(info.owner, waited.owner());
    assert!(locks.release(&waited).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_guard_releases_in_the_background_when_dropped() {
    let server = common::lock_server();
    let mut con = async_con(&server).await;
    let guard = con.lock_guard("job", TTL, Wait::No).await.unwrap().unwrap();
    let token = guard.lock().token();
    let info = con.lock_info("job").await.unwrap().unwrap();
    assert_eq!(info.token, token);
    drop(guard);
    let deadline = Instant::now() + Duration::from_secs(2);
    while con.lock_info("job").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "not released after drop");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_locked_renews_past_the_first_ttl() {
    let server = common::lock_server();
    let mut con = async_con(&server).await;
    let mut observer = async_con(&server).await;
    let done = con
        .run_locked(
            "job",
            Duration::from_millis(300),
            Wait::No,
            |lock, lost| async move {
                tokio::time::sleep(Duration::from_millis(1_000)).await;
                (lock.token(), lost.is_lost())
            },
        )
        .await
        .unwrap()
        .expect("won");
    assert!(done.held_to_end, "renewal kept it for three TTLs");
    assert!(!done.value.1);
    assert!(matches!(done.released, Ok(true)));
    assert_eq!(
        observer.lock_info("job").await.unwrap(),
        None,
        "released after"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loss_signal_fires_when_the_key_is_deleted_under_the_work() {
    let server = common::lock_server();
    let mut con = async_con(&server).await;
    let mut admin = async_con(&server).await;
    let started = Instant::now();
    let done = con
        .run_locked(
            "job",
            Duration::from_millis(300),
            Wait::No,
            |_lock, lost| async move {
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    let _: i64 = redis::cmd("DEL")
                        .arg("job")
                        .query_async(&mut admin)
                        .await
                        .unwrap();
                });
                assert_eq!(lost.cause(), None, "held");
                tokio::select! {
                    _ = lost.lost() => lost.cause(),
                    _ = tokio::time::sleep(Duration::from_secs(10)) => None,
                }
            },
        )
        .await
        .unwrap()
        .unwrap();
    // The renewal at a third of the TTL was answered 0: the signal says so.
    assert_eq!(done.value, Some(LossCause::Refused));
    assert!(!done.held_to_end);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_manager_survives_a_server_restart() {
    let mut server = common::lock_server();
    let mut con = server.client().get_connection_manager().await.unwrap();
    let first = con.try_acquire("job", TTL).await.unwrap().unwrap();
    server.restart(); // no persistence: the lock is gone with the old process
    if common::backend_name() == "functions" {
        common::load_library(&mut server.connection()); // and so is the library
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let second = loop {
        match con.try_acquire("job", TTL).await {
            Ok(lock) => break lock.expect("free after the restart"),
            Err(Error::Connection(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(other) => panic!("{other:?}"),
        }
    };
    assert_ne!(first.owner(), second.owner());
    assert!(con.release(&second).await.unwrap());
}

/// What a ghost waiter's thread yields: its result, and its connection, kept open
/// so that only the withdrawal (not a disconnect) can take it out of the queue.
type Ghost = (
    Result<Option<redis_lock_client::Lock>, Error>,
    Box<dyn std::any::Any + Send>,
);

/// Holds "job", queues `ghost` (a waiter on a connection whose timeout is shorter
/// than its wait) and then a patient waiter, and checks that the ghost fails with
/// `ResponseTimeout` and is withdrawn: once the holder releases, the lock reaches the
/// patient waiter and nobody holds it under the ghost's owner id.
fn a_wait_longer_than_the_response_timeout(
    ghost: impl FnOnce(&Server) -> thread::JoinHandle<Ghost>,
) {
    let server = common::lock_server();
    let mut holder = server.connection();
    let held = holder.try_acquire("job", TTL).unwrap().unwrap();
    let waiting = |con: &mut redis::Connection, n: u64| {
        common::wait_until(Duration::from_secs(5), || {
            con.lock_info("job")
                .unwrap()
                .is_some_and(|info| info.waiters == n)
        })
    };
    let started = Instant::now();
    let ghost = ghost(&server);
    waiting(&mut holder, 1);
    let mut patient = server.connection();
    let patient =
        thread::spawn(move || patient.acquire("job", TTL, Wait::For(Duration::from_secs(20))));
    waiting(&mut holder, 2);
    let (failed, _connection) = ghost.join().unwrap();
    assert!(
        matches!(failed, Err(Error::ResponseTimeout(_))),
        "{failed:?}"
    );
    let message = failed.unwrap_err().to_string();
    assert!(message.contains("read timeout") && !message.contains("AsyncConnectionConfig"));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "failed after {:?}",
        started.elapsed()
    );
    assert!(holder.release(&held).unwrap());
    let lock = patient
        .join()
        .unwrap()
        .unwrap()
        .expect("the patient waiter got it");
    let info = holder.lock_info("job").unwrap().unwrap();
    assert_eq!(info.owner, lock.owner());
    assert_eq!(info.waiters, 0);
    if common::on_module("the INFO lock counters") {
        assert_eq!(
            lock_stat(&mut holder, "hand_offs"),
            2,
            "ghost, then the patient waiter"
        );
    }
}

#[test]
fn a_sync_wait_past_the_read_timeout_fails_clearly_and_is_withdrawn() {
    a_wait_longer_than_the_response_timeout(|server| {
        let mut con = server.connection();
        con.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        thread::spawn(move || {
            let result = con.acquire("job", TTL, Wait::For(Duration::from_secs(20)));
            (result, Box::new(con) as Box<dyn std::any::Any + Send>)
        })
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_on_its_own_connection_outlasts_the_default_timeout_and_cancels_cleanly() {
    let server = common::lock_server();
    let mut con = async_con(&server).await;
    let held = con.try_acquire("job", TTL).await.unwrap().unwrap();
    let waiters = |con: &mut redis::aio::MultiplexedConnection| {
        let mut con = con.clone();
        async move {
            con.lock_info("job")
                .await
                .unwrap()
                .map_or(0, |info| info.waiters)
        }
    };
    let locks = LockClient::new(server.client());
    let wait = Wait::For(Duration::from_secs(20));

    // Cancelled while queued: its connection closes and the server forgets it.
    let cancelled = tokio::spawn({
        let locks = locks.clone();
        async move { locks.acquire("job", TTL, wait).await }
    });
    while waiters(&mut con).await != 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cancelled.abort();
    let deadline = Instant::now() + Duration::from_secs(5);
    while waiters(&mut con).await != 0 {
        assert!(
            Instant::now() < deadline,
            "the cancelled waiter stayed queued"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // Not cancelled: it waits past redis-rs's 500 ms default, until the release.
    let patient = tokio::spawn({
        let locks = locks.clone();
        async move { locks.acquire("job", TTL, wait).await }
    });
    while waiters(&mut con).await != 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(con.release(&held).await.unwrap());
    let lock = patient.await.unwrap().unwrap().expect("granted on release");
    assert!(lock.token() > held.token());
    let info = con.lock_info("job").await.unwrap().unwrap();
    assert_eq!(info.owner, lock.owner());
    assert_eq!(info.waiters, 0);
    if common::on_module("the INFO lock counters") {
        assert_eq!(lock_stat(&mut server.connection(), "hand_offs"), 1);
    }
}

/// `NOSCRIPT` (a restart, `SCRIPT FLUSH`, a failover to a node that never saw the
/// script) loads the library again and sends the call once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripts_backend_loads_the_library_again_after_a_script_flush() {
    let server = Server::with(Config::default().without_module());
    let flush = || {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut server.connection())
            .unwrap();
    };
    let locks = LockClient::new(server.client()).backend(Some(Backend::Scripts));
    flush();
    let lock = locks.acquire("job", TTL, Wait::No).await.unwrap().unwrap();
    assert_eq!(lock.backend(), Backend::Scripts);
    flush();
    assert!(locks.extend(&lock, TTL).await.unwrap());
    flush();
    let info = locks.lock_info("job").await.unwrap().unwrap();
    assert_eq!(info.owner, lock.owner());
    flush();
    assert!(locks.release(&lock).await.unwrap());
}

/// A library older or newer than the client accepts is refused before any lock
/// call, naming its version and the range; a server with nothing says what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_older_or_newer_than_the_client_or_none_is_a_clear_error() {
    let server = Server::with(Config::default().without_module());
    let current = format!("local VERSION = {LIBRARY_VERSION}\n");
    let old = common::library_source().replace(&current, "local VERSION = 1\n");
    assert_ne!(old, common::library_source());
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(old)
        .query(&mut server.connection())
        .unwrap();
    let locks = LockClient::new(server.client());
    let error = locks.acquire("job", TTL, Wait::No).await.unwrap_err();
    assert!(
        matches!(error, Error::LibraryTooOld { found: 1, min, max }
            if min == MIN_LIBRARY_VERSION && max == LIBRARY_VERSION),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(text.contains("version 1, older"), "{text}");
    assert!(text.contains("redis-lock functions load"), "{text}");
    // A newer library than this client knows: upgrade the client.
    let newer = common::library_source().replace(
        &current,
        &format!("local VERSION = {}\n", LIBRARY_VERSION + 1),
    );
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(newer)
        .query(&mut server.connection())
        .unwrap();
    let error = LockClient::new(server.client())
        .acquire("job", TTL, Wait::No)
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::LibraryTooNew { found, .. } if found == LIBRARY_VERSION + 1),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains(&format!("version {}, newer", LIBRARY_VERSION + 1)),
        "{text}"
    );
    assert!(text.contains("upgrade this client"), "{text}");
    assert!(
        locks.load_library().await.unwrap() >= 1,
        "functions load upgrades it"
    );
    let locks = LockClient::new(server.client());
    let lock = locks.acquire("job", TTL, Wait::No).await.unwrap().unwrap();
    assert_eq!(lock.backend(), Backend::Functions);

    // No FUNCTION, no EVALSHA for this user: one line that says what to do.
    let mut admin = server.connection();
    let acl = [
        "SETUSER",
        "app",
        "on",
        "nopass",
        "~*",
        "+@all",
        "-function",
        "-fcall",
        "-fcall_ro",
        "-evalsha",
        "-eval",
        "-script",
    ];
    let _: () = redis::cmd("ACL").arg(&acl[..]).query(&mut admin).unwrap();
    let port = server.port;
    let app = redis::Client::open(format!("redis://app:secret@127.0.0.1:{port}/")).unwrap();
    let error = LockClient::new(app)
        .acquire("job2", TTL, Wait::No)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::NoBackend(_)), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("redis-lock functions load"), "{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
}

/// A durable acquire is a pipeline: its `NOSCRIPT` is reloaded and retried too.
#[test]
fn a_durable_acquire_through_scripts_survives_a_script_flush() {
    let server = Server::with(Config::default().without_module());
    let mut con = server.connection();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
    let request = Request::new("job", TTL)
        .durable(0, Duration::from_millis(10))
        .backend(Backend::Scripts);
    let lock = redis_lock_client::LockCommands::acquire_with(&mut con, request)
        .unwrap()
        .expect("granted");
    assert_eq!(lock.backend(), Backend::Scripts);
}
