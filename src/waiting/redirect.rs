//! A cluster slot being migrated away: a free lock there is not granted here, since
//! MIGRATE may just have carried it, held, to the target, and Redis sends a client
//! that writes a missing key of such a slot to the target. Its waiters are sent
//! there too, with the same `-ASK` redirect, and queue again behind its holder.

use redis_lock_core::cluster::migrating_target;

use crate::ffi::Ctx;

/// The `ASK slot host:port` redirect for `key`, if this node is migrating its slot.
pub fn migrating(ctx: Ctx, key: &[u8]) -> Option<String> {
    let slot = ctx.cluster_key_slot(key)?;
    let nodes = ctx.cluster_nodes()?;
    let target = migrating_target(&nodes, slot)?;
    Some(format!("ASK {slot} {target}"))
}
