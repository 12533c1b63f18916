//! `redis-lock functions load [--print] [--force]`: installs or upgrades the function
//! library.

use redis::Value;
use redis_lock_client::{Error, LockClient, LIBRARY_VERSION};

use crate::events::{self, Events};
use crate::exit;
use crate::nodes::{Node, Nodes};

/// `functions load`: installs or upgrades the library, and prints its version. A
/// loaded library newer than this one is kept (naming both versions, status 78)
/// unless `force`: an older library refuses what a newer one stored, so a
/// downgrade stops every lock and queue the newer one wrote until it is back.
pub async fn load_library<K: Nodes>(locks: LockClient<K>, force: bool, events: &Events) -> i32 {
    if !force {
        match newest_loaded(&locks).await {
            Ok(Some((found, node))) if found > LIBRARY_VERSION => {
                let on = if node.is_empty() {
                    String::new()
                } else {
                    format!(" on {node}")
                };
                events::line(format_args!(
                    "the server{on} runs redislock library version {found}, newer than this \
                     redis-lock's version {LIBRARY_VERSION}: not replaced (an older library \
                     refuses the locks a newer one wrote); use a redis-lock made for version \
                     {found}, or --force to downgrade anyway"
                ));
                return exit::NO_MODULE;
            }
            Ok(_) => {}
            Err(error) => return exit::failure(&error, ""),
        }
    }
    match locks.load_library().await {
        Ok(version) => {
            if events::out(&format!(
                "loaded the redislock library, version {version}\n"
            )) {
                0
            } else {
                exit::OUTPUT
            }
        }
        Err(error) => {
            events.say(format_args!("FUNCTION LOAD failed (Redis 7.0 or newer needed; on 6.2 the client sends the library itself: --backend scripts)"));
            exit::failure(&error, "")
        }
    }
}

/// The newest library version loaded on any master, with the master's name (empty
/// for the one server); `None` where no master has one.
async fn newest_loaded<K: Nodes>(locks: &LockClient<K>) -> Result<Option<(i64, String)>, Error> {
    let mut newest: Option<(i64, String)> = None;
    for mut node in locks.connector().masters().await? {
        if let Some(version) = loaded_version(&mut node).await? {
            if newest.as_ref().is_none_or(|(n, _)| version > *n) {
                newest = Some((version, node.name()));
            }
        }
    }
    Ok(newest)
}

/// What `lock_version` answers on `node`; `None` without a library (or `FUNCTION`).
async fn loaded_version(node: &mut Node) -> Result<Option<i64>, Error> {
    let mut version = redis::cmd("FCALL_RO");
    version.arg("lock_version").arg(0);
    match node.query(version).await {
        Ok(Value::Int(version)) => Ok(Some(version)),
        // Function not found, or no FUNCTION for this user (a server's error can
        // come back as a value).
        Ok(Value::ServerError(_)) => Ok(None),
        Ok(other) => Err(Error::UnexpectedReply(format!("lock_version: {other:?}"))),
        Err(error) if error.code().is_some() => Ok(None),
        Err(error) => Err(error.into()),
    }
}
