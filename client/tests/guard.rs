//! Guarded writes (contract.md "Fenced writes") through every API of the crate,
//! against real servers on every backend in one run: the module (`LOCK.GUARD`), the
//! library by `FCALL lock_guard`, and by `EVALSHA` (on Redis 6.2 too where present).
//! The write lands while the token holds the lock; once it does not, nothing is
//! written, the error is `Error::Fenced`, and the lock's loss signal fires at once.

use redis_lock_testkit as common;

use std::time::Duration;

use common::{Config, Server};
use redis::Value;
use redis_lock_client::{
    AsyncLockCommands, Backend, BlockingLockClient, Error, LockClient, LockCommands, LossCause,
    Request, Wait, LIBRARY_SOURCE,
};

const TTL: Duration = Duration::from_secs(60);

/// A server and the backend the tests use on it.
struct On {
    backend: Backend,
    server: Server,
    name: &'static str,
}

fn library_server() -> Server {
    let server = Server::with(Config::default().without_module());
    common::load_library(&mut server.connection());
    server
}

/// Every backend: the module, the library by FCALL, the library by EVALSHA (on the
/// Debian server, and on Redis 6.2 where there is one).
fn every_backend() -> Vec<On> {
    let mut all = vec![
        On {
            backend: Backend::Module,
            server: Server::start(),
            name: "module",
        },
        On {
            backend: Backend::Functions,
            server: library_server(),
            name: "functions",
        },
        On {
            backend: Backend::Scripts,
            server: Server::with(Config::default().without_module()),
            name: "scripts",
        },
    ];
    if let Some(binary) = common::redis62_server() {
        all.push(On {
            backend: Backend::Scripts,
            server: Server::with(Config::default().without_module().binary(binary)),
            name: "scripts on 6.2",
        });
    }
    all
}

fn get(server: &Server, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut server.connection())
        .unwrap()
}

fn set(key: &str, value: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg(value);
    cmd
}

#[test]
fn a_guarded_write_lands_and_replies_as_the_command_on_every_backend() {
    for on in every_backend() {
        let mut con = on.server.connection();
        let request = Request::new("{job}", TTL).backend(on.backend);
        let lock = con.acquire_with(request).unwrap().expect("free");
        let out = "{job}:out";
        let () = con.guard(&lock, &[out], &set(out, "first")).unwrap();
        assert_eq!(
            get(&on.server, out).as_deref(),
            Some("first"),
            "{}",
            on.name
        );
        let read: Option<String> = con
            .guard(&lock, &[out], redis::cmd("GET").arg(out))
            .unwrap();
        assert_eq!(read.as_deref(), Some("first"), "{}", on.name);
        let counter = "{job}:n";
        let n: i64 = con
            .guard(&lock, &[counter], redis::cmd("INCRBY").arg(counter).arg(5))
            .unwrap();
        assert_eq!(n, 5, "{}", on.name);
        let raw: Value = con
            .guard(
                &lock,
                &[out, counter],
                redis::cmd("MGET").arg(out).arg(counter),
            )
            .unwrap();
        assert_eq!(
            raw,
            Value::Array(vec![
                Value::BulkString(b"first".to_vec()),
                Value::BulkString(b"5".to_vec())
            ]),
            "{}",
            on.name
        );
        // The command's own error is the reply; the lock is not lost for it.
        let error = con
            .guard::<i64>(&lock, &[out], redis::cmd("INCR").arg(out))
            .unwrap_err();
        assert!(
            matches!(&error, Error::Server(e) if e.code() == Some("ERR")),
            "{}: {error:?}",
            on.name
        );
        assert!(!lock.is_lost(), "{}", on.name);
        assert!(con.release(&lock).unwrap());
    }
}

