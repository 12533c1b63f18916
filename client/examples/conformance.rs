//! The Rust client's conformance adapter (conformance/ADAPTER.md): the harness of
//! `make conformance` starts it once per actor and drives it with JSON lines on
//! stdin; it uses the client as its users do (a `LockClient`, a renewer per held
//! lock, the loss signal, a dropped future to cancel a wait, its guarded writes and
//! its PostgreSQL fence) and says what the client answered on stdout.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis_lock_client::{
    margin, postgres, AsyncRenewer, Backend, Connector, Election, Error, Leadership, Lock,
    LockClient, LossCause, Mode, Request, Wait, LIBRARY_VERSION, MIN_LIBRARY_VERSION, WAIT_MARGIN,
};
use redis_lock_core::protocol;
use serde_json::{json, Map, Value};
use tokio::task::AbortHandle;

type Fields = Map<String, Value>;

/// The adapter's client: one server or a Cluster.
#[derive(Clone)]
enum Client {
    Single(Box<LockClient<redis::Client>>),
    #[cfg(feature = "cluster")]
    Cluster(Box<LockClient<redis::cluster::ClusterClient>>),
}

/// Runs `$body` with `$locks` bound to the client's `LockClient`, whatever its
/// connector.
macro_rules! with_client {
    ($client:expr, $locks:ident => $body:expr) => {
        match $client {
            Client::Single($locks) => $body,
            #[cfg(feature = "cluster")]
            Client::Cluster($locks) => $body,
        }
    };
}

struct Held {
    lock: Lock,
    renewer: Option<AsyncRenewer>,
}

/// A leadership won by `campaign`, whatever the client's connector.
enum Leading {
    Single(Box<Leadership<redis::Client>>),
    #[cfg(feature = "cluster")]
    Cluster(Box<Leadership<redis::cluster::ClusterClient>>),
}

/// Elections are made per request: any TTL serves one that only reads.
const READ_TTL: Duration = Duration::from_secs(1);

#[derive(Default)]
struct State {
    client: Option<Client>,
    /// The adapter's own PostgreSQL connection (`open`'s `postgres`), one
    /// transaction at a time.
    postgres: Option<Arc<tokio::sync::Mutex<tokio_postgres::Client>>>,
    locks: HashMap<String, Held>,
    /// The leaderships `campaign` won, by lock name (their locks are in `locks`).
    leading: HashMap<String, Leading>,
    /// Requests in progress that `cancel` may abort.
    waits: HashMap<u64, AbortHandle>,
}

#[derive(Clone, Default)]
struct Adapter {
    state: Arc<Mutex<State>>,
}

fn write_line(line: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn hello() -> Value {
    let mut capabilities = vec![
        "module",
        "functions",
        "scripts",
        "force_backend",
        "auth",
        "owner",
        "shared",
        "limit",
        "wait",
        "wait_forever",
        "cancel",
        "extend",
        "info",
        "leader",
        "check",
        "guard",
        "fence_postgres",
        "loss_events",
        "loss_cause",
    ];
    if cfg!(feature = "cluster") {
        capabilities.push("cluster");
    }
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    json!({"hello": {
        "protocol": 1,
        "client": "redis-lock-client (Rust)",
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": capabilities,
        "constants": {
            "renewal_divisor": protocol::RENEWAL_DIVISOR,
            // The lease margin as the client computes it: a share of a long TTL, and
            // the floor a short one gets.
            "lease_margin_percent": ms(margin(Duration::from_secs(100))) / 1000,
            "lease_margin_min_ms": ms(margin(Duration::from_millis(100))),
            "wait_margin_ms": ms(WAIT_MARGIN),
            "withdraw_after_timeout_ms": protocol::WITHDRAW_AFTER_TIMEOUT_MS,
            "release_limit_ms": protocol::RELEASE_LIMIT_MS,
            "control_limit_ms": protocol::CONTROL_LIMIT_MS,
            "library_version": LIBRARY_VERSION,
            "min_library_version": MIN_LIBRARY_VERSION,
        },
    }})
}

/// An error reply: the kind from ADAPTER.md, the client's own text.
fn failure(kind: &str, message: impl std::fmt::Display) -> Value {
    json!({"kind": kind, "message": message.to_string()})
}

fn error_kind(error: &Error) -> &'static str {
    match error {
        Error::WaitUnanswered { .. } => "wait_unanswered",
        Error::LibraryTooOld { .. } => "library_too_old",
        Error::LibraryTooNew { .. } => "library_too_new",
        Error::NoBackend(_) | Error::ModuleNotLoaded(_) => "no_backend",
        Error::WrongType(_) => "wrong_type",
        Error::Server(_) => "server",
        Error::Connection(_) | Error::ResponseTimeout(_) => "connection",
        Error::InvalidArgument(_) => "invalid_argument",
        Error::LockLost { .. } => "lock_lost",
        Error::Fenced { .. } => "fenced",
        Error::LibraryWithoutGuard { .. } => "library_too_old",
        Error::CrossSlot { .. } => "server",
        _ => "other",
    }
}

