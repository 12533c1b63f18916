//! One worker process: takes the locks through Sentinel with `WAIT`, writes twice to
//! the resource with each token, records everything (see `records`).
//!
//! Most workers find the master as docs/rust-client.md tells users to: a
//! [`LockClient`] over a [`Sentinel`]. They reach the nodes through the proxies the
//! sentinels name, so a partition of the master cuts them off from it. Workers
//! started with `--beside` stand on the master's side of every partition: they ask
//! the sentinels with `SENTINEL get-master-addr-by-name`, as every Sentinel client
//! does, and reach the named node at its own port, past its proxy.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError, RedisResult, Script};
use redis_lock_client::{Backend, Connector, Error, Lock, LockClient, Request, Sentinel, Wait};

use crate::now_ns;
use crate::topology::MASTER_NAME;

#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// The sentinels' URLs, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub sentinels: Vec<String>,
    /// `proxy:own` port pairs of the nodes, in node order.
    #[arg(long)]
    pub ports: String,
    /// Reach the nodes at their own ports, past the proxies.
    #[arg(long)]
    pub beside: bool,
    #[arg(long)]
    pub resource_port: u16,
    #[arg(long)]
    pub keys: usize,
    #[arg(long)]
    pub ttl_ms: u64,
    #[arg(long)]
    pub wait_ms: u64,
    /// Durable acquires: this many replicas must acknowledge each grant.
    #[arg(long)]
    pub durable: Option<u32>,
    #[arg(long, default_value_t = 200)]
    pub durable_timeout_ms: u64,
    /// Stop taking locks at this wall-clock time (ns since the epoch).
    #[arg(long)]
    pub until_ns: i128,
    #[arg(long)]
    pub out: PathBuf,
    /// `module` or `functions` (the redislock library).
    #[arg(long, default_value = "module")]
    pub backend: String,
}

/// How long past its wait an acquire may take before it counts as unanswered:
/// longer than any fault lasts, so only a reply that never comes is counted.
pub const GRACE: Duration = Duration::from_secs(15);

/// Stores the token for the key unless it is lower than the highest stored, and
/// numbers every write, accepted or not, in the resource's own order. A holder may
/// write again with its token (token >= highest).
pub const FENCED_WRITE: &str = r#"
local seq = redis.call('INCR', KEYS[2])
local highest = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < highest then return {seq, 0} end
redis.call('SET', KEYS[1], ARGV[1])
return {seq, 1}
"#;

/// Where a worker's connections go, and which node (by its own port) the last one
/// reached.
#[derive(Clone)]
struct Route {
    way: Way,
    own_port: Arc<AtomicU32>,
    reached: Arc<AtomicBool>,
}

#[derive(Clone)]
enum Way {
    Sentinel(Sentinel),
    Beside {
        sentinels: Vec<String>,
        own_port: Arc<HashMap<u16, u16>>,
    },
}

fn io_error(what: &str) -> RedisError {
    std::io::Error::other(what.to_string()).into()
}

impl Connector for Route {
    type Connection = MultiplexedConnection;

    async fn connect(&self, response_timeout: Option<Duration>) -> RedisResult<Self::Connection> {
        let (con, port) = match &self.way {
            Way::Sentinel(sentinel) => {
                let mut con = sentinel.connect(response_timeout).await?;
                let mut ask = redis::cmd("CONFIG");
                ask.arg("GET").arg("port");
                let asked = ask.query_async::<(String, u16)>(&mut con);
                let (_, port) = tokio::time::timeout(Duration::from_secs(2), asked)
                    .await
                    .map_err(|_| io_error("no reply to CONFIG GET port"))??;
                (con, port)
            }
            Way::Beside {
                sentinels,
                own_port,
            } => beside(sentinels, own_port, response_timeout).await?,
        };
        self.own_port.store(u32::from(port), Ordering::Relaxed);
        self.reached.store(true, Ordering::Relaxed);
        Ok(con)
    }
}

/// The node the first sentinel that answers names, at its own port, if it says it
/// is a master.
async fn beside(
    sentinels: &[String],
    own_port: &HashMap<u16, u16>,
    response_timeout: Option<Duration>,
) -> RedisResult<(MultiplexedConnection, u16)> {
    for url in sentinels {
        let Ok(mut sentinel) = redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await
        else {
            continue;
        };
        let named: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER_NAME)
            .query_async(&mut sentinel)
            .await
            .unwrap_or(None);
        let Some(port) = named.and_then(|(_, proxy)| own_port.get(&proxy).copied()) else {
            continue;
        };
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(response_timeout)
            .set_connection_timeout(Some(Duration::from_secs(2)));
        let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let ask = redis::cmd("ROLE");
        let role = ask.query_async::<Vec<redis::Value>>(&mut con);
        let role = tokio::time::timeout(Duration::from_secs(2), role)
            .await
            .map_err(|_| io_error("no reply to ROLE"))??;
        if matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master") {
            return Ok((con, port));
        }
    }
    Err(io_error("no sentinel named a master that says it is one"))
}

/// One word for what went wrong with an acquire.
fn kind(error: &Error) -> String {
    match error {
        Error::NotReplicated { .. } => "not-replicated".into(),
        Error::Server(e) => match e.code() {
            Some(code) => code.to_ascii_lowercase(),
            None => format!("server:{:?}", e.kind()),
        },
        Error::Connection(_) | Error::ResponseTimeout(_) => "connection".into(),
        _ => "other".into(),
    }
}

struct Worker {
    options: Options,
    locks: LockClient<Route>,
    route: Route,
    nodes: Vec<u16>,
    resource: MultiplexedConnection,
    script: Script,
    out: File,
}

