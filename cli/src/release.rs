//! `redis-lock release KEY --owner ID`: ends that owner's holding.

use redis_lock_client::{Connector, LockClient};

use crate::events::{self, Events};
use crate::exit;

pub async fn release<K: Connector>(
    locks: LockClient<K>,
    key: &str,
    owner: &str,
    events: &Events,
) -> i32 {
    match locks.release_owner(key, owner).await {
        Ok(true) => {
            events.say(format_args!(
                "released {key} (owner {})",
                events::escaped(owner.as_bytes())
            ));
            0
        }
        Ok(false) => {
            events::line(format_args!(
                "{key} is not held by {}",
                events::escaped(owner.as_bytes())
            ));
            exit::NOT_HELD
        }
        Err(error) => exit::failure(&error, key),
    }
}
