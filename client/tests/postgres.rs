//! The PostgreSQL fence (`redis_lock_client::postgres`, feature `postgres`) against
//! a real PostgreSQL of the test's own (tests/postgres/start) and a real
//! redis-server with the module: a holder's writes land, an older token after a
//! newer one has written is refused (and its lock is lost), an older writer's
//! commit is waited for, and what is refused before anything is sent. Skipped,
//! saying why, where no PostgreSQL is installed.

use redis_lock_testkit as common;

use std::time::Duration;

use common::postgres::Postgres;
use common::Server;
use redis_lock_client::{postgres, Error, Lock, LockCommands, LossCause, Request};
use tokio_postgres::NoTls;

const TTL: Duration = Duration::from_secs(60);

/// A PostgreSQL of the test's own; `None` (said on stderr) where none is installed.
fn start_postgres(test: &str) -> Option<Postgres> {
    match Postgres::start() {
        Ok(pg) => Some(pg),
        Err(why) => {
            eprintln!("{test}: skipped, no PostgreSQL to fence: {why}");
            None
        }
    }
}

async fn connect(pg: &Postgres) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(pg.url(), NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// A fenced write of `value` for `resource`, committed: the helper's idiom.
async fn write(
    client: &mut tokio_postgres::Client,
    lock: &Lock,
    resource: &str,
    value: &str,
) -> redis_lock_client::Result<()> {
    let tx = client.transaction().await.unwrap();
    postgres::fence(&tx, resource, lock).await?;
    tx.execute(
        "INSERT INTO writes (resource, value) VALUES ($1, $2) \
         ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value",
        &[&resource, &value],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    Ok(())
}

fn setup(pg: &Postgres) {
    pg.sql("CREATE TABLE writes (resource text PRIMARY KEY, value text)")
        .unwrap();
}

fn stored(pg: &Postgres, resource: &str) -> String {
    pg.sql(&format!(
        "SELECT value FROM writes WHERE resource = '{resource}'"
    ))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holders_writes_land_and_an_older_token_after_a_newer_one_is_refused() {
    let Some(pg) = start_postgres("postgres") else {
        return;
    };
    setup(&pg);
    let mut client = connect(&pg).await;
    postgres::create_table(&client).await.unwrap();
    postgres::create_table(&client).await.unwrap(); // idempotent
    let server = Server::start();
    let mut con = server.connection();
    let old = con.try_acquire("report", TTL).unwrap().expect("free");
    write(&mut client, &old, "report", "first").await.unwrap();
    write(&mut client, &old, "report", "second").await.unwrap();
    assert_eq!(stored(&pg, "report"), "second", "an equal token passes");
    assert!(con.release(&old).unwrap());

    // The old holder's twin (the same holding, as a process stopped past its TTL
    // would still have it), and the next holder, who writes first.
    let stale = Lock::clone(&old);
    let new = con.try_acquire("report", TTL).unwrap().expect("free");
    write(&mut client, &new, "report", "new").await.unwrap();
    let tx = client.transaction().await.unwrap();
    let error = postgres::fence_token(&tx, "report", stale.token())
        .await
        .unwrap_err();
    drop(tx); // rolled back
    assert!(
        matches!(&error, Error::Fenced { token, .. } if *token == old.token()),
        "{error:?}"
    );
    assert!(error.to_string().contains("roll back"), "{error}");
    assert_eq!(stored(&pg, "report"), "new");
    let fence_row = pg
        .sql("SELECT token FROM redis_lock_fence WHERE resource = 'report'")
        .unwrap();
    assert_eq!(fence_row, new.token().to_string());
    assert!(!new.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_fence_loses_the_lock_and_what_cannot_fence_is_refused_before_sending() {
    let Some(pg) = start_postgres("postgres") else {
        return;
    };
    setup(&pg);
    let mut client = connect(&pg).await;
    postgres::create_table(&client).await.unwrap();
    let server = Server::start();
    let mut con = server.connection();
    let older = con.try_acquire("a", TTL).unwrap().expect("free");
    let newer = con.try_acquire("b", TTL).unwrap().expect("free");
    assert!(newer.token() > older.token());
    // Two locks, one resource: the greater token writes first.
    write(&mut client, &newer, "shared-resource", "newer")
        .await
        .unwrap();
    let error = write(&mut client, &older, "shared-resource", "older")
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Fenced { .. }), "{error:?}");
    assert_eq!(
        older.cause(),
        Some(LossCause::Fenced),
        "the loss signal fired"
    );
    assert_eq!(stored(&pg, "shared-resource"), "newer");
    // Known lost: refused before anything is sent.
    let tx = client.transaction().await.unwrap();
    let error = postgres::fence(&tx, "other", &older).await.unwrap_err();
    assert!(matches!(error, Error::LockLost { .. }), "{error:?}");
    // A shared holding's token does not fence.
    let reader = con
        .acquire_with(Request::new("c", TTL).shared())
        .unwrap()
        .expect("free");
    let error = postgres::fence(&tx, "other", &reader).await.unwrap_err();
    assert!(
        matches!(&error, Error::InvalidArgument(text) if text.contains("shared")),
        "{error:?}"
    );
    let error = postgres::fence_token(&tx, "other", 0).await.unwrap_err();
    assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
    tx.commit().await.unwrap();
    let rows = pg
        .sql("SELECT count(*) FROM redis_lock_fence WHERE resource = 'other'")
        .unwrap();
    assert_eq!(rows, "0", "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_table_the_error_is_postgresqls_own() {
    let Some(pg) = start_postgres("postgres") else {
        return;
    };
    let mut client = connect(&pg).await;
    let tx = client.transaction().await.unwrap();
    let error = postgres::fence_token(&tx, "r", 5).await.unwrap_err();
    assert!(
        matches!(error, Error::Postgres(_)) && error.to_string().contains("redis_lock_fence"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_holders_fence_waits_for_an_older_writers_commit() {
    let Some(pg) = start_postgres("postgres") else {
        return;
    };
    setup(&pg);
    let mut first = connect(&pg).await;
    let mut second = connect(&pg).await;
    postgres::create_table(&first).await.unwrap();
    let tx = first.transaction().await.unwrap();
    postgres::fence_token(&tx, "r", 10).await.unwrap();
    tx.execute("INSERT INTO writes VALUES ('r', 'older')", &[])
        .await
        .unwrap();
    // The newer fence blocks on the fence row until the older transaction ends.
    let newer = tokio::spawn(async move {
        let tx = second.transaction().await.unwrap();
        postgres::fence_token(&tx, "r", 11).await.unwrap();
        tx.execute(
            "UPDATE writes SET value = 'newer' WHERE resource = 'r'",
            &[],
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!newer.is_finished(), "the newer fence waited");
    tx.commit().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), newer)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored(&pg, "r"), "newer");
    // And the older token, after the newer wrote: refused.
    let tx = first.transaction().await.unwrap();
    let error = postgres::fence_token(&tx, "r", 10).await.unwrap_err();
    assert!(matches!(error, Error::Fenced { .. }), "{error:?}");
}
