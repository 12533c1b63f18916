//! `LOCK.APPLY key owner token [PXAT unix-ms] [SHARED [LIMIT n]] [LAPSED] [MARK n]`:
//! the effect of a grant, as replicas and the AOF receive it. Exclusive, it stores the
//! lock exactly as given, whatever was at the key; `SHARED`, it sets that owner's
//! shared holding (granted with `LIMIT n`, if given) beside the key's others, and the
//! key expires with the last of them;
//! `LAPSED`, it removes that owner's shared holding with that token, as the master
//! did when its expiry passed. It raises the token mark, so it gives the same result
//! wherever and whenever it runs.
//!
//! Accepted only where a master's decision is replayed (the replication stream from
//! the master, and AOF loading): from any client it is refused, whatever the
//! client's ACL, since it could hand a key's lock to a forged owner or push the
//! token mark to its end. Redis 7.0 puts module commands in no ACL category, so
//! `-@admin` alone would not stop it there.

use super::common::{key_and_rest, MAX_ARGS};
use crate::ffi::command::{KeyAccess, Param, ParamKind, Spec};
use crate::ffi::key::OpenKey;
use crate::ffi::{Arg, Argv, Ctx};
use crate::propagate::{self, Applied};
use crate::reply::Reply;
use crate::state::MODULE;
use redis_lock_core::args::parse_apply;
use redis_lock_core::holdings::SharedHolding;
use redis_lock_core::owner::Owner;
use redis_lock_core::store::{self, Store, StoreError};
use redis_lock_core::Lock;

pub const SPEC: Spec = Spec {
    name: c"lock.apply",
    // `admin`: it sets any owner and token, as RESTORE sets any value.
    flags: c"write deny-oom admin",
    arity: -4,
    acl_categories: c"write admin dangerous",
    key_access: KeyAccess::Overwrite,
    summary: c"Internal: the replication form of a grant, a new expiry or a lapse, stored as given. Refused from every client; only the replication stream and AOF loading run it.",
    complexity: c"O(log n) for n holdings of the key",
    params: &[
        Param::new(c"key", ParamKind::Key),
        Param::new(c"owner", ParamKind::String),
        Param::new(c"token", ParamKind::Integer),
        Param {
            token: Some(c"PXAT"),
            optional: true,
            ..Param::new(c"unix-time-milliseconds", ParamKind::UnixTime)
        },
        Param {
            token: Some(c"SHARED"),
            optional: true,
            ..Param::new(c"shared", ParamKind::PureToken)
        },
        Param {
            token: Some(c"LIMIT"),
            optional: true,
            ..Param::new(c"limit", ParamKind::Integer)
        },
        Param {
            token: Some(c"LAPSED"),
            optional: true,
            ..Param::new(c"lapsed", ParamKind::PureToken)
        },
        Param {
            token: Some(c"MARK"),
            optional: true,
            ..Param::new(c"mark", ParamKind::Integer)
        },
    ],
    history: &[],
    runs_command_at: None,
};

/// What a client that calls LOCK.APPLY gets.
pub const REFUSED: &str =
    "ERR LOCK.APPLY is internal: only a master's replication stream and AOF loading may run it; use LOCK.ACQUIRE";

pub fn apply(ctx: Ctx, args: &Argv) -> Result<Reply, Reply> {
    if !ctx.call_site().replaying {
        return Err(Reply::error(REFUSED));
    }
    let mut buf = [&[][..]; MAX_ARGS];
    let (key, rest) = key_and_rest(args, 4, &mut buf)?;
    let request = parse_apply(rest)?;
    MODULE.mint.observe(request.token);
    if let Some(mark) = request.mark {
        MODULE.mint.observe(mark);
    }
    let mut open = OpenKey::write(ctx, key);
    let what = match (request.lapsed, request.shared, request.expires_at) {
        (true, _, _) => {
            store::remove_lapsed(&mut open, &[(request.owner, request.token)])?;
            Applied::Lapsed(1)
        }
        (false, true, Some(at)) => {
            let rewritten = request.mark.is_some();
            let holding = (request.owner, request.token, at, request.limit);
            set_shared(&mut open, holding, rewritten)?
        }
        _ => {
            // The same holding again (owner and token): a refresh or extend, which
            // moves the expiry only.
            let same = matches!(open.lock(), Some(Lock::Exclusive { owner, token })
                if owner.as_bytes() == request.owner && *token == request.token);
            if !same && !open.set_lock(Lock::exclusive(request.owner, request.token)) {
                return Err(StoreError.into());
            }
            if let Some(at) = request.expires_at {
                if !open.set_expires_at(at) {
                    return Err(StoreError.into());
                }
            }
            if same {
                Applied::Moved
            } else {
                Applied::Granted
            }
        }
    };
    drop(open);
    propagate::applied(ctx, Arg::Str(key), what);
    Ok(Reply::Ok)
}

/// Sets `owner`'s shared holding (added, or replacing its token and expiry), then
/// the key's expiry to the last of its holdings. An existing holding with the same
/// token got a new expiry (a refresh or extend); anything else is a grant. Before
/// it, the holdings follow an expiry set on the key by hand, as the master's did
/// before the same write.
///
/// A `rewritten` AOF (the `MARK` form) re-creates the stored holdings as they were,
/// one command each, and Redis sets the key's expiry after the last (none if the
/// key had none): the key's expiry is then left alone.
fn set_shared(
    open: &mut OpenKey,
    (owner, token, at, limit): (&[u8], i64, i64, Option<u32>),
    rewritten: bool,
) -> Result<Applied, StoreError> {
    if !rewritten {
        store::follow_key_expiry(open);
    }
    let (stored, what) = match open.lock_mut() {
        Some(Lock::Shared(holdings)) => match holdings.get(owner).map(|h| h.token) {
            Some(held) => {
                holdings.set(owner, token, at);
                holdings.set_limit(owner, limit);
                let what = if held == token {
                    Applied::Moved
                } else {
                    Applied::Granted
                };
                (true, what)
            }
            None => {
                holdings.push(SharedHolding {
                    token,
                    expires_at: at,
                    owner: Owner::new(owner),
                    limit,
                });
                (true, Applied::Granted)
            }
        },
        _ => (false, Applied::Granted),
    };
    if !stored && !open.put(Lock::shared(owner, token, at, limit)) {
        return Err(StoreError);
    }
    if rewritten {
        return Ok(what);
    }
    let last = open
        .lock()
        .and_then(|lock| lock.key_expiry(None))
        .unwrap_or(at);
    if open.set_key_expiry(last) {
        Ok(what)
    } else {
        Err(StoreError)
    }
}
