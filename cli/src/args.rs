//! The command line, as clap reads it.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use redis_lock_client::{Backend, Sentinel, Wait};

#[derive(Parser, Debug)]
#[command(
    name = "redis-lock",
    version,
    about = "Run a command under a Redis lock (the redis-lock module, or its function library \
             where no module can be loaded), renewed while it runs",
    after_help = "The lock is held for COMMAND's whole process group: `run` releases it \
                  once COMMAND exited and no process it left in its group runs on \
                  (--no-wait-group: at once); after a loss, SIGTERM and then SIGKILL go to \
                  the group, and `run` exits only once it is empty.\n\n\
                  Exit statuses of `run`: the command's own (128+N if signal N killed it); \
                  75 the lock is busy; 76 the lock was lost while the command ran; \
                  64 bad arguments (a TTL under 200ms, an empty or over-long owner); \
                  65 the key holds another type; 69 no server, or no answer within \
                  --wait plus 1s; 70 other server errors; 78 the server has neither the \
                  module nor the library (or an older library: `functions load` upgrades it); \
                  126/127 the command cannot be run. `info`: 74 if stdout cannot be written. \
                  `guard`: 0 the reply printed; 77 fenced (the job's token no longer holds \
                  the lock: nothing was written); 1 the command's error reply; 64 not under \
                  `run` (no REDIS_LOCK_KEY or REDIS_LOCK_TOKEN), or keys outside the lock \
                  key's slot; 69, 70, 74 and 78 as above."
)]
pub struct Cli {
    /// No event lines on stderr (errors are still printed).
    #[arg(long, short, global = true)]
    pub quiet: bool,
    #[command(flatten)]
    pub connection: Connection,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the server is and how to talk to it: every subcommand takes these, and
/// `--help` shows them under a heading of their own.
#[derive(Args, Debug)]
#[command(next_help_heading = "Connection options")]
pub struct Connection {
    /// The server, as a redis:// or rediss:// (TLS) URL; the seed node with --cluster.
    /// TLS checks the certificate against the system's roots (or SSL_CERT_FILE's);
    /// rediss://HOST:PORT/#insecure skips the check.
    #[arg(
        long,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379/",
        global = true
    )]
    pub url: String,
    /// Sentinels to ask for the master: HOST:PORT[,HOST:PORT…] (with --master).
    #[arg(long, value_delimiter = ',', global = true, requires = "master")]
    pub sentinel: Vec<String>,
    /// The master's name, as the sentinels know it.
    #[arg(long, global = true, requires = "sentinel")]
    pub master: Option<String>,
    /// The server is a node of a Redis Cluster.
    #[arg(long, global = true, conflicts_with = "sentinel")]
    pub cluster: bool,
    /// How to reach the lock: `module` (LOCK.* commands), `functions` (FCALL of the
    /// redislock library) or `scripts` (EVALSHA of the same library, sent by this
    /// tool). Default: the module if the server has it, else the library, else
    /// scripts.
    #[arg(long, global = true, value_parser = backend, value_name = "BACKEND")]
    pub backend: Option<Backend>,
}

/// Where the locks live.
pub enum Target {
    Url(redis::Client),
    Sentinel(Sentinel),
    /// Boxed: a cluster client with TLS is twice the others' size.
    Cluster(Box<redis::cluster::ClusterClient>),
}

/// A clap error in one line: its cause with what it names (the missing arguments
/// clap lists on the lines below it), without clap's usage block.
pub fn one_line(text: &str) -> String {
    let cause: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more information"))
        .filter(|line| !line.is_empty())
        .collect();
    let line = cause.join(" ");
    let line = line.trim_start_matches("error: ");
    if line.is_empty() {
        "bad arguments".into()
    } else {
        line.into()
    }
}

/// A URL as error lines show it: without its user and password.
fn shown_url(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, _)), Some(at)) => format!("{scheme}://{}", url.get(at + 1..).unwrap_or("")),
        _ => url.to_string(),
    }
}

/// What `run` tells its child about the connection, so that `redis-lock guard` in
/// the job reaches the same server: each variable it may set.
pub const CHILD_CONNECTION: [&str; 5] = [
    "REDIS_LOCK_URL",
    "REDIS_LOCK_SENTINEL",
    "REDIS_LOCK_MASTER",
    "REDIS_LOCK_CLUSTER",
    "REDIS_LOCK_BACKEND",
];

/// Which connection options the command line gave (not their defaults or
/// REDIS_URL): `guard` takes the others from the `run` it is under.
#[derive(Debug, Clone, Copy, Default)]
pub struct Given {
    pub place: bool,
    pub backend: bool,
}