fn client_error(error: Error) -> Value {
    failure(error_kind(&error), error)
}

fn text<'a>(fields: &'a Fields, name: &str) -> Result<&'a str, Value> {
    fields
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| failure("bad_request", format!("{name} is missing")))
}

fn millis(fields: &Fields, name: &str) -> Result<Duration, Value> {
    fields
        .get(name)
        .and_then(Value::as_u64)
        .map(Duration::from_millis)
        .ok_or_else(|| failure("bad_request", format!("{name} (ms) is missing")))
}

/// `redis://user:password@host…` from a URL and the open's credentials.
fn with_credentials(url: &str, fields: &Fields) -> String {
    match (
        fields.get("username").and_then(Value::as_str),
        fields.get("password").and_then(Value::as_str),
    ) {
        (Some(user), Some(password)) => match url.split_once("://") {
            Some((scheme, rest)) => format!("{scheme}://{user}:{password}@{rest}"),
            None => url.to_string(),
        },
        _ => url.to_string(),
    }
}

fn cause_name(cause: Option<LossCause>) -> &'static str {
    match cause {
        Some(LossCause::Refused) => "refused",
        Some(LossCause::LeaseRanOut { .. }) => "lease_ran_out",
        Some(LossCause::Released) => "released",
        Some(LossCause::Fenced) => "fenced",
        _ => "unknown",
    }
}

impl Adapter {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn client(&self) -> Result<Client, Value> {
        self.state()
            .client
            .clone()
            .ok_or_else(|| failure("bad_request", "open first"))
    }

    fn held(&self, fields: &Fields) -> Result<Lock, Value> {
        let name = text(fields, "lock")?;
        self.state()
            .locks
            .get(name)
            .map(|held| held.lock.clone())
            .ok_or_else(|| failure("bad_request", format!("no lock named {name:?}")))
    }

