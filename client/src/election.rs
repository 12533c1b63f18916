//! Leader election on a lock ([`Election`]): campaign in the server's FIFO queue,
//! lead while the lease holds, resign, and see who leads ([`Election::leader`],
//! [`Observer`]). The term is the holding's fencing token; the leader's value lives
//! in the record stream beside the key (`redis_lock_core::leader`), written with the
//! guard, so a deposed leader cannot overwrite its successor's.

use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;

use redis::Value;
use redis_lock_core::leader::{
    entry, leader_id, record_key, resigned_id, Entry, MAX_VALUE_LEN, RECORD_ENTRIES,
    RESIGNED_FIELD, VALUE_FIELD,
};

use crate::connector::Connector;
use crate::drive::tokio::{drive, timed_out};
use crate::error::{Error, Result};
use crate::held::renew::AsyncRenewer;
use crate::info::Mode;
use crate::lease::LockLost;
use crate::limits::{CONNECT_LIMIT, RELEASE_LIMIT};
use crate::lock::Lock;
use crate::lock_client::LockClient;
use crate::machine::info;
use crate::request::Request;
use crate::wait::Wait;

/// How long an observer's `XREAD` blocks before it asks again: one call a second
/// at most on an idle election.
const OBSERVE_BLOCK: Duration = Duration::from_secs(1);

/// The leader of an election: its term (the fencing token of its holding) and the
/// value it published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The term: the leader's fencing token. Terms only grow.
    pub term: i64,
    /// The value the leader campaigned with (an address, a name).
    pub value: Vec<u8>,
}

/// Leader election at one key, with terms that fence.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{Election, LockClient};
///
/// # async fn demo() -> redis_lock_client::Result<()> {
/// let locks = LockClient::new(redis::Client::open("redis://127.0.0.1:6390/").unwrap());
/// let election = Election::new(locks.clone(), "{scheduler}", Duration::from_secs(10))?;
/// let leadership = election.campaign("10.0.0.7:8080").await?; // waits in the queue
/// let lost = leadership.lost();
/// tokio::select! {
///     _ = lost.lost() => {} // a rival may lead from now on: stop acting as leader
///     _ = async {
///         // Writes fenced with the term: refused once another candidate leads.
///         let out = "{scheduler}:plan";
///         let () = leadership.guard(&[out], redis::cmd("SET").arg(out).arg("v2")).await?;
///         Ok::<(), redis_lock_client::Error>(())
///     } => {}
/// }
/// leadership.resign().await?; // the next candidate leads at once
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Election<K: Connector = redis::Client> {
    locks: LockClient<K>,
    key: String,
    record: String,
    ttl: Duration,
}

impl<K: Connector> Election<K> {
    /// The election at `key`, whose leaders hold it for `ttl` between renewals.
    /// `key` without a hash tag may not contain `}` (its record could not share
    /// its slot).
    pub fn new(locks: LockClient<K>, key: &str, ttl: Duration) -> Result<Self> {
        let record = record_key(key).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        Request::new(key, ttl).check()?;
        Ok(Election {
            locks,
            key: key.to_owned(),
            record,
            ttl,
        })
    }

    /// The election's key (its lock).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The stream where leaders publish their values, in the key's slot.
    pub fn record_key(&self) -> &str {
        &self.record
    }

    /// Waits in the server's FIFO queue, without polling, until this candidate
    /// leads, then publishes `value` (at most 1 KiB) with the guard and renews the
    /// leadership in the background. Dropping the future withdraws the candidate
    /// (or resigns, if it had just won).
    pub async fn campaign(&self, value: impl AsRef<[u8]>) -> Result<Leadership<K>> {
        let value = value.as_ref();
        if value.len() > MAX_VALUE_LEN {
            return Err(Error::InvalidArgument(format!(
                "invalid value: {} bytes, at most {MAX_VALUE_LEN}",
                value.len()
            )));
        }
        loop {
            let request = Request::new(self.key.clone(), self.ttl).wait(Wait::Forever);
            let Some(lock) = self.locks.acquire_with(request).await? else {
                continue; // a wait without a limit answers with the lock
            };
            let leadership = Leadership {
                renewer: Some(self.locks.renewer(&lock)),
                lock,
                locks: self.locks.clone(),
                record: self.record.clone(),
                value: value.to_vec(),
                published: false,
                armed: true,
            };
            let mut leadership = leadership;
            match leadership.publish().await {
                Ok(()) => {
                    leadership.published = true;
                    return Ok(leadership);
                }
                // Lost before it could publish (paused past its lease): campaign again.
                Err(Error::Fenced { .. }) | Err(Error::LockLost { .. }) => continue,
                Err(error) => {
                    let _ = leadership.resign().await;
                    return Err(error);
                }
            }
        }
    }

