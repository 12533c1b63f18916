//! `redis-lock functions load [--print]`: installs or upgrades the function library.

use redis_lock_client::{Connector, LockClient};

use crate::events::{self, Events};
use crate::exit;

/// `functions load`: installs or upgrades the library, and prints its version.
pub async fn load_library<K: Connector>(locks: LockClient<K>, events: &Events) -> i32 {
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