#[test]
fn a_write_after_the_lock_was_taken_away_is_fenced_writes_nothing_and_fires_the_loss() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for on in every_backend() {
        let mut con = on.server.connection();
        let request = Request::new("{job}", TTL).backend(on.backend);
        let lock = con.acquire_with(request).unwrap().expect("free");
        let lost = lock.signal();
        let _: i64 = redis::cmd("DEL")
            .arg("{job}")
            .query(&mut on.server.connection())
            .unwrap();
        let error = con
            .guard::<()>(&lock, &["{job}:out"], &set("{job}:out", "stale"))
            .unwrap_err();
        match &error {
            Error::Fenced { key, token, reason } => {
                assert_eq!(key, "{job}");
                assert_eq!(*token, lock.token());
                assert!(reason.contains("the lock is free"), "{}: {reason}", on.name);
            }
            other => panic!("{}: {other:?}", on.name),
        }
        assert_eq!(get(&on.server, "{job}:out"), None, "{}", on.name);
        assert!(lock.is_lost(), "{}", on.name);
        assert_eq!(lock.cause(), Some(LossCause::Fenced), "{}", on.name);
        // The async signal is told at once, not at the lease's deadline a minute on.
        runtime.block_on(async {
            tokio::time::timeout(Duration::from_millis(500), lost.lost())
                .await
                .expect("the loss signal fired")
        });
        // Known lost: the next write is refused before anything is sent.
        let again = con
            .guard::<()>(&lock, &["{job}:out"], &set("{job}:out", "later"))
            .unwrap_err();
        assert!(
            matches!(again, Error::LockLost { .. }),
            "{}: {again:?}",
            on.name
        );
    }
}