    /// The current leader, or `None` while nobody leads (the key is free, its holder
    /// has not published yet, or resigned).
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let backend = self.locks.detect_backend().await?;
        let mut con = self.locks.connector().connect(Some(CONNECT_LIMIT)).await?;
        // The lock, then the record: a record newer than the lock read means a new
        // leader came in between; read both again.
        for _ in 0..3 {
            let holding = drive(&mut con, info(backend, &self.key)).await?;
            let term = match holding {
                Some(info) if info.mode == Mode::Exclusive => info.token,
                _ => 0,
            };
            let Some((id, fields)) = top(&mut con, &self.record).await? else {
                return Ok(None);
            };
            match entry(&id) {
                Entry::Leader(published) if published == term && term > 0 => {
                    return Ok(Some(Leader {
                        term,
                        value: field(&fields, VALUE_FIELD).unwrap_or_default(),
                    }))
                }
                Entry::Leader(newer) | Entry::Resigned(newer) if newer > term => continue,
                _ => return Ok(None),
            }
        }
        Ok(None)
    }

    /// Every change of leader from now on, in term order, each once: the current
    /// leader first, if there is one. Reads the record with a blocking `XREAD`
    /// (one call a second at most while nothing changes), never by polling the lock.
    pub fn observe(&self) -> Observer<K> {
        Observer {
            election: self.clone(),
            con: None,
            cursor: None,
            last_term: 0,
            pending: VecDeque::new(),
        }
    }

    /// Runs `work` while this candidate leads: campaigns with `value`, hands `work`
    /// the leadership's lock (its token is the term: fence writes with it) and loss
    /// signal, and drops the work's future when leadership is lost, before any rival
    /// can lead. After a loss, campaigns again if `again`, else returns `None`. When
    /// the work ends while leading, resigns and returns its value.
    pub async fn run_while_leader<T, F, Fut>(
        &self,
        value: impl AsRef<[u8]>,
        again: bool,
        mut work: F,
    ) -> Result<Option<T>>
    where
        F: FnMut(Lock, LockLost) -> Fut,
        Fut: Future<Output = T>,
    {
        loop {
            let leadership = self.campaign(value.as_ref()).await?;
            let lost = leadership.lost();
            let lock = leadership.lock().clone();
            tokio::select! {
                biased;
                () = lost.lost() => {}
                done = work(lock, lost.clone()) => {
                    leadership.resign().await?;
                    return Ok(Some(done));
                }
            }
            drop(leadership);
            if !again {
                return Ok(None);
            }
        }
    }
}

/// This candidate leads: renewed in the background until it resigns, is dropped, or
/// loses (its [`lost`](Leadership::lost) signal fires before any rival can lead).
/// Dropped without [`resign`](Leadership::resign), it releases in the background.
pub struct Leadership<K: Connector = redis::Client> {
    lock: Lock,
    renewer: Option<AsyncRenewer>,
    locks: LockClient<K>,
    record: String,
    value: Vec<u8>,
    /// Its entry is in the record.
    published: bool,
    /// Released when dropped: not resigned yet.
    armed: bool,
}

impl<K: Connector> std::fmt::Debug for Leadership<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("key", &self.lock.key())
            .field("term", &self.term())
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

impl<K: Connector> Leadership<K> {
    /// The term: this leadership's fencing token.
    pub fn term(&self) -> i64 {
        self.lock.token()
    }

    /// The value this leader published.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The lock held while leading.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// Fires when this candidate no longer leads (a renewal found the lock gone, a
    /// guarded write was fenced, or the lease ran out), before any rival can lead.
    pub fn lost(&self) -> LockLost {
        self.lock.signal()
    }

