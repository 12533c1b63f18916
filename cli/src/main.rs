//! `redis-lock`: run any command under a Redis lock, from cron, systemd or a
//! Kubernetes CronJob, in any language, without code.
//!
//! ```text
//! redis-lock run --ttl 2m report:daily -- /usr/local/bin/build-report
//! redis-lock info report:daily --json
//! redis-lock list 'report:*'
//! redis-lock stats --interval 1s
//! redis-lock release report:daily --owner worker-7
//! redis-lock functions load --url rediss://my-elasticache:6379/   # no module there
//! redis-lock guard -- SET report:daily:out done   # in a job under `run`
//! redis-lock elect --value 10.0.0.7:8080 scheduler -- /usr/local/bin/scheduler
//! redis-lock leader scheduler --watch
//! ```

mod args;
mod elect;
mod events;
mod exit;
mod fault;
mod functions;
mod group;
mod guard;
mod info;
mod leader;
mod list;
mod nodes;
mod release;
mod reply;
mod run;
mod stats;
mod why;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};
use redis_lock_client::{LockClient, Sentinel, LIBRARY_SOURCE};

use args::{Cli, Command, Functions, Given, Target};
use events::Events;
use nodes::Nodes;

fn main() {
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, given(&matches))));
    let (cli, given) = match parsed {
        Ok(parsed) => parsed,
        Err(error) if error.use_stderr() => {
            // A one-line cause, as for every other error, then clap's usage hint.
            events::line(args::one_line(&error.to_string()));
            events::line("see `redis-lock --help`");
            std::process::exit(exit::USAGE);
        }
        Err(help_or_version) => {
            let _ = help_or_version.print();
            std::process::exit(0);
        }
    };
    let events = Events::new(cli.quiet);
    events.install_tracing();
    group::install_panic_hook();
    // rediss:// URLs: rustls's crypto, ring's, for the whole process (redis-rs builds its
    // TLS configurations on the process default). Fails only if one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            events::line(format_args!("cannot start: {error}"));
            std::process::exit(exit::SOFTWARE);
        }
    };
    let code = runtime.block_on(dispatch(cli, given, events));
    std::process::exit(code);
}

/// Which connection options the command line gave itself.
fn given(matches: &ArgMatches) -> Given {
    let on_command_line = |name: &str| {
        let mut found = matches.value_source(name) == Some(ValueSource::CommandLine);
        let mut sub = matches.subcommand();
        while let Some((_, inner)) = sub {
            found |= inner.value_source(name) == Some(ValueSource::CommandLine);
            sub = inner.subcommand();
        }
        found
    };
    Given {
        place: ["url", "sentinel", "master", "cluster"]
            .into_iter()
            .any(on_command_line),
        backend: on_command_line("backend"),
    }
}

/// Opens the connector the options name and runs the subcommand on it.
async fn dispatch(cli: Cli, given: Given, events: Events) -> i32 {
    if let Command::Functions {
        action: Functions::Load { print: true, .. },
    } = cli.command
    {
        return if events::out(LIBRARY_SOURCE.trim_end()) {
            0
        } else {
            exit::OUTPUT
        };
    }
    let connection = match &cli.command {
        Command::Guard(_) => match cli.connection.under_run(given) {
            Ok(connection) => connection,
            Err(message) => {
                events::line(message);
                return exit::USAGE;
            }
        },
        _ => cli.connection,
    };
    let backend = connection.backend;
    exit::set_server(connection.describe());
    let child_env = connection.child_env();
    let target = match connection.target() {
        Ok(target) => target,
        Err(message) => {
            events::line(message);
            return exit::USAGE;
        }
    };
    let on_server = On {
        command: cli.command,
        events,
        child_env,
    };
    match target {
        Target::Url(client) => on(LockClient::new(client).backend(backend), on_server).await,
        Target::Sentinel(sentinel) => {
            on(
                LockClient::<Sentinel>::new(sentinel).backend(backend),
                on_server,
            )
            .await
        }
        Target::Cluster(cluster) => on(LockClient::new(*cluster).backend(backend), on_server).await,
    }
}

/// A subcommand, with what it may need of the rest of the command line.
struct On {
    command: Command,
    events: Events,
    /// The connection as `run` passes it to its child ([`args::Connection::child_env`]).
    child_env: Vec<(&'static str, String)>,
}

async fn on<K: Nodes>(locks: LockClient<K>, on: On) -> i32 {
    let On {
        command,
        events,
        child_env,
    } = on;
    match command {
        Command::Run(args) => run::run(locks, args, child_env, events).await,
        Command::Elect(args) => elect::elect(locks, args, child_env, events).await,
        Command::Leader(args) => leader::leader(locks, args).await,
        Command::Guard(args) => guard::guard(locks, args).await,
        Command::Info { key, json } => info::info(locks, &key, json).await,
        Command::List(args) => list::list(locks, args).await,
        Command::Stats(args) => stats::stats(locks, args).await,
        Command::Release { key, owner } => release::release(locks, &key, &owner, &events).await,
        Command::Functions {
            action: Functions::Load { force, .. },
        } => functions::load_library(locks, force, &events).await,
    }
}
