//! Leader election (contract.md "Leaders") against real servers on every backend:
//! the module, the library by `FCALL` and by `EVALSHA` (Redis 6.2 too where present),
//! and a Cluster. One leader at a time, terms that grow, resign hands over through
//! the queue, observers see each leader once and in term order, and a deposed
//! leader's writes are fenced.

use redis_lock_testkit as common;

use std::time::{Duration, Instant};

use common::proxy::Proxy;
use common::{Config, Server};
use redis_lock_client::{Backend, Election, Error, Leader, LockClient};

const TTL: Duration = Duration::from_secs(10);

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

fn election(on: &On, key: &str) -> Election {
    let locks = LockClient::new(on.server.client()).backend(Some(on.backend));
    Election::new(locks, key, TTL).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_publishes_its_value_and_resign_hands_over_through_the_queue() {
    for on in every_backend() {
        let election = election(&on, "scheduler");
        assert_eq!(election.record_key(), "{scheduler}:leader");
        assert_eq!(election.leader().await.unwrap(), None, "{}", on.name);
        let first = election.campaign("node-a:8080").await.unwrap();
        assert_eq!(
            election.leader().await.unwrap(),
            Some(Leader {
                term: first.term(),
                value: b"node-a:8080".to_vec()
            }),
            "{}",
            on.name
        );
        let rival = {
            let election = election.clone();
            tokio::spawn(async move {
                let leadership = election.campaign("node-b:8080").await.unwrap();
                (leadership, Instant::now())
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!rival.is_finished(), "{}: one leader at a time", on.name);
        let resigned = Instant::now();
        assert!(first.resign().await.unwrap(), "{}", on.name);
        let (second, led) = rival.await.unwrap();
        let handover = led.duration_since(resigned);
        // The queue hands over at the release, far inside the TTL a lapse would take.
        assert!(
            handover < TTL / 4,
            "{}: handed over after {handover:?}",
            on.name
        );
        let current = election.leader().await.unwrap().unwrap();
        assert_eq!(current.term, second.term(), "{}", on.name);
        assert_eq!(current.value, b"node-b:8080", "{}", on.name);
        assert!(second.resign().await.unwrap(), "{}", on.name);
        assert_eq!(
            election.leader().await.unwrap(),
            None,
            "{}: resigned",
            on.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_sees_every_leader_once_in_term_order() {
    for on in every_backend() {
        let election = election(&on, "{svc}:leader-lock");
        let mut observer = election.observe();
        observer.start().await.unwrap(); // from here on, before the first campaign
        let seen = tokio::spawn(async move {
            let mut seen = Vec::new();
            while seen.len() < 6 {
                seen.push(observer.next().await.unwrap());
            }
            seen
        });
        // Six leaders, one after another, each only for a moment: every one is seen.
        let mut led = Vec::new();
        for n in 0..6 {
            let leadership = election.campaign(format!("node-{n}")).await.unwrap();
            led.push(Leader {
                term: leadership.term(),
                value: format!("node-{n}").into_bytes(),
            });
            leadership.resign().await.unwrap();
        }
        let seen = tokio::time::timeout(Duration::from_secs(10), seen)
            .await
            .expect("the observer saw six leaders")
            .unwrap();
        assert_eq!(seen, led, "{}", on.name);
        assert!(
            led.windows(2).all(|w| w[0].term < w[1].term),
            "{}: terms grow",
            on.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_starts_with_the_current_leader() {
    for on in every_backend() {
        let election = election(&on, "current");
        let leadership = election.campaign("me").await.unwrap();
        let mut observer = election.observe();
        let first = tokio::time::timeout(Duration::from_secs(3), observer.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first.term, leadership.term(), "{}", on.name);
        leadership.resign().await.unwrap();
        let next = election.campaign("you").await.unwrap();
        let second = tokio::time::timeout(Duration::from_secs(3), observer.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (second.term, second.value),
            (next.term(), b"you".to_vec()),
            "{}",
            on.name
        );
        next.resign().await.unwrap();
    }
}

/// A leader cut off from the server (black hole) is told before the rival leads;
/// the rival's term is greater; the deposed leader's term no longer writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_is_told_first_and_its_writes_are_fenced() {
    for on in every_backend() {
        let proxy = Proxy::start(on.server.port);
        let ttl = Duration::from_millis(1500);
        let cut_off = Election::new(
            LockClient::new(proxy.client()).backend(Some(on.backend)),
            "{cut}",
            ttl,
        )
        .unwrap();
        let direct = Election::new(
            LockClient::new(on.server.client()).backend(Some(on.backend)),
            "{cut}",
            ttl,
        )
        .unwrap();
        let old = cut_off.campaign("old").await.unwrap();
        let lost = old.lost();
        let told = tokio::spawn(async move {
            lost.lost().await;
            Instant::now()
        });
        proxy.black_hole();
        let new = direct.campaign("new").await.unwrap();
        let led = Instant::now();
        let told = told.await.unwrap();
        assert!(
            told <= led,
            "{}: told {:?} after the rival led",
            on.name,
            told - led
        );
        assert!(new.term() > old.term(), "{}", on.name);
        let locks = LockClient::new(on.server.client()).backend(Some(on.backend));
        let out = "{cut}:out";
        let refused = locks
            .guard_token::<()>(
                "{cut}",
                old.term(),
                &[out],
                redis::cmd("SET").arg(out).arg("old"),
            )
            .await;
        assert!(
            matches!(refused, Err(Error::Fenced { .. })),
            "{}: {refused:?}",
            on.name
        );
        let () = new
            .guard(&[out], redis::cmd("SET").arg(out).arg("new"))
            .await
            .unwrap();
        let leader = direct.leader().await.unwrap().unwrap();
        assert_eq!(leader.value, b"new", "{}", on.name);
        new.resign().await.unwrap();
        proxy.heal();
        drop(old);
    }
}

/// `run_while_leader` drops the work when leadership is lost (the key deleted by an
/// administrator) and, asked to, campaigns again with a greater term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_while_leader_campaigns_again_after_a_loss() {
    for on in every_backend() {
        let election = election(&on, "again");
        let terms = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (client, seen) = (on.server.client(), terms.clone());
        let ran = election
            .run_while_leader("me", true, move |lock, lost| {
                let (client, seen) = (client.clone(), seen.clone());
                async move {
                    let first = {
                        let mut seen = seen.lock().unwrap();
                        seen.push(lock.token());
                        seen.len() == 1
                    };
                    if first {
                        let mut con = client.get_multiplexed_async_connection().await.unwrap();
                        let _: i64 = redis::cmd("DEL")
                            .arg("again")
                            .query_async(&mut con)
                            .await
                            .unwrap();
                        lost.lost().await; // the renewal finds the lock gone
                        std::future::pending::<()>().await; // dropped, never ends
                    }
                    lock.token()
                }
            })
            .await
            .unwrap();
        let terms = terms.lock().unwrap().clone();
        assert_eq!(terms.len(), 2, "{}", on.name);
        assert!(terms[1] > terms[0], "{}", on.name);
        assert_eq!(ran, Some(terms[1]), "{}", on.name);
        assert_eq!(
            election.leader().await.unwrap(),
            None,
            "{}: resigned at the end",
            on.name
        );
    }
}

#[tokio::test]
async fn bad_keys_and_values_are_refused_before_anything_is_sent() {
    let locks = LockClient::new(redis::Client::open("redis://127.0.0.1:1/").unwrap());
    let error = Election::new(locks.clone(), "a}b", TTL).unwrap_err();
    assert!(
        error.to_string().contains("invalid election key"),
        "{error}"
    );
    let error = Election::new(locks.clone(), "k", Duration::ZERO).unwrap_err();
    assert!(error.to_string().contains("ttl"), "{error}");
    let election = Election::new(locks, "k", TTL).unwrap();
    let error = election.campaign(vec![b'x'; 1025]).await.unwrap_err();
    assert!(error.to_string().contains("at most 1024"), "{error}");
}

/// The record outlives a leader that never resigned (its key deleted, its lease
/// lapsed): `leader` reads the lock too, and answers none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lock_is_gone_is_not_reported() {
    for on in every_backend() {
        let election = election(&on, "gone");
        let leadership = election.campaign("me").await.unwrap();
        let _: i64 = redis::cmd("DEL")
            .arg("gone")
            .query(&mut on.server.connection())
            .unwrap();
        assert_eq!(election.leader().await.unwrap(), None, "{}", on.name);
        drop(leadership);
    }
}

/// Someone wrote another type at the record's key: a campaign says so, naming the
/// record, and leaves nothing held; `leader` and an observer say so too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_of_another_type_is_named_and_nothing_is_held() {
    for on in every_backend() {
        let election = election(&on, "typed");
        let _: () = redis::cmd("SET")
            .arg(election.record_key())
            .arg("x")
            .query(&mut on.server.connection())
            .unwrap();
        let error = election.campaign("me").await.unwrap_err();
        assert!(
            matches!(&error, Error::NotARecord { record } if record == "{typed}:leader"),
            "{}: {error}",
            on.name
        );
        let held: i64 = redis::cmd("EXISTS")
            .arg("typed")
            .query(&mut on.server.connection())
            .unwrap();
        assert_eq!(held, 0, "{}: the lock was released", on.name);
        assert!(
            matches!(election.leader().await, Err(Error::NotARecord { .. })),
            "{}",
            on.name
        );
        let mut observer = election.observe();
        assert!(
            matches!(observer.next().await, Err(Error::NotARecord { .. })),
            "{}",
            on.name
        );
    }
}
