//! The wire protocol as a client speaks it: the limits the server enforces and the
//! argument vectors of each call, for the module's `LOCK.*` commands and the
//! `redislock` function library alike (their arguments after the key are the same).
//!
//! The module parses with [`crate::args`]; a client builds its calls here, from the
//! same constants, so it never sends what the server refuses nor refuses what the
//! server takes. `tests` below parse every vector built here with the module's own
//! parser.

use crate::args::{MAX_DURATION_MS, MAX_LIMIT};
use crate::holdings::Kind;

/// The largest TTL or wait the server accepts, in ms: [`MAX_DURATION_MS`], 2^62 - 1.
pub const MAX_MILLIS: u64 = MAX_DURATION_MS.unsigned_abs();

/// The most permits a semaphore (`LIMIT n`) may have: 2^31.
pub const MAX_PERMITS: u32 = MAX_LIMIT;

/// The longest owner id a new holding may have by default (`lock.max-owner-len`;
/// the library's fixed limit).
pub const DEFAULT_MAX_OWNER_LEN: usize = 256;

/// The name `FUNCTION LOAD` registers the library under.
pub const LIBRARY_NAME: &str = "redislock";

/// The version of the `redislock` library in this repository (`lua/redislock.lua`'s
/// `local VERSION`, what its `lock_version` answers). Every change of the library's
/// stored format or of any reply makes a new version (docs/PROTOCOL.md, "Versions").
pub const LIBRARY_VERSION: i64 = 3;

/// The oldest library version a client of this protocol accepts. Version 1 changed
/// its stored format twice under one number, so a client cannot know what it reads.
pub const MIN_LIBRARY_VERSION: i64 = 2;

/// The library versions a client of this protocol accepts: an older library may
/// misread what this client's library writes, a newer one may answer what this
/// client does not know.
pub const LIBRARY_VERSIONS: std::ops::RangeInclusive<i64> = MIN_LIBRARY_VERSION..=LIBRARY_VERSION;

/// The longest lease of a queue place (`lock_wait … LEASE ms`).
pub const MAX_PLACE_LEASE_MS: u64 = 60_000;

// The constants of the client's promise (contract.md "Clients"). Every client of
// the project uses these values: the Rust client from here, the others from
// `conformance/protocol.json`, which `tests::protocol_json` writes from this list,
// and whose values each client's conformance adapter reports back in its hello
// (conformance/ADAPTER.md).

/// A holding is renewed every TTL / this: at a third of its TTL, so two renewals
/// can fail (a blip, a reconnect) before the lease runs out.
pub const RENEWAL_DIVISOR: u32 = 3;

/// The lease ends `lease_margin_ms(ttl)` before *send time + TTL*: this share of the
/// TTL, in percent, absorbs a holder's clock running up to 10% slow.
pub const LEASE_MARGIN_PERCENT: u32 = 10;

/// … and at least this many ms, for the wake-up of whoever waits on the loss signal.
pub const LEASE_MARGIN_MIN_MS: u64 = 50;

/// How long past its timeout a wait may go unanswered before the client gives up on
/// the server. The server answers a wait that ran out at its end, so the margin only
/// has to cover the reply's way back on a busy machine: a timed-out `WAIT` or `BLPOP`
/// is answered up to 1000/`hz` ms late (100 ms at the default `hz 10`), and on the
/// library the last `BLPOP` is followed by a `lock_wait` and a `lock_cancel`. One
/// second keeps a loaded server from being taken for a hung one, which would give up
/// a wait the server was still answering; half a second did not on a loaded 2-core
/// machine.
pub const WAIT_MARGIN_MS: u64 = 1_000;

/// How long the withdrawal sent after an unanswered wait may take: the server is
/// not answering, so it is sent rather than waited for; a wait's whole bound when
/// the server hangs is its timeout + [`WAIT_MARGIN_MS`] + this.
pub const WITHDRAW_AFTER_TIMEOUT_MS: u64 = 100;

/// How long a release, an extend outside the renewer, or the withdrawal of an
/// acquire cancelled or failed for another reason may take before it is given up:
/// the holding's TTL then ends it.
pub const RELEASE_LIMIT_MS: u64 = 1_000;

/// How long opening a connection, the backend probe, or an acquire that does not
/// wait may take.
pub const CONTROL_LIMIT_MS: u64 = 2_000;

