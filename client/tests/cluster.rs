//! Locks in a real 3-master Redis Cluster: every slot, -MOVED, hash tags, redis-cli -c,
//! the client crate on cluster connections, and a resharded slot carrying its locks.

use redis_lock_testkit as common;

use std::process::Command;
use std::time::Duration;

use common::{query, Cluster};
use redis::cluster::ClusterClient;
use redis::Value;
use redis_lock_client::{AsyncLockCommands, LockCommands, Wait};

const TTL: Duration = Duration::from_secs(60);

#[test]
fn locks_work_in_every_slot_through_a_cluster_connection() {
    let cluster = Cluster::start(3);
    let mut con = ClusterClient::new(cluster.urls())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut per_node = [0; 3];
    for i in 0..60 {
        let key = format!("job:{i}");
        let lock = con.try_acquire(&key, TTL).unwrap().expect("free");
        let node = cluster.owner_of(&key);
        per_node[node] += 1;
        let mut direct = cluster.nodes[node].connection();
        let info = direct.lock_info(&key).unwrap().expect("held on its node");
        assert_eq!(info.token, lock.token());
        assert_eq!(con.try_acquire(&key, TTL).unwrap(), None);
        assert!(con.release(&lock).unwrap());
    }
    assert!(
        per_node.iter().all(|&n| n > 0),
        "keys on every node: {per_node:?}"
    );
}

#[test]
fn a_wrong_node_answers_moved_and_redis_cli_c_follows_it() {
    let cluster = Cluster::start(3);
    let key = "report:daily";
    let owner = cluster.owner_of(key);
    let other = (owner + 1) % 3;
    let mut wrong = cluster.nodes[other].connection();
    for args in [
        &["LOCK.ACQUIRE", key, "me", "1000"][..],
        &["LOCK.RELEASE", key, "me"],
        &["LOCK.EXTEND", key, "me", "1000"],
        &["LOCK.INFO", key],
    ] {
        let error = query::<Value>(&mut wrong, args).unwrap_err();
        assert_eq!(error.code(), Some("MOVED"), "{args:?}: {error}");
    }
    let output = Command::new("redis-cli")
        .args(["-c", "-p", &cluster.nodes[other].port.to_string()])
        .args(["LOCK.ACQUIRE", key, "me", "60000"])
        .output()
        .unwrap();
    let token: i64 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap();
    let mut right = cluster.nodes[owner].connection();
    assert_eq!(right.lock_info(key).unwrap().unwrap().token, token);
}

#[test]
fn hash_tags_keep_locks_in_one_slot() {
    let cluster = Cluster::start(3);
    let (a, b) = ("{payments}:refunds", "{payments}:payouts");
    assert_eq!(cluster.slot(a), cluster.slot(b));
    let node = cluster.owner_of(a);
    let mut con = cluster.nodes[node].connection();
    let (ta, tb): (i64, i64) = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg(a)
        .arg("me")
        .arg(10_000)
        .cmd("LOCK.ACQUIRE")
        .arg(b)
        .arg("me")
        .arg(10_000)
        .query(&mut con)
        .unwrap();
    assert!(tb > ta);
    let cross = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg(a)
        .arg("me")
        .arg(10_000)
        .cmd("LOCK.ACQUIRE")
        .arg("elsewhere:{x}")
        .arg("me")
        .arg(10_000)
        .query::<Value>(&mut con);
    if cluster.slot("elsewhere:{x}") != cluster.slot(a) {
        let error = cross.unwrap_err();
        assert!(
            matches!(
                error.code(),
                Some("CROSSSLOT") | Some("MOVED") | Some("EXECABORT")
            ),
            "{error}"
        );
    }
}

/// The node that serves `key`, the node a resharding will move it to, and a
/// connection to each.
fn source_and_target(
    cluster: &Cluster,
    key: &str,
) -> (usize, usize, redis::Connection, redis::Connection) {
    let from = cluster.owner_of(key);
    let to = (from + 1) % 3;
    (
        from,
        to,
        cluster.nodes[from].connection(),
        cluster.nodes[to].connection(),
    )
}

