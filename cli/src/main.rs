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
//! ```

mod args;
mod events;
mod exit;
mod fault;
mod functions;
mod group;
mod info;
mod list;
mod nodes;
mod release;
mod run;
mod stats;
mod why;

use clap::Parser;
use redis_lock_client::{LockClient, Sentinel, LIBRARY_SOURCE};

use args::{Cli, Command, Functions, Target};
use events::Events;
use nodes::Nodes;

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
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
    let code = runtime.block_on(dispatch(cli, events));
    std::process::exit(code);
}

/// Opens the connector the options name and runs the subcommand on it.
async fn dispatch(cli: Cli, events: Events) -> i32 {
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
    let backend = cli.connection.backend;
    exit::set_server(cli.connection.describe());
    let target = match cli.connection.target() {
        Ok(target) => target,
        Err(message) => {
            events::line(message);
            return exit::USAGE;
        }
    };
    match target {
        Target::Url(client) => {
            on(
                LockClient::new(client).backend(backend),
                cli.command,
                events,
            )
            .await
        }
        Target::Sentinel(sentinel) => {
            let locks = LockClient::<Sentinel>::new(sentinel).backend(backend);
            on(locks, cli.command, events).await
        }
        Target::Cluster(cluster) => {
            on(
                LockClient::new(*cluster).backend(backend),
                cli.command,
                events,
            )
            .await
        }
    }
}

async fn on<K: Nodes>(locks: LockClient<K>, command: Command, events: Events) -> i32 {
    match command {
        Command::Run(args) => run::run(locks, args, events).await,
        Command::Info { key, json } => info::info(locks, &key, json).await,
        Command::List(args) => list::list(locks, args).await,
        Command::Stats(args) => stats::stats(locks, args).await,
        Command::Release { key, owner } => release::release(locks, &key, &owner, &events).await,
        Command::Functions {
            action: Functions::Load { force, .. },
        } => functions::load_library(locks, force, &events).await,
    }
}