/// How much earlier than *send time + `ttl_ms`* a lease ends:
/// [`LEASE_MARGIN_PERCENT`] of the TTL, at least [`LEASE_MARGIN_MIN_MS`], never more
/// than the TTL (a lock that short has no lease time at all).
pub fn lease_margin_ms(ttl_ms: u64) -> u64 {
    let share = ttl_ms / 100 * u64::from(LEASE_MARGIN_PERCENT)
        + ttl_ms % 100 * u64::from(LEASE_MARGIN_PERCENT) / 100;
    share.max(LEASE_MARGIN_MIN_MS).min(ttl_ms)
}

/// How often a holding of `ttl_ms` is renewed, at least every ms.
pub fn renewal_period_ms(ttl_ms: u64) -> u64 {
    (ttl_ms / u64::from(RENEWAL_DIVISOR)).max(1)
}

/// The library `source` as `SCRIPT LOAD` takes it: without its `#!lua` line, which
/// Lua 5.1 cannot parse (docs/PROTOCOL.md, "Loading"). The one place this is
/// written for the Rust crates (the client and the test kit).
pub fn library_script(source: &str) -> &str {
    match source.split_once('\n') {
        Some((first, rest)) if first.starts_with("#!") => rest,
        _ => source,
    }
}

/// `conformance/protocol.json`: the constants above as JSON, for the clients in
/// other languages and the conformance harness (conformance/ADAPTER.md names each
/// field). `tests::protocol_json_is_written_from_these_constants` keeps the file
/// equal to this.
pub fn protocol_json() -> String {
    let fields: [(&str, String); 9] = [
        ("renewal_divisor", RENEWAL_DIVISOR.to_string()),
        ("lease_margin_percent", LEASE_MARGIN_PERCENT.to_string()),
        ("lease_margin_min_ms", LEASE_MARGIN_MIN_MS.to_string()),
        ("wait_margin_ms", WAIT_MARGIN_MS.to_string()),
        (
            "withdraw_after_timeout_ms",
            WITHDRAW_AFTER_TIMEOUT_MS.to_string(),
        ),
        ("release_limit_ms", RELEASE_LIMIT_MS.to_string()),
        ("control_limit_ms", CONTROL_LIMIT_MS.to_string()),
        ("library_version", LIBRARY_VERSION.to_string()),
        ("min_library_version", MIN_LIBRARY_VERSION.to_string()),
    ];
    let body: Vec<String> = fields
        .iter()
        .map(|(name, value)| format!("  \"{name}\": {value}"))
        .collect();
    format!(
        "{{\n  \"comment\": \"written by core/src/protocol.rs (cargo test -p redis-lock-core): do not edit\",\n{}\n}}\n",
        body.join(",\n")
    )
}

/// The suffix of the library's queue hash, the one side key of a lock that is a
/// hash (docs/PROTOCOL.md, "Keys").
pub const LIBRARY_QUEUE_SUFFIX: &[u8] = b":lockq";

/// Whether `key` is named as the library's queue hash of some lock `K`, and so is
/// not a lock itself: `K{K}:lockq` for a `K` without braces, `K:lockq` for a `K`
/// with them. Either has a brace before the suffix, which no name of the first
/// form lacks; a key without braces ending in `:lockq` may be a lock.
pub fn is_library_queue_key(key: &[u8]) -> bool {
    key.strip_suffix(LIBRARY_QUEUE_SUFFIX)
        .is_some_and(|rest| rest.iter().any(|&b| b == b'{' || b == b'}'))
}

/// An argument the server would refuse, found before anything is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    /// A TTL of 0 ms.
    ZeroTtl,
    /// A TTL or wait over [`MAX_MILLIS`]; names which.
    OutOfRange(&'static str),
    /// A `LIMIT` outside 1 to [`MAX_PERMITS`].
    BadLimit(u32),
    /// An empty owner id.
    EmptyOwner,
}

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtocolError::ZeroTtl => f.write_str(
                "ttl must be positive: a lock of 0 ms would be gone before it is granted",
            ),
            ProtocolError::OutOfRange(what) => {
                write!(f, "{what} is out of range: at most {MAX_MILLIS} ms")
            }
            ProtocolError::BadLimit(n) => write!(
                f,
                "limit {n}: a semaphore has from 1 to {MAX_PERMITS} permits"
            ),
            ProtocolError::EmptyOwner => f.write_str("an owner id must not be empty"),
        }
    }
}

impl std::error::Error for ProtocolError {}

/// A TTL in ms as the server takes it: 1 to [`MAX_MILLIS`].
pub fn ttl_ms(ms: u64) -> Result<u64, ProtocolError> {
    match ms {
        0 => Err(ProtocolError::ZeroTtl),
        ms if ms > MAX_MILLIS => Err(ProtocolError::OutOfRange("ttl")),
        ms => Ok(ms),
    }
}