impl Worker {
    fn record(&mut self, line: std::fmt::Arguments) {
        let _ = writeln!(self.out, "{line}");
    }

    async fn hold_once(&mut self, rng: &mut impl Rng) {
        let key = format!("job:{}", rng.gen_range(0..self.options.keys));
        let ttl = Duration::from_millis(self.options.ttl_ms);
        let wait = Duration::from_millis(self.options.wait_ms);
        let mut request = Request::new(key.clone(), ttl).wait(Wait::For(wait));
        if let Some(replicas) = self.options.durable {
            request = request.durable(
                replicas,
                Duration::from_millis(self.options.durable_timeout_ms),
            );
        }
        self.route.reached.store(false, Ordering::Relaxed);
        let sent = now_ns();
        self.record(format_args!("ASK {key} {sent}"));
        let acquired = tokio::time::timeout(wait + GRACE, self.locks.acquire_with(request)).await;
        let reply = now_ns();
        let lock = match acquired {
            Err(_) => {
                let reached = u8::from(self.route.reached.load(Ordering::Relaxed));
                self.record(format_args!("UNANSWERED {key} {reply} {reached}"));
                return;
            }
            Ok(Ok(None)) => {
                self.record(format_args!("NONE {key} {reply}"));
                return;
            }
            Ok(Err(error)) => {
                let detail = error.to_string().replace(char::is_whitespace, "_");
                self.record(format_args!(
                    "ERROR {key} {reply} {} {detail}",
                    kind(&error)
                ));
                tokio::time::sleep(Duration::from_millis(50)).await;
                return;
            }
            Ok(Ok(Some(lock))) => lock,
        };
        let port = self.route.own_port.load(Ordering::Relaxed);
        let node = self
            .nodes
            .iter()
            .position(|&p| u32::from(p) == port)
            .unwrap_or(usize::MAX);
        let ttl_ms = self.options.ttl_ms;
        // The lease, on the wall clock: after a long wait the client extends at once,
        // so the lease may start well after `sent`.
        let left = lock
            .valid_until()
            .saturating_duration_since(std::time::Instant::now());
        let lease_end = now_ns() + left.as_nanos() as i128;
        self.record(format_args!(
            "GRANT {key} {} {} {node} {sent} {reply} {ttl_ms} {lease_end}",
            lock.owner(),
            lock.token(),
        ));
        self.work(&lock, rng).await;
        self.record(format_args!("END {key} {} {}", lock.owner(), now_ns()));
        let _ = tokio::time::timeout(Duration::from_secs(3), self.locks.release(&lock)).await;
    }

    /// Two fenced writes some milliseconds apart, each only while the lease holds.
    async fn work(&mut self, lock: &Lock, rng: &mut impl Rng) {
        for n in 1..=2 {
            if lock.is_lost() {
                return;
            }
            let mut invocation = self.script.key(format!("fence:{}", lock.key()));
            invocation.key("fence:seq").arg(lock.token());
            let write = invocation.invoke_async::<(i64, i64)>(&mut self.resource);
            match tokio::time::timeout(Duration::from_secs(2), write).await {
                Ok(Ok((seq, accepted))) => self.record(format_args!(
                    "WRITE {} {} {n} {seq} {accepted}",
                    lock.key(),
                    lock.owner()
                )),
                _ => return,
            }
            if n == 1 {
                tokio::time::sleep(Duration::from_millis(rng.gen_range(10..40))).await;
            }
        }
    }
}

fn parse_ports(ports: &str) -> Option<Vec<(u16, u16)>> {
    ports
        .split(',')
        .map(|pair| {
            let (proxy, own) = pair.split_once(':')?;
            Some((proxy.parse().ok()?, own.parse().ok()?))
        })
        .collect()
}

pub fn work(options: Options) -> i32 {
    let Ok(out) = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&options.out)
    else {
        eprintln!("worker: cannot open {}", options.out.display());
        return 2;
    };
    let Some(ports) = parse_ports(&options.ports) else {
        eprintln!("worker: bad --ports {}", options.ports);
        return 2;
    };
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return 2;
    };
    runtime.block_on(async move {
        let way = if options.beside {
            Way::Beside {
                sentinels: options.sentinels.clone(),
                own_port: Arc::new(ports.iter().copied().collect()),
            }
        } else {
            match Sentinel::new(options.sentinels.iter().map(String::as_str), MASTER_NAME) {
                Ok(sentinel) => Way::Sentinel(sentinel),
                Err(error) => {
                    eprintln!("worker: {error}");
                    return 2;
                }
            }
        };
        let route = Route {
            way,
            own_port: Arc::new(AtomicU32::new(0)),
            reached: Arc::new(AtomicBool::new(false)),
        };
        let resource = redis::Client::open(format!("redis://127.0.0.1:{}/", options.resource_port))
            .expect("resource url");
        let config =
            AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(2)));
        let Ok(resource) = resource
            .get_multiplexed_async_connection_with_config(&config)
            .await
        else {
            eprintln!("worker: the resource does not answer");
            return 2;
        };
        let mut worker = Worker {
            locks: LockClient::new(route.clone()).backend(options.backend.parse::<Backend>().ok()),
            route,
            nodes: ports.iter().map(|&(_, own)| own).collect(),
            resource,
            script: Script::new(FENCED_WRITE),
            out,
            options,
        };
        let mut rng = rand::rngs::StdRng::from_entropy();
        while now_ns() < worker.options.until_ns {
            worker.hold_once(&mut rng).await;
        }
        0
    })
}