    /// True once leadership is lost; reads the clock when called.
    pub fn is_lost(&self) -> bool {
        self.lock.is_lost()
    }

    /// A write fenced with the term ([`LockClient::guard`]): refused with
    /// [`Error::Fenced`] once another candidate leads.
    pub async fn guard<T: redis::FromRedisValue>(
        &self,
        keys: &[impl AsRef<[u8]>],
        command: &redis::Cmd,
    ) -> Result<T> {
        self.locks.guard(&self.lock, keys, command).await
    }

    /// Resigns: marks the record (guarded), stops renewing and releases, so the next
    /// candidate in the queue leads at once. `false` if leadership was already lost.
    pub async fn resign(mut self) -> Result<bool> {
        self.armed = false;
        let marked = if self.lock.is_lost() || !self.published {
            Ok(())
        } else {
            self.mark_resigned().await
        };
        if let Some(renewer) = self.renewer.take() {
            renewer.stop();
        }
        let released =
            match tokio::time::timeout(RELEASE_LIMIT, self.locks.release(&self.lock)).await {
                Ok(released) => released?,
                Err(elapsed) => return Err(Error::Connection(timed_out(elapsed))),
            };
        match marked {
            Ok(()) | Err(Error::Fenced { .. }) | Err(Error::LockLost { .. }) => Ok(released),
            Err(error) => Err(error),
        }
    }

    async fn publish(&self) -> Result<()> {
        let id = leader_id(self.term());
        let mut xadd = redis::cmd("XADD");
        xadd.arg(&self.record)
            .arg("MAXLEN")
            .arg("=")
            .arg(RECORD_ENTRIES)
            .arg(&id)
            .arg(VALUE_FIELD)
            .arg(&self.value);
        self.record_write(&xadd, &id).await
    }

    async fn mark_resigned(&self) -> Result<()> {
        let id = resigned_id(self.term());
        let mut xadd = redis::cmd("XADD");
        xadd.arg(&self.record)
            .arg("MAXLEN")
            .arg("=")
            .arg(RECORD_ENTRIES)
            .arg(&id)
            .arg(RESIGNED_FIELD)
            .arg(1);
        self.record_write(&xadd, &id).await
    }

    /// A guarded `XADD` of entry `id`; an id already there (a reply lost, the write
    /// sent again) is the write done.
    async fn record_write(&self, xadd: &redis::Cmd, id: &str) -> Result<()> {
        match self.guard::<Value>(&[&self.record], xadd).await {
            Ok(_) => Ok(()),
            Err(Error::Server(error)) if error.code() == Some("WRONGTYPE") => {
                Err(Error::NotARecord {
                    record: self.record.clone(),
                })
            }
            Err(Error::Server(error))
                if error
                    .detail()
                    .is_some_and(|d| d.contains("equal or smaller than the target stream top")) =>
            {
                let mut con = self.locks.connector().connect(Some(CONNECT_LIMIT)).await?;
                match top(&mut con, &self.record).await? {
                    Some((top, _)) if top == id => Ok(()),
                    _ => Err(Error::Server(error)),
                }
            }
            Err(error) => Err(error),
        }
    }
}

impl<K: Connector> Drop for Leadership<K> {
    fn drop(&mut self) {
        if let Some(renewer) = self.renewer.take() {
            renewer.stop();
        }
        if !self.armed {
            return;
        }
        let (locks, lock) = (self.locks.clone(), self.lock.clone());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = tokio::time::timeout(RELEASE_LIMIT, locks.release(&lock)).await;
            });
        }
    }
}

/// Every change of leader of an [`Election`], in term order, each once
/// ([`Observer::next`]).
pub struct Observer<K: Connector = redis::Client> {
    election: Election<K>,
    con: Option<K::Connection>,
    /// The id after which the record is read; `None` before the first read.
    cursor: Option<String>,
    last_term: i64,
    /// Leaders read but not handed out yet, newest last.
    pending: VecDeque<Leader>,
}

impl<K: Connector> std::fmt::Debug for Observer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("key", &self.election.key)
            .field("cursor", &self.cursor)
            .field("last_term", &self.last_term)
            .finish_non_exhaustive()
    }
}