/// A wait's timeout in ms as `WAIT` takes it: 0 (no limit) to [`MAX_MILLIS`].
pub fn wait_ms(ms: u64) -> Result<u64, ProtocolError> {
    if ms > MAX_MILLIS {
        return Err(ProtocolError::OutOfRange("wait"));
    }
    Ok(ms)
}

fn owner_arg(owner: &[u8]) -> Result<Vec<u8>, ProtocolError> {
    if owner.is_empty() {
        return Err(ProtocolError::EmptyOwner);
    }
    Ok(owner.to_vec())
}

fn number(n: u64) -> Vec<u8> {
    n.to_string().into_bytes()
}

fn kind_args(kind: Kind, args: &mut Vec<Vec<u8>>) -> Result<(), ProtocolError> {
    match kind {
        Kind::Exclusive => {}
        Kind::Shared { limit: None } => args.push(b"SHARED".to_vec()),
        Kind::Shared { limit: Some(n) } if (1..=MAX_PERMITS).contains(&n) => {
            args.push(b"LIMIT".to_vec());
            args.push(number(u64::from(n)));
        }
        Kind::Shared { limit: Some(n) } => return Err(ProtocolError::BadLimit(n)),
    }
    Ok(())
}

/// `owner ttl [SHARED | LIMIT n] [WAIT timeout]`: the arguments after the key of
/// `LOCK.ACQUIRE` and of the library's `lock_acquire`.
pub fn acquire_args(
    owner: &[u8],
    ttl: u64,
    kind: Kind,
    wait: Option<u64>,
) -> Result<Vec<Vec<u8>>, ProtocolError> {
    let mut args = vec![owner_arg(owner)?, number(ttl_ms(ttl)?)];
    kind_args(kind, &mut args)?;
    if let Some(wait) = wait {
        args.push(b"WAIT".to_vec());
        args.push(number(wait_ms(wait)?));
    }
    Ok(args)
}

/// `owner ttl [SHARED | LIMIT n] [LEASE ms]`: the arguments after the key of the
/// library's `lock_wait` (docs/PROTOCOL.md). No lease: the library's default.
pub fn wait_args(
    owner: &[u8],
    ttl: u64,
    kind: Kind,
    lease: Option<u64>,
) -> Result<Vec<Vec<u8>>, ProtocolError> {
    let mut args = vec![owner_arg(owner)?, number(ttl_ms(ttl)?)];
    kind_args(kind, &mut args)?;
    if let Some(lease) = lease {
        args.push(b"LEASE".to_vec());
        args.push(number(lease.clamp(1, MAX_PLACE_LEASE_MS)));
    }
    Ok(args)
}

/// `owner ttl`: the arguments after the key of `LOCK.EXTEND` and `lock_extend`.
pub fn extend_args(owner: &[u8], ttl: u64) -> Result<Vec<Vec<u8>>, ProtocolError> {
    Ok(vec![owner_arg(owner)?, number(ttl_ms(ttl)?)])
}