#[test]
fn a_token_of_a_holder_that_was_replaced_is_fenced_naming_the_new_token() {
    for on in every_backend() {
        let locks = BlockingLockClient::new(on.server.client()).backend(Some(on.backend));
        let old = locks
            .acquire("{job}", TTL, Wait::No)
            .unwrap()
            .expect("free");
        assert!(locks.release(&old).unwrap());
        let new = locks
            .acquire("{job}", TTL, Wait::No)
            .unwrap()
            .expect("free");
        let error = locks
            .guard_token::<()>(
                "{job}",
                old.token(),
                &["{job}:out"],
                &set("{job}:out", "stale"),
            )
            .unwrap_err();
        assert!(
            matches!(&error, Error::Fenced { reason, .. }
                if reason.contains(&format!("held with token {}", new.token()))),
            "{}: {error:?}",
            on.name
        );
        assert_eq!(get(&on.server, "{job}:out"), None, "{}", on.name);
        let () = locks
            .guard_token(
                "{job}",
                new.token(),
                &["{job}:out"],
                &set("{job}:out", "new"),
            )
            .unwrap();
        let () = locks
            .guard(&new, &["{job}:out"], &set("{job}:out", "newer"))
            .unwrap();
        assert_eq!(get(&on.server, "{job}:out").as_deref(), Some("newer"));
        assert!(!new.is_lost(), "{}", on.name);
        // A released lock is known lost: not sent.
        assert!(locks.release(&new).unwrap());
        let refused = locks
            .guard::<()>(&new, &["{job}:out"], &set("{job}:out", "late"))
            .unwrap_err();
        assert!(matches!(refused, Error::LockLost { .. }), "{refused:?}");
        assert_eq!(get(&on.server, "{job}:out").as_deref(), Some("newer"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_apis_guard_and_fence_alike() {
    for on in every_backend() {
        let mut con = on
            .server
            .client()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let request = Request::new("{job}", TTL).backend(on.backend);
        let lock = AsyncLockCommands::acquire_with(&mut con, request)
            .await
            .unwrap()
            .expect("free");
        let () = con
            .guard(&lock, &["{job}:a"], &set("{job}:a", "1"))
            .await
            .unwrap();
        let locks = LockClient::new(on.server.client()).backend(Some(on.backend));
        let () = locks
            .guard(&lock, &["{job}:b"], &set("{job}:b", "2"))
            .await
            .unwrap();
        let token: Option<String> = locks
            .guard_token(
                "{job}",
                lock.token(),
                &["{job}:a"],
                redis::cmd("GET").arg("{job}:a"),
            )
            .await
            .unwrap();
        assert_eq!(token.as_deref(), Some("1"), "{}", on.name);
        assert_eq!(
            get(&on.server, "{job}:b").as_deref(),
            Some("2"),
            "{}",
            on.name
        );
        let mut admin = on.server.connection();
        let _: i64 = redis::cmd("DEL").arg("{job}").query(&mut admin).unwrap();
        let error = locks
            .guard::<()>(&lock, &["{job}:b"], &set("{job}:b", "stale"))
            .await
            .unwrap_err();
        assert!(
            matches!(error, Error::Fenced { .. }),
            "{}: {error:?}",
            on.name
        );
        assert_eq!(lock.cause(), Some(LossCause::Fenced));
        assert_eq!(
            get(&on.server, "{job}:b").as_deref(),
            Some("2"),
            "{}",
            on.name
        );
    }
}

#[test]
fn the_library_refuses_a_key_not_declared_and_the_lock_key_is_refused_everywhere() {
    for on in every_backend() {
        let mut con = on.server.connection();
        let request = Request::new("{job}", TTL).backend(on.backend);
        let lock = con.acquire_with(request).unwrap().expect("free");
        let none: [&str; 0] = [];
        let undeclared = con.guard::<()>(&lock, &none, &set("{job}:out", "v"));
        if on.backend == Backend::Module {
            undeclared.expect("the module finds the command's keys itself");
        } else {
            let error = undeclared.unwrap_err();
            assert!(
                matches!(&error, Error::Server(_)) && error.to_string().contains("not declared"),
                "{}: {error}",
                on.name
            );
            assert_eq!(get(&on.server, "{job}:out"), None, "{}", on.name);
        }
        let error = con
            .guard::<()>(&lock, &["{job}"], redis::cmd("DEL").arg("{job}"))
            .unwrap_err();
        assert!(matches!(error, Error::Server(_)), "{}: {error:?}", on.name);
        assert!(!lock.is_lost(), "{}", on.name);
        assert!(con.release(&lock).unwrap(), "the lock key was not touched");
    }
}

/// The library as loaded before `lock_guard` came: the same file without it.
fn library_without_guard() -> String {
    let registration = "{ name = 'lock_guard', full = lock_guard, flags = {}, own_oom = true },";
    assert!(
        LIBRARY_SOURCE.contains(registration),
        "the registration line"
    );
    LIBRARY_SOURCE.replace(registration, "")
}

#[test]
fn a_library_loaded_before_lock_guard_is_named_and_one_gone_is_called_as_a_script() {
    let server = library_server();
    let mut con = server.connection();
    let request = Request::new("{job}", TTL).backend(Backend::Functions);
    let lock = con.acquire_with(request).unwrap().expect("free");
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library_without_guard())
        .query(&mut con)
        .unwrap();
    let error = con
        .guard::<()>(&lock, &["{job}:out"], &set("{job}:out", "v"))
        .unwrap_err();
    assert!(
        matches!(error, Error::LibraryWithoutGuard { found: Some(3) }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("redis-lock functions load"),
        "{error}"
    );
    assert!(!lock.is_lost(), "nothing said the lock is gone");
    // The library flushed (a restart without persistence): the scripts path has it.
    let _: () = redis::cmd("FUNCTION").arg("FLUSH").query(&mut con).unwrap();
    let () = con
        .guard(&lock, &["{job}:out"], &set("{job}:out", "v"))
        .unwrap();
    assert_eq!(get(&server, "{job}:out").as_deref(), Some("v"));
}

#[test]
fn a_lease_that_ran_out_is_refused_before_sending() {
    let server = Server::start();
    let mut con = server.connection();
    // 100 ms: the lease (less its 50 ms margin) ends before the server's TTL. Sent,
    // the write would land (the server still holds) or be fenced: either fails here.
    let lock = con
        .try_acquire("{job}", Duration::from_millis(100))
        .unwrap()
        .expect("free");
    std::thread::sleep(Duration::from_millis(60));
    assert!(lock.is_lost());
    let error = con
        .guard::<()>(&lock, &["{job}:out"], &set("{job}:out", "late"))
        .unwrap_err();
    assert!(matches!(error, Error::LockLost { .. }), "{error:?}");
    assert_eq!(get(&server, "{job}:out"), None);
}
