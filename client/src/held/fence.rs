//! Fenced writes to PostgreSQL: the resource keeps the highest token it has accepted
//! and refuses a lower one (contract.md "Fenced writes"). One statement, run in the
//! write's own transaction **before** the write: no row back means a holder with a
//! greater token has written, and the caller rolls back.
//!
//! The SQL is the repository's one copy, `fence/postgresql/`: [`TABLE_SQL`] makes the
//! table once, [`FENCE_SQL`] is the fence. With the `postgres` feature, `fence`,
//! `fence_token` and `create_table` run them on
//! [tokio-postgres](https://docs.rs/tokio-postgres), the asynchronous driver
//! deadpool-postgres and bb8-postgres hand out (their transactions dereference to
//! `tokio_postgres::Transaction`); with any other driver (sqlx, diesel, the blocking
//! `postgres` crate), run the two constants yourself: `$1` the resource (text), `$2`
//! the token (bigint).
//!
//! Only an exclusive holding's token fences: shared holdings (read locks, a
//! semaphore's permits) have distinct tokens that do not order writers, and a
//! resource that kept the highest would refuse the older of two live holders.
//! `fence` refuses a shared holding's lock before sending anything.
//!
//! ```no_run
//! # async fn demo(
//! #     pg: &mut tokio_postgres::Client,
//! #     lock: &redis_lock_client::Lock,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! use redis_lock_client::postgres;
//!
//! let tx = pg.transaction().await?;
//! postgres::fence(&tx, "report:daily", lock).await?; // Err(Error::Fenced): roll back
//! tx.execute("UPDATE reports SET body = $1 WHERE day = $2", &[&"rows", &"2026-12-07"]).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```

#[cfg(feature = "postgres")]
use crate::error::{Error, Result};
#[cfg(feature = "postgres")]
use crate::info::Mode;
#[cfg(feature = "postgres")]
use crate::lock::Lock;

/// The fence table, `redis_lock_fence (resource text PRIMARY KEY, token bigint,
/// fenced_at timestamptz)`, created if missing: `fence/postgresql/table.sql`.
///
/// ```
/// assert!(redis_lock_client::postgres::TABLE_SQL.contains("CREATE TABLE IF NOT EXISTS redis_lock_fence"));
/// ```
pub const TABLE_SQL: &str = include_str!("../../../fence/postgresql/table.sql");

/// The fence, `fence/postgresql/fence.sql`: `$1` the resource, `$2` the token; one
/// row back when the token is at least the highest the resource has accepted (and
/// is now that highest), none when a greater one has written. The row stays locked
/// until the transaction ends.
///
/// ```
/// assert!(redis_lock_client::postgres::FENCE_SQL.contains("RETURNING token"));
/// ```
pub const FENCE_SQL: &str = include_str!("../../../fence/postgresql/fence.sql");

/// Fences `transaction` with `lock`'s token for `resource` (the lock's key is the
/// usual name): run it first, then the write, then commit. A greater token has
/// written already: [`Error::Fenced`], nothing of the fence is kept (roll back),
/// and the lock is lost at once (its loss signal fires, cause
/// [`LossCause::Fenced`](crate::LossCause::Fenced)). Refused before anything is
/// sent: a lock this client knows is lost ([`Error::LockLost`]), a shared holding
/// ([`Error::InvalidArgument`]: its token does not fence). PostgreSQL's own errors
/// (no fence table: [`create_table`]) are [`Error::Postgres`].
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{postgres, Error, LockClient, Wait};
///
/// # async fn demo(pg: &mut tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let locks = LockClient::new(redis::Client::open("redis://127.0.0.1:6390/")?);
/// if let Some(lock) = locks.acquire("report:daily", Duration::from_secs(30), Wait::No).await? {
///     let tx = pg.transaction().await?;
///     match postgres::fence(&tx, "report:daily", &lock).await {
///         Ok(()) => {
///             tx.execute("INSERT INTO reports (day, body) VALUES ($1, $2)", &[&"2026-12-07", &"rows"]).await?;
///             tx.commit().await?;
///         }
///         Err(Error::Fenced { .. }) => eprintln!("a newer holder has written: nothing of ours lands"),
///         Err(error) => return Err(error.into()),
///     } // a transaction dropped without commit rolls back
///     locks.release(&lock).await?;
/// }
/// # Ok(()) }
/// ```
#[cfg(feature = "postgres")]
pub async fn fence(
    transaction: &tokio_postgres::Transaction<'_>,
    resource: &str,
    lock: &Lock,
) -> Result<()> {
    if lock.is_lost() {
        return Err(Error::LockLost {
            key: lock.key.clone(),
        });
    }
    if lock.mode() == Mode::Shared {
        return Err(Error::InvalidArgument(format!(
            "the lock {:?} is a shared holding, whose token does not fence: shared holdings \
             have distinct tokens that do not order writers; fence with an exclusive lock",
            lock.key
        )));
    }
    let fenced = fence_token(transaction, resource, lock.token).await;
    if let Err(Error::Fenced { reason, .. }) = &fenced {
        lock.fenced(reason);
        return Err(Error::Fenced {
            key: lock.key.clone(),
            token: lock.token,
            reason: reason.clone(),
        });
    }
    fenced
}

/// [`fence`] for a bare token (a lock held elsewhere: a job under `redis-lock run`
/// reads `REDIS_LOCK_TOKEN`), which no loss signal follows. A token below 1 is
/// [`Error::InvalidArgument`], before anything is sent.
///
/// ```no_run
/// use redis_lock_client::postgres;
///
/// # async fn demo(pg: &mut tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let token: i64 = std::env::var("REDIS_LOCK_TOKEN")?.parse()?;
/// let tx = pg.transaction().await?;
/// postgres::fence_token(&tx, "report:daily", token).await?;
/// tx.execute("UPDATE reports SET body = 'rows' WHERE day = '2026-12-07'", &[]).await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
#[cfg(feature = "postgres")]
pub async fn fence_token(
    transaction: &tokio_postgres::Transaction<'_>,
    resource: &str,
    token: i64,
) -> Result<()> {
    if token < 1 {
        return Err(Error::InvalidArgument(format!(
            "fencing token {token}: a token is a positive integer"
        )));
    }
    let row = transaction
        .query_opt(FENCE_SQL, &[&resource, &token])
        .await
        .map_err(Error::Postgres)?;
    match row {
        Some(_) => Ok(()),
        None => Err(Error::Fenced {
            key: resource.to_string(),
            token,
            reason: format!(
                "a holder with a token greater than {token} has written to {resource:?} in \
                 PostgreSQL"
            ),
        }),
    }
}

/// Creates the fence table if it is missing ([`TABLE_SQL`]), on a client or in a
/// transaction (a migration's).
///
/// ```no_run
/// # async fn demo(pg: &tokio_postgres::Client) -> redis_lock_client::Result<()> {
/// redis_lock_client::postgres::create_table(pg).await?;
/// # Ok(()) }
/// ```
#[cfg(feature = "postgres")]
pub async fn create_table(client: &impl tokio_postgres::GenericClient) -> Result<()> {
    client
        .execute(TABLE_SQL, &[])
        .await
        .map(|_| ())
        .map_err(Error::Postgres)
}