impl Connection {
    /// The connection `run` was given, as its child's environment (the URL as
    /// given, credentials included: the environment is the user's own, readable
    /// only by them and root, unlike a command line).
    pub fn child_env(&self) -> Vec<(&'static str, String)> {
        match &self.master {
            Some(master) => vec![
                ("REDIS_LOCK_SENTINEL", self.sentinel.join(",")),
                ("REDIS_LOCK_MASTER", master.clone()),
            ],
            None if self.cluster => vec![
                ("REDIS_LOCK_URL", self.url.clone()),
                ("REDIS_LOCK_CLUSTER", "1".into()),
            ],
            None => vec![("REDIS_LOCK_URL", self.url.clone())],
        }
    }

    /// For `guard`: the connection of the `run` it is under (its child's
    /// environment), where the command line names none. A bad REDIS_LOCK_BACKEND is
    /// an error.
    pub fn under_run(mut self, given: Given) -> Result<Connection, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if !given.place {
            if let (Some(sentinels), Some(master)) =
                (var("REDIS_LOCK_SENTINEL"), var("REDIS_LOCK_MASTER"))
            {
                self.sentinel = sentinels.split(',').map(str::to_string).collect();
                self.master = Some(master);
                self.cluster = false;
            } else if let Some(url) = var("REDIS_LOCK_URL") {
                self.url = url;
                self.cluster = var("REDIS_LOCK_CLUSTER").is_some();
            }
        }
        if !given.backend {
            if let Some(name) = var("REDIS_LOCK_BACKEND") {
                self.backend =
                    Some(backend(&name).map_err(|e| format!("REDIS_LOCK_BACKEND={name:?}: {e}"))?);
            }
        }
        Ok(self)
    }

    /// Where the locks are looked for, for error lines: the URL (without its
    /// credentials) or the sentinels and master, and how to choose another.
    pub fn describe(&self) -> String {
        match &self.master {
            Some(master) => format!(
                "master {master:?} through --sentinel {} (set --sentinel and --master)",
                self.sentinel.join(",")
            ),
            None => format!("{} (set --url or REDIS_URL)", shown_url(&self.url)),
        }
    }

    pub fn target(&self) -> Result<Target, String> {
        if let Some(master) = &self.master {
            let sentinels = self.sentinel.iter().map(|addr| format!("redis://{addr}/"));
            return Sentinel::new(sentinels, master.as_str())
                .map(Target::Sentinel)
                .map_err(|e| format!("bad --sentinel: {}", crate::exit::describe(&e)));
        }
        if self.cluster {
            return redis::cluster::ClusterClient::new(vec![self.url.as_str()])
                .map(|cluster| Target::Cluster(Box::new(cluster)))
                .map_err(|e| format!("bad --url {:?}: {}", self.url, crate::exit::plain(&e)));
        }
        redis::Client::open(self.url.as_str())
            .map(Target::Url)
            .map_err(|e| format!("bad --url {:?}: {}", self.url, crate::exit::plain(&e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clap_error_keeps_what_it_names_in_one_line() {
        let text = "error: the following required arguments were not provided:\n  --owner <OWNER>\n\nUsage: redis-lock release --owner <OWNER> <KEY>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(text),
            "the following required arguments were not provided: --owner <OWNER>"
        );
        assert_eq!(one_line(""), "bad arguments");
    }

    /// `run` tells its child the connection it was given; `guard` takes it back, where
    /// its own command line names none. (The only test of this binary that touches
    /// these variables.)
    #[test]
    fn guard_takes_the_connection_of_the_run_it_is_under_unless_given_one() {
        let parse = |line: &[&str]| {
            Cli::try_parse_from(line)
                .expect("a command line")
                .connection
        };
        let sentinel = parse(&[
            "redis-lock",
            "--sentinel",
            "10.0.0.1:26379,10.0.0.2:26379",
            "--master",
            "main",
            "run",
            "k",
            "--",
            "true",
        ]);
        let cluster = parse(&[
            "redis-lock",
            "--cluster",
            "--url",
            "redis://a:1/",
            "info",
            "k",
        ]);
        assert_eq!(
            sentinel.child_env(),
            [
                (
                    "REDIS_LOCK_SENTINEL",
                    "10.0.0.1:26379,10.0.0.2:26379".to_string()
                ),
                ("REDIS_LOCK_MASTER", "main".to_string())
            ]
        );
        assert_eq!(
            cluster.child_env(),
            [
                ("REDIS_LOCK_URL", "redis://a:1/".to_string()),
                ("REDIS_LOCK_CLUSTER", "1".to_string())
            ]
        );
        for (name, value) in [
            ("REDIS_LOCK_URL", "redis://u:pw@10.0.0.9:6380/"),
            ("REDIS_LOCK_CLUSTER", "1"),
            ("REDIS_LOCK_BACKEND", "functions"),
        ] {
            std::env::set_var(name, value);
        }
        let guard = ["redis-lock", "guard", "--", "SET", "k", "v"];
        let under = parse(&guard).under_run(Given::default()).unwrap();
        assert_eq!(under.url, "redis://u:pw@10.0.0.9:6380/");
        assert!(under.cluster);
        assert_eq!(under.backend, Some(Backend::Functions));
        let given = Given {
            place: true,
            backend: true,
        };
        let own = parse(&guard).under_run(given).unwrap();
        assert!(!own.cluster && own.backend.is_none(), "{own:?}");
        std::env::set_var("REDIS_LOCK_BACKEND", "nonsense");
        let error = parse(&guard).under_run(Given::default()).unwrap_err();
        assert!(error.contains("REDIS_LOCK_BACKEND"), "{error}");
        for name in CHILD_CONNECTION {
            std::env::remove_var(name);
        }
    }

    #[test]
    fn urls_are_shown_without_credentials() {
        assert_eq!(
            shown_url("redis://user:secret@db:6380/0"),
            "redis://db:6380/0"
        );
        assert_eq!(
            shown_url("redis://127.0.0.1:6379/"),
            "redis://127.0.0.1:6379/"
        );
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Take the lock at KEY, run COMMAND while holding it, release it when COMMAND exits.
    Run(RunArgs),
    /// Campaign to lead the election at KEY (in the server's queue) and run COMMAND,
    /// a daemon, while this process leads; stop its group when leadership is lost,
    /// before a rival can lead; resign on SIGTERM once it is gone.
    Elect(ElectArgs),
    /// Print the leader of the election at KEY: its term and value.
    Leader(LeaderArgs),
    /// Show who holds the lock at KEY, with TTLs, tokens and waiters.
    Info {
        key: String,
        /// As one JSON object, for scripts.
        #[arg(long)]
        json: bool,
    },
    /// Install the redislock function library, for servers that cannot load the module.
    Functions {
        #[command(subcommand)]
        action: Functions,
    },
    /// List the locks held (key, mode, holders with owner, TTL and token, waiters), on
    /// the server or every master of a Cluster. SCANs in bounded steps: safe on a
    /// keyspace of millions.
    List(ListArgs),
    /// Print the module's INFO lock; with --interval, the rates of its counters.
    Stats(StatsArgs),
    /// In a job under `run`: run a Redis command only while the job's lock is held with
    /// its token (LOCK.GUARD, or the library's lock_guard), and print the reply.
    Guard(GuardArgs),
    /// End OWNER's holding of the lock at KEY (the administrator's force-release is DEL).
    Release {
        key: String,
        /// The owner id the holding was taken with (`run --owner`).
        #[arg(long, value_parser = owner)]
        owner: String,
    },
}

#[derive(Args, Debug)]
#[command(
    after_help = "For a job under `redis-lock run`, which gives it REDIS_LOCK_KEY, \
                  REDIS_LOCK_TOKEN and its own connection (REDIS_LOCK_URL, or \
                  REDIS_LOCK_SENTINEL and REDIS_LOCK_MASTER, REDIS_LOCK_CLUSTER, and \
                  REDIS_LOCK_BACKEND): `redis-lock guard -- SET report:out done` runs the \
                  SET only while the job's token holds the lock, in one step on the server. \
                  Connection options given here win over run's. In a Cluster the command's \
                  keys share the lock key's hash slot ({report}, {report}:out)."
)]
pub struct GuardArgs {
    /// The Redis command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only keys that match this glob-style pattern (SCAN's MATCH), e.g. `jobs:*`.
    pub pattern: Option<String>,
    /// One JSON document (`{"locks": [...]}`), for scripts.
    #[arg(long)]
    pub json: bool,
    /// Keys looked at per SCAN step (its COUNT): the work each call does on the server.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub count: u32,
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    /// Sample twice this far apart and print the counters' rates per second.
    #[arg(long, value_parser = duration)]
    pub interval: Option<Duration>,
    /// With --interval: how many intervals to print.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "interval", value_parser = clap::value_parser!(u32).range(1..))]
    pub count: u32,
    /// One JSON object per sample, for scripts.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum Functions {
    /// Load (or upgrade) the library on the server with FUNCTION LOAD REPLACE and print
    /// its version; on a Cluster, on every master. Redis 7.0 or newer, Valkey.
    Load {
        /// Print the library's Lua source instead, for loading it through a console
        /// (`redis-cli -x FUNCTION LOAD REPLACE < redislock.lua`).
        #[arg(long)]
        print: bool,
        /// Replace a loaded library newer than this one too (a downgrade: until a
        /// newer one is loaded again, the locks and queues it wrote are refused).
        #[arg(long, conflicts_with = "print")]
        force: bool,
    },
}

#[derive(Args, Debug)]
#[command(
    after_help = "COMMAND gets REDIS_LOCK_KEY, REDIS_LOCK_TERM (its term, which only grows) \
                  and REDIS_LOCK_TOKEN (the same number), REDIS_LOCK_OWNER, and the \
                  connection, as under `run`: `redis-lock guard -- SET {svc}:config v` in it \
                  writes only while it leads. The value is published for `redis-lock leader`."
)]
pub struct ElectArgs {
    /// The leadership's TTL, renewed every third of it: a crashed leader is replaced
    /// after at most this long; at least 200ms.
    #[arg(long, default_value = "10s", value_parser = ttl)]
    pub ttl: Duration,
    /// What to publish as this leader's value (an address, a name; at most 1 KiB).
    /// Default: host:pid.
    #[arg(long)]
    pub value: Option<String>,
    /// After leadership is lost (and COMMAND's group is gone), campaign again and run
    /// COMMAND anew once leading, instead of exiting.
    #[arg(long)]
    pub again: bool,
    /// Exit status when leadership is lost (without --again).
    #[arg(long, default_value_t = 76)]
    pub lost_exit: u8,
    /// After a loss, how long COMMAND's process group has between SIGTERM and SIGKILL.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub kill_after: Duration,
    /// Resign as soon as COMMAND exits, even if processes it started in its group
    /// still run.
    #[arg(long)]
    pub no_wait_group: bool,
    /// The election's key (its lock); the value is kept beside it, in its hash slot.
    pub key: String,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct LeaderArgs {
    /// The election's key.
    pub key: String,
    /// Print each new leader as it takes office, in term order, until stopped.
    #[arg(long)]
    pub watch: bool,
    /// As JSON objects, one per line, for scripts.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The holding's TTL, renewed every third of it while COMMAND runs; at least 200ms.
    #[arg(long, default_value = "30s", value_parser = ttl)]
    pub ttl: Duration,
    /// Wait in the server's queue up to this long when the lock is busy ("forever":
    /// no limit). Without it, a busy lock exits at once.
    #[arg(long, value_parser = wait)]
    pub wait: Option<Wait>,
    /// Exit status when the lock is busy.
    #[arg(long, default_value_t = 75)]
    pub busy_exit: u8,
    /// Exit status when the lock is lost while COMMAND runs.
    #[arg(long, default_value_t = 76)]
    pub lost_exit: u8,
    /// After a loss, how long COMMAND's process group has between SIGTERM and
    /// SIGKILL; `run` exits only once the whole group is gone.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub kill_after: Duration,
    /// Release the lock as soon as COMMAND exits, even if processes it started in its
    /// group still run (by default the lock is held until the group is empty).
    #[arg(long)]
    pub no_wait_group: bool,
    /// The owner id to hold the lock as (default: a fresh `host:pid:random`).
    #[arg(long, value_parser = owner)]
    pub owner: Option<String>,
    /// Take a shared holding (a read lock): runs beside other shared holders, never
    /// beside an exclusive one.
    #[arg(long, conflicts_with = "limit")]
    pub shared: bool,
    /// Take one of N shared holdings (a semaphore: at most N commands at once).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(redis_lock_client::MAX_PERMITS)))]
    pub limit: Option<u32>,
    /// The lock's key.
    pub key: String,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// The shortest `--ttl` that renewing can keep. Under 500 ms the lease ends 50 ms
/// before the server's TTL (the client's margin for clock rate), and the first
/// renewal goes out at a third of the TTL: at 200 ms that leaves 83 ms, a few round
/// trips with a retry, for a renewal to be acknowledged. Shorter TTLs lose the lock
/// to one slow reply (at 100 ms, 17 ms), and under 50 ms there is no lease at all.
pub const MIN_TTL: Duration = Duration::from_millis(200);

fn ttl(text: &str) -> Result<Duration, String> {
    let ttl = duration(text)?;
    if ttl < MIN_TTL {
        return Err(format!(
            "{text:?} is too short to renew: at least {} (renewals go out every third \
             of the TTL and must be acknowledged before the lease's margin)",
            humantime::format_duration(MIN_TTL)
        ));
    }
    Ok(ttl)
}

/// An owner id: not empty (the server's longest, `lock.max-owner-len`, is its own to
/// check: it refuses with an error naming the owner, which exits 64 too).
fn owner(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("an owner id must not be empty".into());
    }
    Ok(text.to_string())
}

fn backend(text: &str) -> Result<Backend, String> {
    text.parse::<Backend>().map_err(|e| e.to_string())
}

fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration ({e}); e.g. 30s, 2m, 1h30m"))
}

fn wait(text: &str) -> Result<Wait, String> {
    if text == "forever" {
        return Ok(Wait::Forever);
    }
    duration(text).map(Wait::For)
}