    async fn handle(&self, op: &str, fields: Fields) -> Result<Value, Value> {
        match op {
            "open" => self.open(&fields).await,
            "acquire" => self.acquire(&fields).await,
            "release" => {
                let lock = self.held(&fields)?;
                if let Some(held) = self.state().locks.get_mut(text(&fields, "lock")?) {
                    if let Some(renewer) = held.renewer.take() {
                        renewer.stop();
                    }
                }
                let client = self.client()?;
                let released = with_client!(client, locks => locks.release(&lock).await);
                released
                    .map(|r| json!({"released": r}))
                    .map_err(client_error)
            }
            "extend" => {
                let lock = self.held(&fields)?;
                let ttl = millis(&fields, "ttl_ms")?;
                let client = self.client()?;
                let extended = with_client!(client, locks => locks.extend(&lock, ttl).await);
                extended
                    .map(|e| json!({"extended": e}))
                    .map_err(client_error)
            }
            "token" => {
                let lock = self.held(&fields)?;
                let mut reply = json!({
                    "token": lock.token().to_string(),
                    "owner": lock.owner(),
                    "lost": lock.is_lost(),
                });
                if lock.is_lost() {
                    reply["cause"] = json!(cause_name(lock.cause()));
                }
                Ok(reply)
            }
            "await_lost" => {
                let lock = self.held(&fields)?;
                let limit = millis(&fields, "timeout_ms")?;
                let signal = lock.signal();
                match tokio::time::timeout(limit, signal.lost()).await {
                    Ok(()) => Ok(json!({"lost": true, "cause": cause_name(signal.cause())})),
                    Err(_) => Ok(json!({"lost": false})),
                }
            }
            "check" => {
                // Work under the lock reaching its write: a tokio sleep, then the
                // check the docs show before a write (`lost.check()?`), which reads
                // the clock when it is made.
                let lost = self.held(&fields)?.signal();
                after(&fields).await;
                Ok(json!({"held": lost.check().is_ok()}))
            }
            "guard" => {
                // Work under the lock reaching its write, as `check` does; then `SET
                // key value` through the client's guard, with the key declared.
                let lock = self.held(&fields)?;
                let key = text(&fields, "key")?.to_string();
                let value = text(&fields, "value")?.to_string();
                after(&fields).await;
                let client = self.client()?;
                let mut set = redis::cmd("SET");
                set.arg(&key).arg(&value);
                let written =
                    with_client!(client, locks => locks.guard::<()>(&lock, &[&key], &set).await);
                written
                    .map(|()| json!({"written": true}))
                    .map_err(client_error)
            }
            "fence_postgres" => self.fence_postgres(&fields).await,
            "cancel" => {
                let target = fields.get("target").and_then(Value::as_u64).unwrap_or(0);
                if let Some(wait) = self.state().waits.remove(&target) {
                    wait.abort();
                }
                Ok(json!({}))
            }
            "info" => {
                let key = text(&fields, "key")?.to_string();
                let client = self.client()?;
                let info = with_client!(client, locks => locks.lock_info(&key).await);
                let info = info.map_err(client_error)?;
                Ok(json!({"info": info.map(|info| json!({
                    "mode": if info.mode == Mode::Shared { "shared" } else { "exclusive" },
                    "waiters": info.waiters,
                    "holders": info.holders.iter().map(|h| json!({
                        "owner": h.owner.to_string(),
                        "token": h.token.to_string(),
                    })).collect::<Vec<_>>(),
                }))}))
            }
            "campaign" => self.campaign(&fields).await,
            "resign" => {
                let name = text(&fields, "lock")?.to_string();
                let leading = self.state().leading.remove(&name);
                let resigned = match leading {
                    Some(Leading::Single(leadership)) => leadership.resign().await,
                    #[cfg(feature = "cluster")]
                    Some(Leading::Cluster(leadership)) => leadership.resign().await,
                    None => return Err(failure("bad_request", format!("no leadership {name:?}"))),
                };
                resigned
                    .map(|r| json!({"resigned": r}))
                    .map_err(client_error)
            }
            "leader" => {
                let key = text(&fields, "key")?.to_string();
                let client = self.client()?;
                let leader = with_client!(client, locks => {
                    let election = Election::new((*locks).clone(), &key, READ_TTL).map_err(client_error)?;
                    election.leader().await
                });
                let leader = leader.map_err(client_error)?;
                Ok(json!({"leader": leader.map(|l| json!({
                    "term": l.term.to_string(),
                    "value": String::from_utf8_lossy(&l.value),
                }))}))
            }
            "observe" => {
                let name = text(&fields, "observer")?.to_string();
                let key = text(&fields, "key")?.to_string();
                let client = self.client()?;
                with_client!(client, locks => {
                    let election = Election::new((*locks).clone(), &key, READ_TTL).map_err(client_error)?;
                    let mut observer = election.observe();
                    observer.start().await.map_err(client_error)?;
                    tokio::spawn(async move {
                        loop {
                            match observer.next().await {
                                Ok(leader) => write_line(&json!({
                                    "event": "leader",
                                    "observer": name,
                                    "term": leader.term.to_string(),
                                    "value": String::from_utf8_lossy(&leader.value),
                                })),
                                // As a user's loop would: go on from where it was.
                                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                            }
                        }
                    });
                });
                Ok(json!({}))
            }
            "close" => Ok(json!({})),
            other => Err(failure("unsupported", format!("no request {other:?}"))),
        }
    }