/// Marks `key`'s slot as moving from node `from` to node `to` and moves `key` with
/// MIGRATE, as `redis-cli --cluster reshard` does; returns the slot.
fn migrate_key(cluster: &Cluster, key: &str, from: usize, to: usize) -> String {
    let slot = cluster.slot(key).to_string();
    let (from_id, to_id) = (cluster.id(from), cluster.id(to));
    let mut source = cluster.nodes[from].connection();
    let mut target = cluster.nodes[to].connection();
    let _: () = query(
        &mut target,
        &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id],
    )
    .unwrap();
    let _: () = query(
        &mut source,
        &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id],
    )
    .unwrap();
    let port = cluster.nodes[to].port.to_string();
    let _: String = query(
        &mut source,
        &["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS", key],
    )
    .unwrap();
    slot
}

/// Gives `slot` to node `to` on every node, ending a migration.
fn finish_migration(cluster: &Cluster, slot: &str, to: usize) {
    let to_id = cluster.id(to);
    for node in &cluster.nodes {
        let _: () = query(
            &mut node.connection(),
            &["CLUSTER", "SETSLOT", slot, "NODE", &to_id],
        )
        .unwrap();
    }
    cluster.wait_until_ok();
}

#[test]
fn resharding_a_slot_carries_held_locks_with_owner_ttl_and_token() {
    let cluster = Cluster::start(3);
    let key = "job:reshard";
    let (from, to, mut source, mut target) = source_and_target(&cluster, key);
    // A token far above any clock-derived one: only the migrated key can carry it.
    let high = 100_000_000_000_000_000_i64;
    let (secs, _): (i64, i64) = query(&mut source, &["TIME"]).unwrap();
    let at = (secs + 60) * 1000;
    common::restore_lock(&mut source, key, b"owner-1", high, Some(at)).unwrap();

    let slot = migrate_key(&cluster, key, from, to);
    finish_migration(&cluster, &slot, to);
    assert_eq!(cluster.owner_of(key), to);

    let info = target.lock_info(key).unwrap().expect("the lock moved");
    assert_eq!((info.owner.as_bytes(), info.token), (&b"owner-1"[..], high));
    let moved_at: i64 = query(&mut target, &["PEXPIRETIME", key]).unwrap();
    // MIGRATE carries the TTL as time left, so the expiry may move by the transfer.
    assert!((moved_at - at).abs() < 100, "expiry {moved_at}, was {at}");
    let mut con = ClusterClient::new(cluster.urls())
        .unwrap()
        .get_connection()
        .unwrap();
    let released: i64 = redis::cmd("LOCK.RELEASE")
        .arg(key)
        .arg("owner-1")
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 1);
    let next = con.try_acquire(key, TTL).unwrap().unwrap();
    assert!(next.token() > high, "{} after {high}", next.token());
}

#[test]
fn waiters_of_a_lock_migrated_away_are_sent_after_it_not_granted_it() {
    let cluster = Cluster::start(3);
    let key = "job:waited";
    let (from, to, mut source, mut target) = source_and_target(&cluster, key);
    let held: i64 = query(&mut source, &["LOCK.ACQUIRE", key, "owner-1", "60000"]).unwrap();
    let mut waiting = cluster.nodes[from].connection();
    let key_owned = key.to_string();
    let waiter = std::thread::spawn(move || {
        redis::cmd("LOCK.ACQUIRE")
            .arg(key_owned)
            .arg("owner-2")
            .arg(60_000)
            .arg("WAIT")
            .arg(0)
            .query::<Option<i64>>(&mut waiting)
    });
    common::wait_until(Duration::from_secs(10), || {
        source
            .lock_info(key)
            .unwrap()
            .is_some_and(|info| info.waiters == 1)
    });

    let slot = migrate_key(&cluster, key, from, to);
    let port = cluster.nodes[to].port;

    // The lock left with its holder: the waiter must not be granted a second one on
    // the node it left, but sent where the lock went, as Redis sends a client that
    // writes a key of a migrating slot.
    let error = waiter
        .join()
        .unwrap()
        .expect_err("the waiter was granted a lock that had moved");
    assert_eq!(error.code(), Some("ASK"), "{error}");
    assert!(
        error
            .to_string()
            .contains(&format!("{slot} 127.0.0.1:{port}")),
        "{error}"
    );
    let left: i64 = query(&mut source, &["CLUSTER", "COUNTKEYSINSLOT", &slot]).unwrap();
    assert_eq!(left, 0, "a lock was created again on the source");
    let _: () = query(&mut target, &["ASKING"]).unwrap();
    let info = target.lock_info(key).unwrap().expect("the lock moved");
    assert_eq!((info.owner.as_bytes(), info.token), (&b"owner-1"[..], held));

    // Once the slot has moved, the waiter queues on the target behind the holder,
    // and gets the lock when the holder releases it there.
    finish_migration(&cluster, &slot, to);
    let mut waiting = cluster.nodes[to].connection();
    let waiter = std::thread::spawn(move || {
        redis::cmd("LOCK.ACQUIRE")
            .arg("job:waited")
            .arg("owner-2")
            .arg(60_000)
            .arg("WAIT")
            .arg(0)
            .query::<Option<i64>>(&mut waiting)
    });
    wait_for_one_waiter(&mut target, key, false);
    release_to_the_waiter(&mut target, key, waiter, held);
}

