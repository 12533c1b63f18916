//! `LOCK.LAPSE key owner token [owner token …]`: the effect of shared holdings that
//! lapsed together on the master (a settle that found several), as replicas and the
//! AOF receive it: each owner's holding with that token is removed, then the key
//! expires with the last of the others, or is deleted, as on the master. One
//! command for the whole settle: a replica pays a command's overhead once, not once
//! a holding. (A single lapse goes as `LOCK.APPLY key owner token LAPSED`.)
//!
//! Like LOCK.APPLY, accepted only where a master's decision is replayed (the
//! replication stream, AOF loading), whatever the client's ACL.

use crate::ffi::command::{KeyAccess, Param, ParamKind, Spec};
use crate::ffi::key::OpenKey;
use crate::ffi::{Arg, Argv, Ctx, RString};
use crate::propagate::{self, Applied};
use crate::reply::Reply;
use redis_lock_core::args::parse_lapse;
use redis_lock_core::store;

pub const SPEC: Spec = Spec {
    name: c"lock.lapse",
    flags: c"write admin",
    arity: -4,
    acl_categories: c"write admin dangerous",
    key_access: KeyAccess::ReadWrite,
    summary: c"Internal: the replication form of shared holdings that lapsed together on the master. Refused from every client; only the replication stream and AOF loading run it.",
    complexity: c"O(k log n) for k lapsed of n holdings",
    params: &[
        Param::new(c"key", ParamKind::Key),
        Param {
            multiple: true,
            parts: &[
                Param::new(c"owner", ParamKind::String),
                Param::new(c"token", ParamKind::Integer),
            ],
            ..Param::new(c"holding", ParamKind::Block)
        },
    ],
    history: &[],
    runs_command_at: None,
};

/// What a client that calls LOCK.LAPSE gets.
pub const REFUSED: &str =
    "ERR LOCK.LAPSE is internal: only a master's replication stream and AOF loading may run it";

pub fn lapse(ctx: Ctx, args: &Argv) -> Result<Reply, Reply> {
    if !ctx.call_site().replaying {
        return Err(Reply::error(REFUSED));
    }
    let Some(key) = args.string(1).filter(|_| args.len() >= 4) else {
        return Err(Reply::WrongArity);
    };
    let rest: Vec<&[u8]> = (2..args.len())
        .map(|i| args.string(i).map_or(&[][..], RString::as_bytes))
        .collect();
    let lapsed = parse_lapse(&rest)?;
    let mut open = OpenKey::write(ctx, key);
    let removed = store::remove_lapsed(&mut open, &lapsed)?;
    drop(open);
    propagate::applied(ctx, Arg::Str(key), Applied::Lapsed(removed));
    Ok(Reply::Ok)
}