    async fn open(&self, fields: &Fields) -> Result<Value, Value> {
        let backend = match fields
            .get("backend")
            .and_then(Value::as_str)
            .unwrap_or("auto")
        {
            "auto" => None,
            name => Some(name.parse::<Backend>().map_err(client_error)?),
        };
        let client = if let Some(urls) = fields.get("cluster").and_then(Value::as_array) {
            cluster(urls, fields, backend)?
        } else {
            let url = with_credentials(text(fields, "url")?, fields);
            let redis = redis::Client::open(url).map_err(|e| failure("invalid_argument", e))?;
            Client::Single(Box::new(LockClient::new(redis).backend(backend)))
        };
        let detected = with_client!(&client, locks => locks.detect_backend().await);
        let detected = detected.map_err(client_error)?;
        if let Some(url) = fields.get("postgres").and_then(Value::as_str) {
            let (pg, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .map_err(|e| failure("connection", format!("PostgreSQL: {e}")))?;
            tokio::spawn(connection);
            self.state().postgres = Some(Arc::new(tokio::sync::Mutex::new(pg)));
        }
        self.state().client = Some(client);
        Ok(json!({"backend": detected.name()}))
    }

    /// One transaction: the client's fence for `resource` with the lock's token,
    /// then the write, then the commit; a refused fence rolls back.
    async fn fence_postgres(&self, fields: &Fields) -> Result<Value, Value> {
        let lock = self.held(fields)?;
        let resource = text(fields, "resource")?.to_string();
        let value = text(fields, "value")?.to_string();
        let pg = self
            .state()
            .postgres
            .clone()
            .ok_or_else(|| failure("bad_request", "no postgres URL came with open"))?;
        after(fields).await;
        let mut pg = pg.lock().await;
        let tx = pg
            .transaction()
            .await
            .map_err(|e| failure("connection", format!("PostgreSQL: {e}")))?;
        postgres::fence(&tx, &resource, &lock)
            .await
            .map_err(client_error)?;
        let write = "INSERT INTO conformance_writes (resource, value) VALUES ($1, $2) \
                     ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value";
        tx.execute(write, &[&resource, &value])
            .await
            .map_err(|e| failure("other", format!("PostgreSQL: {e}")))?;
        tx.commit()
            .await
            .map_err(|e| failure("other", format!("PostgreSQL: {e}")))?;
        Ok(json!({"written": true}))
    }

    /// Campaigns until this actor leads: its lock is kept under `lock` (for
    /// `guard`, `check`, `token` and the loss event), its leadership for `resign`.
    async fn campaign(&self, fields: &Fields) -> Result<Value, Value> {
        let name = text(fields, "lock")?.to_string();
        let key = text(fields, "key")?.to_string();
        let ttl = millis(fields, "ttl_ms")?;
        let value = text(fields, "value")?.to_string();
        let client = self.client()?;
        let (lock, leading) = with_client!(client, locks => {
            let election = Election::new((*locks).clone(), &key, ttl).map_err(client_error)?;
            let leadership = election.campaign(&value).await.map_err(client_error)?;
            (leadership.lock().clone(), Leading::from(leadership))
        });
        let reply =
            json!({"acquired": true, "token": lock.token().to_string(), "owner": lock.owner()});
        watch(name.clone(), lock.clone());
        let mut state = self.state();
        state.locks.insert(
            name.clone(),
            Held {
                lock,
                renewer: None,
            },
        );
        state.leading.insert(name, leading);
        Ok(reply)
    }

    async fn acquire(&self, fields: &Fields) -> Result<Value, Value> {
        let name = text(fields, "lock")?.to_string();
        let key = text(fields, "key")?;
        let ttl = millis(fields, "ttl_ms")?;
        let wait = match fields.get("wait").and_then(Value::as_str).unwrap_or("none") {
            "none" => Wait::No,
            "forever" => Wait::Forever,
            "ms" => Wait::For(millis(fields, "wait_ms")?),
            other => return Err(failure("bad_request", format!("wait {other:?}"))),
        };
        let mut request = Request::new(key, ttl).wait(wait);
        match fields
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("exclusive")
        {
            "exclusive" => {}
            "shared" => request = request.shared(),
            "limit" => {
                let n = fields.get("limit").and_then(Value::as_u64).unwrap_or(0);
                request = request.limit(u32::try_from(n).unwrap_or(u32::MAX));
            }
            other => return Err(failure("bad_request", format!("kind {other:?}"))),
        }
        if let Some(owner) = fields.get("owner").and_then(Value::as_str) {
            request = request.owner(owner);
        }
        let client = self.client()?;
        let acquired = with_client!(&client, locks => locks.acquire_with(request).await);
        let Some(lock) = acquired.map_err(client_error)? else {
            return Ok(json!({"acquired": false}));
        };
        let renewer = with_client!(&client, locks => locks.renewer(&lock));
        let reply =
            json!({"acquired": true, "token": lock.token().to_string(), "owner": lock.owner()});
        watch(name.clone(), lock.clone());
        self.state().locks.insert(
            name,
            Held {
                lock,
                renewer: Some(renewer),
            },
        );
        Ok(reply)
    }
}

impl From<Leadership<redis::Client>> for Leading {
    fn from(leadership: Leadership<redis::Client>) -> Leading {
        Leading::Single(Box::new(leadership))
    }
}

#[cfg(feature = "cluster")]
impl From<Leadership<redis::cluster::ClusterClient>> for Leading {
    fn from(leadership: Leadership<redis::cluster::ClusterClient>) -> Leading {
        Leading::Cluster(Box::new(leadership))
    }
}

#[cfg(feature = "cluster")]
fn cluster(urls: &[Value], fields: &Fields, backend: Option<Backend>) -> Result<Client, Value> {
    let urls: Vec<String> = urls
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    let mut builder = redis::cluster::ClusterClient::builder(urls);
    if let Some(user) = fields.get("username").and_then(Value::as_str) {
        builder = builder.username(user);
    }
    if let Some(password) = fields.get("password").and_then(Value::as_str) {
        builder = builder.password(password);
    }
    let cluster = builder
        .build()
        .map_err(|e| failure("invalid_argument", e))?;
    Ok(Client::Cluster(Box::new(
        LockClient::new(cluster).backend(backend),
    )))
}

#[cfg(not(feature = "cluster"))]
fn cluster(_: &[Value], _: &Fields, _: Option<Backend>) -> Result<Client, Value> {
    Err(failure("unsupported", "built without the cluster feature"))
}

/// The request's `after_ms` (default 0) from its arrival, on a tokio timer: the way
/// work under a lock reaches its write.
async fn after(fields: &Fields) {
    let after = fields.get("after_ms").and_then(Value::as_u64).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(after)).await;
}