/// `owner`: the arguments after the key of `LOCK.RELEASE`, `lock_release` and
/// `lock_cancel`.
pub fn owner_args(owner: &[u8]) -> Result<Vec<Vec<u8>>, ProtocolError> {
    Ok(vec![owner_arg(owner)?])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{parse_acquire, parse_extend, Limits, Wait};

    #[test]
    fn the_library_queue_keys_are_told_by_name() {
        for queue in [
            &b"jobs:1{jobs:1}:lockq"[..],
            b"{jobs}:2:lockq",
            b"a{b}c:lockq",
            b"a}b:lockq",
        ] {
            assert!(is_library_queue_key(queue), "{queue:?}");
        }
        for lock in [&b"jobs:1"[..], b"jobs:lockq", b"{jobs}:1", b"lockq", b""] {
            assert!(!is_library_queue_key(lock), "{lock:?}");
        }
    }

    /// `lua/redislock.lua`'s `local VERSION = n` is [`LIBRARY_VERSION`]: a library
    /// changed without its constant here (or the reverse) fails.
    #[test]
    fn the_library_in_the_repository_is_library_version() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../lua/redislock.lua");
        let source = std::fs::read_to_string(path).expect("lua/redislock.lua");
        let versions: Vec<&str> = source
            .lines()
            .filter_map(|line| line.strip_prefix("local VERSION = "))
            .collect();
        assert_eq!(versions, [LIBRARY_VERSION.to_string()], "{path}");
        assert!(LIBRARY_VERSIONS.contains(&LIBRARY_VERSION));
    }

    const LIMITS: Limits = Limits {
        max_ttl: 0,
        max_owner_len: DEFAULT_MAX_OWNER_LEN,
    };

    fn slices(args: &[Vec<u8>]) -> Vec<&[u8]> {
        args.iter().map(Vec::as_slice).collect()
    }

    #[test]
    fn every_acquire_built_here_is_parsed_back_by_the_module() {
        let kinds = [
            Kind::Exclusive,
            Kind::Shared { limit: None },
            Kind::Shared { limit: Some(1) },
            Kind::Shared {
                limit: Some(MAX_PERMITS),
            },
        ];
        for kind in kinds {
            for (ttl, wait) in [(1, None), (MAX_MILLIS, Some(0)), (30_000, Some(MAX_MILLIS))] {
                let args = acquire_args(b"me", ttl, kind, wait).unwrap();
                let parsed = parse_acquire(&slices(&args), &LIMITS).unwrap();
                assert_eq!(parsed.owner, b"me");
                assert_eq!(parsed.ttl.unsigned_abs(), ttl);
                assert_eq!(parsed.kind, kind);
                let wait_back = parsed.wait.map(|w| match w {
                    Wait::Forever => 0,
                    Wait::Millis(ms) => ms.unsigned_abs(),
                });
                assert_eq!(wait_back, wait);
            }
        }
        let args = extend_args(b"me", MAX_MILLIS).unwrap();
        assert_eq!(
            parse_extend(&slices(&args), &LIMITS).unwrap().ttl,
            MAX_DURATION_MS
        );
    }

    #[test]
    fn what_the_module_refuses_is_refused_before_sending() {
        // 2^62 itself is one over the server's bound.
        for ttl in [0, MAX_MILLIS + 1, 1 << 62, u64::MAX] {
            assert!(
                acquire_args(b"me", ttl, Kind::Exclusive, None).is_err(),
                "{ttl}"
            );
            let text = ttl.to_string();
            assert!(
                parse_acquire(&[b"me".as_slice(), text.as_bytes()], &LIMITS).is_err(),
                "{ttl}"
            );
        }
        assert!(acquire_args(b"me", 1, Kind::Exclusive, Some(MAX_MILLIS + 1)).is_err());
        for limit in [0, MAX_PERMITS + 1] {
            let kind = Kind::Shared { limit: Some(limit) };
            assert_eq!(
                acquire_args(b"me", 1, kind, None),
                Err(ProtocolError::BadLimit(limit))
            );
        }
        assert_eq!(extend_args(b"", 1), Err(ProtocolError::EmptyOwner));
        assert_eq!(owner_args(b""), Err(ProtocolError::EmptyOwner));
    }

    #[test]
    fn the_script_is_the_library_without_its_shebang_line() {
        assert_eq!(
            library_script("#!lua name=redislock\nlocal x = 1\n"),
            "local x = 1\n"
        );
        assert_eq!(library_script("local x = 1\n"), "local x = 1\n");
        assert_eq!(
            library_script("#!lua name=redislock"),
            "#!lua name=redislock"
        );
        assert_eq!(library_script(""), "");
    }

    #[test]
    fn protocol_json_is_written_from_these_constants() {
        // Written, not only compared: a constant changed here reaches the file on the
        // next `cargo test`, and this test fails once so the change is committed.
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("conformance")
            .join("protocol.json");
        let json = protocol_json();
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        if on_disk != json {
            std::fs::write(&path, &json).unwrap();
            panic!(
                "{} was out of date and is rewritten: commit it",
                path.display()
            );
        }
    }

    #[test]
    fn the_lease_margin_is_a_tenth_at_least_50_ms_and_at_most_the_ttl() {
        assert_eq!(lease_margin_ms(30_000), 3_000);
        assert_eq!(lease_margin_ms(3_000), 300);
        assert_eq!(lease_margin_ms(1_234), 123);
        assert_eq!(lease_margin_ms(200), 50);
        assert_eq!(lease_margin_ms(20), 20);
        assert_eq!(lease_margin_ms(MAX_MILLIS), MAX_MILLIS / 10);
        assert_eq!(renewal_period_ms(3_000), 1_000);
        assert_eq!(renewal_period_ms(2), 1);
    }

    #[test]
    fn a_wait_call_names_its_mode_and_lease() {
        let args = wait_args(b"me", 500, Kind::Shared { limit: Some(3) }, Some(0)).unwrap();
        assert_eq!(
            args,
            [&b"me"[..], b"500", b"LIMIT", b"3", b"LEASE", b"1"].map(<[u8]>::to_vec)
        );
        assert_eq!(
            wait_args(b"me", 500, Kind::Exclusive, None).unwrap().len(),
            2
        );
    }
}