impl<K: Connector> Observer<K> {
    /// The next leader: waits until one takes office. The first call answers the
    /// current leader at once, if there is one. An error (a broken connection) leaves
    /// the observer where it was: call `next` again to go on without missing one.
    pub async fn next(&mut self) -> Result<Leader> {
        loop {
            if let Some(leader) = self.pending.pop_front() {
                return Ok(leader);
            }
            if self.cursor.is_none() {
                return match self.position().await {
                    Ok(Some(leader)) => Ok(leader),
                    Ok(None) => continue,
                    Err(error) => Err(error),
                };
            }
            if let Err(error) = self.read().await {
                self.con = None;
                return Err(error);
            }
        }
    }

    /// Positions the observer now, if it was not yet: what [`next`](Self::next) answers
    /// first is the leader at this moment, or the first to take office after it.
    /// `next` does this itself; call it to observe from a known point (before a
    /// campaign that must be seen).
    pub async fn start(&mut self) -> Result<()> {
        if self.cursor.is_none() {
            if let Some(leader) = self.position().await? {
                self.pending.push_back(leader);
            }
        }
        Ok(())
    }

    /// The current leader and where to read on from.
    async fn position(&mut self) -> Result<Option<Leader>> {
        // The record's top first: the cursor. A leader read after it whose entry is
        // at or before the cursor is handed out now; one that took office in between
        // is after the cursor, and the first read hands it out.
        let record = self.election.record.clone();
        let con = self.connection().await?;
        let top = match top(con, &record).await {
            Ok(top) => top,
            Err(error) => {
                self.con = None;
                return Err(error);
            }
        };
        let current = self.election.leader().await?;
        let cursor = top.map_or_else(|| "0-0".to_owned(), |(id, _)| id);
        let cursor_term = id_term(&cursor);
        self.cursor = Some(cursor);
        match current {
            Some(leader) if leader.term <= cursor_term => {
                self.last_term = leader.term;
                Ok(Some(leader))
            }
            _ => Ok(None),
        }
    }

    /// One blocking read of the record after the cursor.
    async fn read(&mut self) -> Result<()> {
        let cursor = self.cursor.clone().unwrap_or_else(|| "0-0".to_owned());
        let record = self.election.record.clone();
        let con = self.connection().await?;
        let mut xread = redis::cmd("XREAD");
        xread
            .arg("COUNT")
            .arg(RECORD_ENTRIES)
            .arg("BLOCK")
            .arg(OBSERVE_BLOCK.as_millis() as u64)
            .arg("STREAMS")
            .arg(&record)
            .arg(&cursor);
        let reply = xread
            .query_async::<Value>(con)
            .await
            .map_err(|error| record_error(error, &record))?;
        for (id, fields) in streams(reply)? {
            if let Entry::Leader(term) = entry(&id) {
                if term > self.last_term {
                    self.last_term = term;
                    self.pending.push_back(Leader {
                        term,
                        value: field(&fields, VALUE_FIELD).unwrap_or_default(),
                    });
                }
            }
            self.cursor = Some(id);
        }
        Ok(())
    }

    async fn connection(&mut self) -> Result<&mut K::Connection> {
        if self.con.is_none() {
            let limit = OBSERVE_BLOCK.saturating_add(CONNECT_LIMIT);
            self.con = Some(self.election.locks.connector().connect(Some(limit)).await?);
        }
        self.con
            .as_mut()
            .ok_or_else(|| Error::UnexpectedReply("no connection".to_owned()))
    }
}

/// The record's newest entry, if any.
async fn top<C: redis::aio::ConnectionLike + Send>(
    con: &mut C,
    record: &str,
) -> Result<Option<StreamEntry>> {
    let reply = redis::cmd("XREVRANGE")
        .arg(record)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async::<Value>(con)
        .await
        .map_err(|error| record_error(error, record))?;
    Ok(entries(reply)?.into_iter().next())
}

/// A redis-rs error of a command on the record: WRONGTYPE names the record.
fn record_error(error: redis::RedisError, record: &str) -> Error {
    if error.code() == Some("WRONGTYPE") {
        return Error::NotARecord {
            record: record.to_owned(),
        };
    }
    error.into()
}

