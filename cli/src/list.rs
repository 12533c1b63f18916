//! `redis-lock list [PATTERN]`: the locks held on the server, or on every master of
//! a Cluster.
//!
//! It never stalls a server, however many keys it has: `SCAN` with `TYPE` (the
//! module's `redislock`, or `hash` for the function library's locks) and a bounded
//! `COUNT` does a bounded amount of work per call, and the `LOCK.INFO`s of the
//! keys a step found go in one pipeline. A key whose lock lapsed between the two,
//! and a hash that is not a lock (anyone's data, decided in O(1) whatever its size),
//! answer null or an error and are not listed; the library's queue hashes are left
//! out by their names before.

use redis_lock_client::{
    is_library_queue_key, library_script, Backend, Error, LockClient, LockInfo,
};
use serde::Serialize;

use crate::args::ListArgs;
use crate::events;
use crate::exit;
use crate::info::{self, Json};
use crate::nodes::{Node, Nodes};

/// A lock found: its key, the master it lives on (on a Cluster) and its info.
struct Found {
    key: Vec<u8>,
    node: String,
    info: LockInfo,
}

pub async fn list<K: Nodes>(locks: LockClient<K>, args: ListArgs) -> i32 {
    let backend = match locks.detect_backend().await {
        Ok(backend) => backend,
        Err(error) => return exit::failure(&error, ""),
    };
    let nodes = match locks.connector().masters().await {
        Ok(nodes) => nodes,
        Err(error) => return exit::failure(&error.into(), ""),
    };
    let mut found = Vec::new();
    for mut node in nodes {
        if let Err(error) = scan(&mut node, backend, &args, &mut found).await {
            return exit::failure(&error, "");
        }
    }
    found.sort_by(|a, b| a.key.cmp(&b.key));
    let text = if args.json {
        as_json(&found)
    } else {
        as_text(&found)
    };
    if events::out(&text) {
        0
    } else {
        exit::OUTPUT
    }
}

/// The SCAN type of a backend's lock keys.
fn lock_type(backend: Backend) -> &'static str {
    match backend {
        Backend::Module => "redislock",
        _ => "hash",
    }
}

/// Scans `node` to the end, adding the locks it holds to `found`.
async fn scan(
    node: &mut Node,
    backend: Backend,
    args: &ListArgs,
    found: &mut Vec<Found>,
) -> Result<(), Error> {
    if backend == Backend::Scripts {
        // EVALSHA needs the library in the node's script cache.
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(library_script());
        node.query(load).await?;
    }
    let mut cursor: u64 = 0;
    loop {
        let mut step = redis::cmd("SCAN");
        step.arg(cursor);
        if let Some(pattern) = &args.pattern {
            step.arg("MATCH").arg(pattern);
        }
        step.arg("COUNT")
            .arg(args.count)
            .arg("TYPE")
            .arg(lock_type(backend));
        let (next, mut keys): (u64, Vec<Vec<u8>>) =
            redis::from_redis_value(node.query(step).await?)
                .map_err(|e| Error::UnexpectedReply(format!("SCAN: {e}")))?;
        if backend != Backend::Module {
            keys.retain(|key| !is_library_queue_key(key));
        }
        if !keys.is_empty() {
            let mut infos = redis::pipe();
            for key in &keys {
                infos.add_command(backend.info_command(key));
            }
            let answers = node.pipeline(infos).await?;
            for (key, answer) in keys.into_iter().zip(answers) {
                // Null: lapsed since the SCAN; an error: not a lock.
                if let Ok(Some(info)) = LockInfo::from_reply(answer) {
                    found.push(Found {
                        key,
                        node: node.name(),
                        info,
                    });
                }
            }
        }
        cursor = next;
        if cursor == 0 {
            return Ok(());
        }
    }
}

fn as_text(found: &[Found]) -> String {
    if found.is_empty() {
        return "no locks held\n".into();
    }
    let blocks: Vec<String> = found
        .iter()
        .map(|lock| {
            let mut key = events::escaped(&lock.key);
            if !lock.node.is_empty() {
                key = format!("{key} (on {})", lock.node);
            }
            info::as_text(&key, Some(&lock.info))
        })
        .collect();
    blocks.join("\n")
}

#[derive(Serialize)]
struct Listing {
    locks: Vec<Json>,
}

fn as_json(found: &[Found]) -> String {
    let listing = Listing {
        locks: found
            .iter()
            .map(|lock| Json::of(&lock.key, Some(&lock.info)).on(lock.node.clone()))
            .collect(),
    };
    let mut text = info::to_json(&listing);
    text.push('\n');
    text
}