/// Writes the `lost` event of `lock` when its loss signal fires (not for a release).
fn watch(name: String, lock: Lock) {
    let signal = lock.signal();
    tokio::spawn(async move {
        signal.lost().await;
        let cause = signal.cause();
        if matches!(cause, Some(LossCause::Released)) {
            return;
        }
        let message = cause.as_ref().map(ToString::to_string).unwrap_or_default();
        write_line(
            &json!({"event": "lost", "lock": name, "cause": cause_name(cause), "message": message}),
        );
    });
}

/// Keeps the compiler honest that every connector works here.
fn _connector_bound<K: Connector>(_: &LockClient<K>) {}

fn main() {
    let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    else {
        std::process::exit(2);
    };
    write_line(&hello());
    let (lines, mut requests) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let adapter = Adapter::default();
    runtime.block_on(async move {
        while let Some(line) = requests.recv().await {
            let request: Value = match serde_json::from_str(&line) {
                Ok(request) => request,
                Err(e) => {
                    write_line(&json!({"id": 0, "error": failure("bad_request", e)}));
                    continue;
                }
            };
            let id = request.get("id").and_then(Value::as_u64).unwrap_or(0);
            let op = request.get("op").and_then(Value::as_str).unwrap_or("").to_string();
            let fields = request.as_object().cloned().unwrap_or_default();
            if op == "close" {
                write_line(&json!({"id": id, "ok": {}}));
                break;
            }
            let handler = adapter.clone();
            let task = tokio::spawn(async move { handler.handle(&op, fields).await });
            if matches!(request.get("op").and_then(Value::as_str), Some("acquire" | "campaign")) {
                adapter.state().waits.insert(id, task.abort_handle());
            }
            let state = adapter.clone();
            tokio::spawn(async move {
                let reply = match task.await {
                    Ok(Ok(ok)) => json!({"id": id, "ok": ok}),
                    Ok(Err(error)) => json!({"id": id, "error": error}),
                    Err(e) if e.is_cancelled() => {
                        json!({"id": id, "error": failure("cancelled", "the wait was cancelled: its future was dropped")})
                    }
                    Err(e) => json!({"id": id, "error": failure("other", e)}),
                };
                state.state().waits.remove(&id);
                write_line(&reply);
            });
        }
    });
    // The runtime's drop would wait for renewers: leave at once, as a process does.
    std::process::exit(0);
}