/// The first part of a stream id (a term, for the record's own entries).
fn id_term(id: &str) -> i64 {
    id.split('-')
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or(0)
}

/// One stream entry: its id and its field-value pairs.
type StreamEntry = (String, Vec<(Vec<u8>, Vec<u8>)>);

/// The entries of an `XRANGE`/`XREVRANGE` reply.
fn entries(value: Value) -> Result<Vec<StreamEntry>> {
    let items = match value {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(items) | Value::Set(items) => items,
        other => return Err(unexpected("a list of stream entries", &other)),
    };
    items
        .into_iter()
        .map(|item| {
            let Value::Array(mut parts) = item else {
                return Err(unexpected("a stream entry", &item));
            };
            if parts.len() != 2 {
                return Err(Error::UnexpectedReply(
                    "a stream entry of other than 2 parts".into(),
                ));
            }
            let fields = parts.pop().unwrap_or(Value::Nil);
            let id = parts.pop().unwrap_or(Value::Nil);
            Ok((text(id)?, pairs(fields)?))
        })
        .collect()
}

/// The entries of one stream from an `XREAD` reply (RESP2 list or RESP3 map).
fn streams(value: Value) -> Result<Vec<StreamEntry>> {
    let streams: Vec<Value> = match value {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(streams) => streams
            .into_iter()
            .map(|stream| match stream {
                Value::Array(mut parts) if parts.len() == 2 => {
                    Ok(parts.pop().unwrap_or(Value::Nil))
                }
                other => Err(unexpected("a stream of an XREAD reply", &other)),
            })
            .collect::<Result<_>>()?,
        Value::Map(streams) => streams.into_iter().map(|(_, entries)| entries).collect(),
        other => return Err(unexpected("an XREAD reply", &other)),
    };
    let mut all = Vec::new();
    for stream in streams {
        all.extend(entries(stream)?);
    }
    Ok(all)
}

fn pairs(value: Value) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let items = match value {
        Value::Array(items) => items,
        Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        Value::Nil => Vec::new(),
        other => return Err(unexpected("an entry's fields", &other)),
    };
    let mut items = items.into_iter();
    let mut pairs = Vec::new();
    while let (Some(name), Some(value)) = (items.next(), items.next()) {
        pairs.push((bytes(name)?, bytes(value)?));
    }
    Ok(pairs)
}

fn field(fields: &[(Vec<u8>, Vec<u8>)], name: &str) -> Option<Vec<u8>> {
    fields
        .iter()
        .find(|(field, _)| field.as_slice() == name.as_bytes())
        .map(|(_, value)| value.clone())
}

fn bytes(value: Value) -> Result<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Ok(bytes),
        Value::SimpleString(text) => Ok(text.into_bytes()),
        Value::Int(n) => Ok(n.to_string().into_bytes()),
        other => Err(unexpected("a string", &other)),
    }
}

fn text(value: Value) -> Result<String> {
    String::from_utf8(bytes(value)?).map_err(|_| Error::UnexpectedReply("an id not UTF-8".into()))
}

fn unexpected(what: &str, value: &Value) -> Error {
    Error::UnexpectedReply(format!("expected {what}, got {value:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn xread_replies_are_read_in_both_protocols() {
        let entry = Value::Array(vec![
            bulk("7-0"),
            Value::Array(vec![bulk("value"), bulk("a:1")]),
        ]);
        let resp2 = Value::Array(vec![Value::Array(vec![
            bulk("{e}:leader"),
            Value::Array(vec![entry.clone()]),
        ])]);
        let resp3 = Value::Map(vec![(bulk("{e}:leader"), Value::Array(vec![entry]))]);
        for reply in [resp2, resp3] {
            let read = streams(reply).unwrap();
            assert_eq!(read.len(), 1);
            assert_eq!(read[0].0, "7-0");
            assert_eq!(field(&read[0].1, VALUE_FIELD), Some(b"a:1".to_vec()));
        }
        assert!(streams(Value::Nil).unwrap().is_empty());
        assert!(streams(Value::Int(3)).is_err());
    }
}