#[test]
fn a_cluster_client_waiting_through_a_migration_follows_the_lock() {
    let cluster = Cluster::start(3);
    let key = "job:follow";
    let (from, to, mut source, _) = source_and_target(&cluster, key);
    let held: i64 = query(&mut source, &["LOCK.ACQUIRE", key, "owner-1", "60000"]).unwrap();
    let mut waiting = ClusterClient::new(cluster.urls())
        .unwrap()
        .get_connection()
        .unwrap();
    let waiter = std::thread::spawn(move || {
        waiting
            .acquire("job:follow", TTL, Wait::Forever)
            .map(|lock| lock.map(|lock| lock.token()))
    });
    wait_for_one_waiter(&mut source, key, false);
    let slot = migrate_key(&cluster, key, from, to);
    // The client follows the -ASK by itself and queues on the target behind the
    // holder, which still holds the lock there.
    let mut target = cluster.nodes[to].connection();
    wait_for_one_waiter(&mut target, key, true);
    finish_migration(&cluster, &slot, to);
    release_to_the_waiter(&mut target, key, waiter, held);
}

/// Waits until one client waits for `key` on `node` (`asking`: the slot is being
/// imported there, so each look needs ASKING).
fn wait_for_one_waiter(node: &mut redis::Connection, key: &str, asking: bool) {
    common::wait_until(Duration::from_secs(10), || {
        if asking {
            let _: () = query(node, &["ASKING"]).unwrap();
        }
        node.lock_info(key)
            .unwrap()
            .is_some_and(|info| info.waiters == 1)
    });
}

/// owner-1 releases `key` on `node`; the waiter gets it with a token above `held`.
fn release_to_the_waiter<E: std::fmt::Debug>(
    node: &mut redis::Connection,
    key: &str,
    waiter: std::thread::JoinHandle<Result<Option<i64>, E>>,
    held: i64,
) {
    let released: i64 = query(node, &["LOCK.RELEASE", key, "owner-1"]).unwrap();
    assert_eq!(released, 1);
    let token = waiter
        .join()
        .unwrap()
        .unwrap()
        .expect("granted on the target");
    assert!(token > held, "{token} after {held}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_client_works_on_a_cluster_connection() {
    let cluster = Cluster::start(3);
    let mut con = ClusterClient::new(cluster.urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    for i in 0..20 {
        let key = format!("task:{i}");
        let lock = con.try_acquire(&key, TTL).await.unwrap().unwrap();
        assert!(con.extend(&lock, TTL * 2).await.unwrap());
        let info = con.lock_info(&key).await.unwrap().unwrap();
        assert_eq!(info.token, lock.token());
        assert!(con.release(&lock).await.unwrap());
    }
}

/// Guarded writes in a Cluster, on the module and on the library (a Cluster of plain
/// servers with the library on every master): the write goes to the lock key's
/// node, with its data keys in the lock key's slot; a data key in another slot is
/// refused (`CROSSSLOT`) with the error that says to use the lock key's hash tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_writes_go_to_the_lock_keys_node_and_other_slots_are_refused() {
    use redis_lock_client::{Backend, Error, Request};

    for (backend, config) in [
        (Backend::Module, common::Config::default()),
        (
            Backend::Functions,
            common::Config::default().without_module(),
        ),
    ] {
        let cluster = Cluster::start_with(3, config);
        if backend == Backend::Functions {
            for node in &cluster.nodes {
                common::load_library(&mut node.connection());
            }
        }
        let client = ClusterClient::new(cluster.urls()).unwrap();
        let mut con = client.get_connection().unwrap();
        let (lock_key, out) = ("{report:7}", "{report:7}:out");
        let elsewhere = "report:8:out";
        assert_ne!(cluster.slot(elsewhere), cluster.slot(lock_key));
        let request = Request::new(lock_key, TTL).backend(backend);
        let lock = LockCommands::acquire_with(&mut con, request)
            .unwrap()
            .expect("free");
        let () = con
            .guard(&lock, &[out], redis::cmd("SET").arg(out).arg("rows"))
            .unwrap();
        let node = cluster.owner_of(lock_key);
        let stored: Option<String> =
            query(&mut cluster.nodes[node].connection(), &["GET", out]).unwrap();
        assert_eq!(stored.as_deref(), Some("rows"), "{backend}");
        let error = con
            .guard::<()>(
                &lock,
                &[elsewhere],
                redis::cmd("SET").arg(elsewhere).arg("x"),
            )
            .unwrap_err();
        assert!(
            matches!(error, Error::CrossSlot { .. }),
            "{backend}: {error:?}"
        );
        assert!(error.to_string().contains("hash tag"), "{error}");
        assert!(!lock.is_lost(), "{backend}: a refused key is not a loss");

        let mut async_con = client.get_async_connection().await.unwrap();
        let counter = "{report:7}:n";
        let n: i64 = AsyncLockCommands::guard(
            &mut async_con,
            &lock,
            &[counter],
            redis::cmd("INCR").arg(counter),
        )
        .await
        .unwrap();
        assert_eq!(n, 1, "{backend}");
        let _: i64 = query(&mut cluster.nodes[node].connection(), &["DEL", lock_key]).unwrap();
        let error = AsyncLockCommands::guard::<()>(
            &mut async_con,
            &lock,
            &[out],
            redis::cmd("SET").arg(out).arg("stale"),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(error, Error::Fenced { .. }),
            "{backend}: {error:?}"
        );
        let stored: Option<String> =
            query(&mut cluster.nodes[node].connection(), &["GET", out]).unwrap();
        assert_eq!(
            stored.as_deref(),
            Some("rows"),
            "{backend}: nothing written"
        );
    }
}

/// An election through a cluster connection (module and library): its record lives
/// in the key's slot, `leader` and an observer read it there, resign hands over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_runs_through_a_cluster_connection() {
    use redis_lock_client::{Backend, Election, LockClient};

    for (backend, config) in [
        (Backend::Module, common::Config::default()),
        (
            Backend::Functions,
            common::Config::default().without_module(),
        ),
    ] {
        let cluster = Cluster::start_with(3, config);
        if backend == Backend::Functions {
            for node in &cluster.nodes {
                common::load_library(&mut node.connection());
            }
        }
        let locks =
            LockClient::new(ClusterClient::new(cluster.urls()).unwrap()).backend(Some(backend));
        let election = Election::new(locks, "scheduler", TTL).unwrap();
        assert_eq!(
            cluster.slot(election.record_key()),
            cluster.slot("scheduler")
        );
        let mut observer = election.observe();
        let first = election.campaign("a").await.unwrap();
        let seen = observer.next().await.unwrap();
        assert_eq!(
            (seen.term, seen.value),
            (first.term(), b"a".to_vec()),
            "{backend}"
        );
        let waiting = {
            let election = election.clone();
            tokio::spawn(async move { election.campaign("b").await.unwrap() })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiting.is_finished(), "{backend}");
        first.resign().await.unwrap();
        let second = waiting.await.unwrap();
        let seen = observer.next().await.unwrap();
        assert_eq!(
            (seen.term, seen.value),
            (second.term(), b"b".to_vec()),
            "{backend}"
        );
        assert_eq!(
            election.leader().await.unwrap().map(|l| l.term),
            Some(second.term())
        );
        second.resign().await.unwrap();
        assert_eq!(election.leader().await.unwrap(), None, "{backend}");
    }
}
